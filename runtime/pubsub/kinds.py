"""The subscriber kinds a server has, by name: what the core of pub/sub asks of a kind without naming it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from runtime.errors import ConfigError
from runtime.pubsub.options import DeliveryOptions, OptionTypes

if TYPE_CHECKING:
    from runtime.config import PubSubSection


class Kinds:
    """Subscriber plug-ins (or their classes) by kind name, with the delivery options they declare."""

    def __init__(self, plugins: Iterable[Any]) -> None:
        self._by_name: dict[str, Any] = {p.kind: p for p in plugins}
        #: The kinds' names, in the order they were registered.
        self.names: tuple[str, ...] = tuple(self._by_name)
        #: The delivery options there are: the common ones and each kind's.
        self.options = OptionTypes.of(self._by_name.values())

    def __contains__(self, kind: object) -> bool:
        return kind in self._by_name

    def plugin(self, kind: str) -> Any:
        """The plug-in (or class) of a kind; KeyError for a kind there is not."""
        return self._by_name[kind]

    def check(self, settings: PubSubSection | None, kind: str, where: str, service: str = '', push_url: str = '',
              options: Mapping[str, Any] | None = None) -> DeliveryOptions:
        """A new subscription's options typed; ConfigError unless its kind, fields and options go together."""
        if kind not in self._by_name:
            raise ConfigError('subscription', f'kind must be one of {", ".join(self.names)}, not {kind!r}')
        typed = self.options.typed(settings, kind, options, where)
        self._by_name[kind].check(where, service, push_url, typed)
        return typed
