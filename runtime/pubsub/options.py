"""Delivery options: those every subscription takes, and those a subscriber kind declares for its own.

A kind declares its options as a frozen dataclass derived from ``KindOptions`` (REST push's
``push_*``, the file subscriber's ``file_*``): each field's default gives its type, and ``check``
says whether the values go together. ``OptionTypes``, made from what the kinds declared, turns a
subscription's given options (JSON from the admin API, the object files or the database) into
``DeliveryOptions``: the common ones typed over the server's ``[pubsub]`` defaults, each kind's by
its class, kept in ``DeliveryOptions.kinds`` (a kind reads its own with ``options.of(ItsOptions)``).
The core of pub/sub types options without knowing any kind's.

On the wire and in the database a subscription's options stay one flat JSON object, as Zato's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar, TypeVar

from runtime.config import PubSubSection
from runtime.errors import ConfigError

K = TypeVar('K', bound='KindOptions')


@dataclass(frozen=True)
class KindOptions:
    """Base of the options one subscriber kind declares: a frozen dataclass whose defaults give the types."""

    #: True: refused on subscriptions of any other kind. False: accepted there and checked, but not
    #: used (Zato's object files and clients send REST push options with every kind of subscription).
    own_kind_only: ClassVar[bool] = False
    #: How errors name the class's options together, e.g. 'file_*'.
    family: ClassVar[str] = ''
    #: Options whose values are ${CONDUIT_SECRET_...} references: never shown in errors as given.
    secret: ClassVar[tuple[str, ...]] = ()

    def check(self, where: str) -> None:
        """ConfigError unless the values go together (each already has its field's type)."""


@dataclass(frozen=True)
class DeliveryOptions:
    """How one subscription's messages are delivered: the options of every kind, and its kind's own."""

    delivery_batch_size: int = 100
    max_attempts: int = 25
    wait_sock_err: float = 10.0
    wait_non_sock_err: float = 3.0
    max_wait_secs: float = 600.0
    err_should_block: bool = True
    max_in_flight: int = 1
    hook_service: str = ''
    #: The options each kind declares, typed (those of kinds other than the subscription's at their
    #: defaults, or as given where they are accepted).
    kinds: tuple[KindOptions, ...] = ()

    def of(self, cls: type[K]) -> K:
        """The options of class cls, or its defaults when none were typed (a SubInfo made by hand)."""
        for typed in self.kinds:
            if type(typed) is cls:
                return typed  # type: ignore[return-value]
        return cls()


#: The options every subscription takes, in order.
COMMON_OPTIONS = tuple(f.name for f in fields(DeliveryOptions) if f.name != 'kinds')


def _typed(default: Any, key: str, value: Any, where: str, secret: bool) -> Any:
    """value as the type of default; ConfigError naming key (never showing a secret's value)."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, (int, float)):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0
        if ok and isinstance(default, int):
            ok = float(value).is_integer()
            value = int(value) if ok else value
    else:
        ok = isinstance(value, str)
    if not ok:
        shown = '(hidden)' if secret else repr(value)
        raise ConfigError(where, f'delivery option {key} has an invalid value {shown}')
    return value


class OptionTypes:
    """The delivery options there are (the common ones and each kind's), and their typing."""

    def __init__(self, declared: Mapping[str, type[KindOptions] | None]) -> None:
        #: The options class of each kind that declares one.
        self._classes = {kind: cls for kind, cls in declared.items() if cls is not None}
        self._kind_of = {cls: kind for kind, cls in self._classes.items()}
        #: The class declaring each kind option.
        self._owner: dict[str, type[KindOptions]] = {}
        for cls in self._classes.values():
            for f in fields(cls):
                if f.name in COMMON_OPTIONS or self._owner.get(f.name, cls) is not cls:
                    raise ValueError(f'delivery option {f.name} is declared twice')
                self._owner[f.name] = cls

    @classmethod
    def of(cls, kinds: Iterable[Any]) -> OptionTypes:
        """The option types of subscriber plug-ins (or their classes): each has ``kind`` and ``options``."""
        return cls({k.kind: getattr(k, 'options', None) for k in kinds})

    def names(self) -> tuple[str, ...]:
        """Every option's name: the common ones, then each kind's in the order they were declared."""
        return COMMON_OPTIONS + tuple(self._owner)

    def defaults(self) -> dict[str, Any]:
        """Every option's default (the common ones without the server's [pubsub] settings)."""
        return self.flat(DeliveryOptions())

    def flat(self, options: DeliveryOptions) -> dict[str, Any]:
        """Every option's value in one flat object, as the admin API shows a subscription's options."""
        out = {name: getattr(options, name) for name in COMMON_OPTIONS}
        for cls in self._classes.values():
            typed = options.of(cls)
            out.update((f.name, getattr(typed, f.name)) for f in fields(cls))
        return out

    def typed(self, settings: PubSubSection | None, kind: str, given: Mapping[str, Any] | None,
              where: str) -> DeliveryOptions:
        """The options of a subscription of kind: the [pubsub] defaults with given on top.

        ConfigError names an unknown or mistyped option, or one of another kind that is refused here.
        """
        given = given or {}
        self._refuse_foreign(kind, given, where)
        base = DeliveryOptions(**{n: getattr(settings, n) for n in COMMON_OPTIONS if hasattr(settings, n)})
        common: dict[str, Any] = {}
        by_class: dict[type[KindOptions], dict[str, Any]] = {}
        for key, value in given.items():
            if key in COMMON_OPTIONS:
                common[key] = _typed(getattr(base, key), key, value, where, False)
                continue
            cls = self._owner.get(key) if isinstance(key, str) else None
            if cls is None:
                raise ConfigError(where, f'unknown delivery option {key!r}')
            default = cls.__dataclass_fields__[key].default
            by_class.setdefault(cls, {})[key] = _typed(default, key, value, where, key in cls.secret)
        result = replace(base, **common)
        if result.delivery_batch_size < 1 or result.max_attempts < 1 or result.max_in_flight < 1:
            raise ConfigError(where, 'delivery_batch_size, max_attempts and max_in_flight must be at least 1')
        own_class = self._classes.get(kind)
        kinds = []
        for cls in self._classes.values():
            typed = cls(**by_class.get(cls, {}))
            if cls is own_class or cls in by_class:
                typed.check(where)  # another kind's options are accepted for compatibility when well-formed
            kinds.append(typed)
        return replace(result, kinds=tuple(kinds))

    def _refuse_foreign(self, kind: str, given: Mapping[str, Any], where: str) -> None:
        own_class = self._classes.get(kind)
        foreign: dict[type[KindOptions], list[str]] = {}
        for key in given:
            cls = self._owner.get(key) if isinstance(key, str) else None
            if cls is not None and cls.own_kind_only and cls is not own_class:
                foreign.setdefault(cls, []).append(key)
        if foreign:
            cls, keys = next(iter(foreign.items()))
            raise ConfigError(where, f'{", ".join(sorted(keys))}: {cls.family} options are for subscriptions '
                                     f'of kind {self._kind_of[cls]} only')
