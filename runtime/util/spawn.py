"""Every green thread of the runtime starts here, so that shutdown can find and stop them all.

Like Nameko's ``spawn_managed_thread``: a component never calls ``gevent.spawn`` itself. A
greenlet that dies of an exception has it logged with the greenlet's name, so a background loop
never fails silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import gevent
from gevent.pool import Group

_log = logging.getLogger(__name__)


class Spawner:
    """Starts named greenlets and kills the ones still running on stop()."""

    def __init__(self) -> None:
        self._group = Group()

    def spawn(self, func: Callable[..., Any], *args: Any, name: str = '', **kwargs: Any) -> gevent.Greenlet:
        """Start func(*args, **kwargs) in a tracked greenlet."""
        g = gevent.Greenlet(func, *args, **kwargs)
        g.name = name or getattr(func, '__qualname__', 'greenlet')
        g.link_exception(_log_failure)
        self._group.start(g)
        return g

    def __len__(self) -> int:
        return len(self._group)

    def running(self, prefix: str = '') -> list[str]:
        """Names of the greenlets still running, or of those whose name starts with prefix."""
        return sorted(g.name for g in self._group if g.name.startswith(prefix))

    def stop(self, timeout: float = 5.0) -> None:
        """Kill every greenlet still running, waiting at most timeout seconds."""
        self._group.kill(timeout=timeout, block=True)


def killed(error: BaseException) -> bool:
    """Whether an error was raised because its greenlet was being killed.

    A kill raises GreenletExit wherever the greenlet waits; a library cleaning up on the way out
    (SQLAlchemy returning a connection mid-query) may raise its own error in its place, with the
    GreenletExit as its cause or context. A loop that logs its errors should stop quietly then.
    """
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        if isinstance(e, gevent.GreenletExit):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _log_failure(g: gevent.Greenlet) -> None:
    if not killed(g.exception):
        _log.error('greenlet %s failed: %r', g.name, g.exception, exc_info=g.exc_info)
