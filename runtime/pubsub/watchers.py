"""Queue watchers: requests of this worker that wait for a subscription's queue to get entries.

A long-polling pull (``POST /pubsub/messages/get`` with ``wait``) watches the queues of the
subscriptions it reads and looks again when one of them is woken. The broker wakes a queue once a
commit of this worker's publications queued for it, and ``runtime.pubsub.wakeups`` when another
process did (LISTEN/NOTIFY, or the poll): the same signals that wake delivery loops. A watcher
registers before its first look, so that an entry queued between that look and the wait is not
missed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from gevent.event import Event


class QueueWatchers:
    """The events of the requests waiting for entries, by subscription id."""

    def __init__(self) -> None:
        self._by_sub: dict[int, set[Event]] = {}
        #: Set once the broker stops: a watcher then ends its wait at once.
        self.closed = False

    def __bool__(self) -> bool:
        return bool(self._by_sub)

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._by_sub

    @contextmanager
    def watch(self, sub_ids: Iterable[int]) -> Iterator[Event]:
        """An event set whenever one of these subscriptions' queues is woken, until the block ends."""
        event = Event()
        ids = list(dict.fromkeys(sub_ids))
        for sub_id in ids:
            self._by_sub.setdefault(sub_id, set()).add(event)
        if self.closed:
            event.set()
        try:
            yield event
        finally:
            for sub_id in ids:
                waiting = self._by_sub.get(sub_id)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._by_sub[sub_id]

    def wake(self, sub_id: int) -> None:
        """Tell the requests watching sub_id's queue to look again."""
        for event in self._by_sub.get(sub_id, ()):
            event.set()

    def wake_all(self) -> None:
        """Tell every watching request to look again (a change another process made may concern any)."""
        for waiting in list(self._by_sub.values()):
            for event in waiting:
                event.set()

    def close(self) -> None:
        """End every wait now and every later one at once (the worker is stopping)."""
        self.closed = True
        self.wake_all()
