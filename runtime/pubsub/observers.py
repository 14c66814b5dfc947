"""Pub/sub observers: code that watches the broker without being part of it (metrics, archive).

An observer subclasses ``PubSubObserver`` and overrides the methods it needs; all are no-ops
here. It is registered with ``broker.observers.add(...)`` and unregistered with ``remove``. Its
methods run in the publishing or delivering greenlet, so they must be quick (buffer, don't write
per call). An exception in an observer is logged CRITICAL with its repr and swallowed: a broken
observer never changes what is delivered. ``after_*`` methods run in reverse order of
registration, as Dramatiq's middleware does.

Each event is emitted from one place: ``after_publish`` by the broker once a publication is
stored, ``after_deliver`` by the delivery loop for each attempt and by the pulls for what they
hand over, ``after_dead_letter`` by ``runtime.pubsub.dead_letters`` once a dead letter is
committed, whatever made it (delivery loop, sweeper, a service's pull, a REST client's pull), and
``on_subscription_expired`` by the sweeper once it deleted an inactive WebSocket subscription.

These were called "delivery hooks" (``DeliveryHook``, ``HookChain``, ``broker.hooks``); the old
names still work (``runtime.pubsub.hooks``). "Hook" now means only what it means in Zato: a
service's ``before_handle``/``after_handle`` methods and the hook services of topics and
subscriptions.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from runtime.pubsub.registry import SubInfo
    from runtime.pubsub.statements import Delivery, Publication

_log = logging.getLogger(__name__)


class PubSubObserver:
    """Base class of broker observers; every method is a no-op."""

    def on_start(self) -> None:
        """The broker started in this worker."""

    def on_stop(self) -> None:
        """The broker is stopping in this worker (flush what is buffered)."""

    def after_publish(self, pub: Publication, overflowed: bool) -> None:
        """A publication was stored (or written to the overflow log)."""

    def after_deliver(self, sub: SubInfo, delivery: Delivery, ok: bool, error: BaseException | None,
                      duration_secs: float) -> None:
        """One delivery attempt ended, successfully or not."""

    def after_dead_letter(self, sub: SubInfo, delivery: Delivery, reason: str, error: str) -> None:
        """A message moved to a subscription's dead-letter queue."""

    def on_subscription_expired(self, sub: SubInfo) -> None:
        """The sweeper deleted an inactive WebSocket subscription with its queue (limit_sub_inactivity)."""


class Observers:
    """Calls every registered observer, isolating failures."""

    def __init__(self, observers: Iterable[PubSubObserver] = ()) -> None:
        self.observers: list[PubSubObserver] = list(observers)
        #: Per method, the (observer, bound method) pairs to call, in calling order; made on first emit.
        self._calls: dict[str, list[tuple[PubSubObserver, Callable[..., None]]]] = {}

    @property
    def hooks(self) -> list[PubSubObserver]:
        """The former name of ``observers``."""
        return self.observers

    def add(self, observer: PubSubObserver) -> None:
        """Register an observer (its after_* methods run before those of earlier observers)."""
        self.observers.append(observer)
        self._calls.clear()

    def remove(self, observer: PubSubObserver) -> None:
        """Unregister an observer; ValueError if it is not registered."""
        self.observers.remove(observer)
        self._calls.clear()

    def emit(self, method: str, *args: object) -> None:
        """Call method on every observer, in reverse order for after_* methods."""
        calls = self._calls.get(method)
        if calls is None:
            calls = self._calls[method] = self._resolve(method)
        for observer, call in calls:
            try:
                call(*args)
            except Exception:
                _log.critical('pub/sub observer %r failed in %s; ignored', observer, method, exc_info=True)

    def _resolve(self, method: str) -> list[tuple[PubSubObserver, Callable[..., None]]]:
        """The observers that override method (the base class's no-ops are not worth a call per message)."""
        observers = reversed(self.observers) if method.startswith('after_') else self.observers
        base = getattr(PubSubObserver, method)
        calls = [(o, getattr(o, method)) for o in observers]
        return [(o, call) for o, call in calls if getattr(call, '__func__', None) is not base]
