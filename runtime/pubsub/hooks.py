"""Delivery hooks: code that observes the broker without being part of it (metrics, archive).

A hook subclasses ``DeliveryHook`` and overrides the methods it needs; all are no-ops here. They
run in the publishing or delivering greenlet, so they must be quick (buffer, don't write per
call). An exception in a hook is logged CRITICAL with the hook's repr and swallowed: a broken
observer never changes what is delivered. ``after_*`` hooks run in reverse order of
registration, as Dramatiq's middleware does.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from runtime.pubsub.registry import SubInfo
    from runtime.pubsub.store import Delivery, Publication

_log = logging.getLogger(__name__)


class DeliveryHook:
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


class HookChain:
    """Calls every registered hook, isolating failures."""

    def __init__(self) -> None:
        self.hooks: list[DeliveryHook] = []
        #: Per method, the (hook, bound method) pairs to call, in calling order; made on first emit.
        self._calls: dict[str, list[tuple[DeliveryHook, Callable[..., None]]]] = {}

    def add(self, hook: DeliveryHook) -> None:
        """Register a hook (its after_* methods run before those of earlier hooks)."""
        self.hooks.append(hook)
        self._calls.clear()

    def emit(self, method: str, *args: object) -> None:
        """Call method on every hook, in reverse order for after_* methods."""
        calls = self._calls.get(method)
        if calls is None:
            calls = self._calls[method] = self._resolve(method)
        for hook, call in calls:
            try:
                call(*args)
            except Exception:
                _log.critical('delivery hook %r failed in %s; ignored', hook, method, exc_info=True)

    def _resolve(self, method: str) -> list[tuple[DeliveryHook, Callable[..., None]]]:
        """The hooks that override method (the base class's no-ops are not worth a call per message)."""
        hooks = reversed(self.hooks) if method.startswith('after_') else self.hooks
        base = getattr(DeliveryHook, method)
        calls = [(h, getattr(h, method)) for h in hooks]
        return [(h, call) for h, call in calls if getattr(call, '__func__', None) is not base]
