"""What in-process services under test saw, kept per test: the ``recorder`` fixture's ``Recorder``.

A service class records through ``self.recorder``, a class attribute that ``Recorder.bind`` sets on
a subclass made for the test (same name, module and behaviour), so nothing is kept at module level
and no test sees what another one's services recorded::

    class Sink(Service):
        name = 'my.sink'

        def handle(self) -> None:
            self.recorder.add('handled', self.request.payload)

    def test_sink(runtime_factory, recorder):
        rt = runtime_factory(recorder.bind(Sink))
        ...
        assert recorder.wait_for('handled', 3) == [...]

Services of a server in another process (``LiveServer``) cannot reach a recorder: it is memory.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, TypeVar

S = TypeVar('S', bound=type)


class Recorder:
    """Items recorded by services under test, in order, per named channel; safe across threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._channels: dict[str, list[Any]] = {}
        self._bound: dict[type, type] = {}

    def add(self, channel: str, item: Any) -> None:
        """Record one item on a channel."""
        with self._lock:
            self._channels.setdefault(channel, []).append(item)

    def __getitem__(self, channel: str) -> list[Any]:
        """A copy of what a channel holds so far (empty if nothing was recorded on it)."""
        with self._lock:
            return list(self._channels.get(channel, ()))

    def count(self, channel: str) -> int:
        """How many items a channel holds."""
        with self._lock:
            return len(self._channels.get(channel, ()))

    def wait_for(self, channel: str, count: int = 1, timeout: float = 5.0) -> list[Any]:
        """Wait (cooperatively) until a channel holds at least count items; returns them all."""
        # Imported here: conftest imports this module before pytest loads runtime.testing as a plugin.
        from runtime.testing import wait_until
        wait_until(lambda: self.count(channel) >= count, timeout,
                   message=f'{count} item(s) recorded on {channel!r}')
        return self[channel]

    def clear(self, channel: str | None = None) -> None:
        """Forget one channel, or every channel."""
        with self._lock:
            if channel is None:
                self._channels.clear()
            else:
                self._channels.pop(channel, None)

    def bind(self, cls: S) -> S:
        """cls made for this recorder: a subclass, under the same service name, whose ``recorder`` is this one.

        Binding the same class again returns the same subclass, so that a test and its services
        can both refer to it (e.g. to invoke it by class).
        """
        with self._lock:
            bound = self._bound.get(cls)
            if bound is None:
                # The name is copied: a subclass without one of its own would get a derived name.
                namespace = {'recorder': self, 'name': getattr(cls, 'name', ''), '__module__': cls.__module__,
                             '__qualname__': cls.__qualname__, '__doc__': cls.__doc__}
                bound = self._bound[cls] = type(cls.__name__, (cls,), namespace)
            return bound  # type: ignore[return-value]

    def bind_all(self, classes: Iterable[S]) -> list[S]:
        """Each class bound with ``bind``, in order."""
        return [self.bind(cls) for cls in classes]
