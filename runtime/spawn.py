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


def _log_failure(g: gevent.Greenlet) -> None:
    if not isinstance(g.exception, gevent.GreenletExit):
        _log.error('greenlet %s failed: %r', g.name, g.exception, exc_info=g.exc_info)
