"""Wake-ups: telling this worker's delivery loops (and the requests watching queues, such as
long-polling pulls: ``runtime.pubsub.watchers``) that other processes queued messages for them.

Publications of this worker wake its loops directly (the broker does, once they are committed).
Those of other processes are noticed two ways: on PostgreSQL, a LISTEN connection hears the
NOTIFY each commit sends with the ids of the subscriptions it queued for (``'*'``: all of them);
everywhere, a poller looks every ``poll_interval_secs`` at the newest queue entry id per
subscription (one indexed query). With LISTEN working, the poll is only a slow safety net
(``PG_SAFETY_POLL_SECS``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import gevent
import psycopg
from sqlalchemy import Engine, func, select

from runtime.db.blocking import run_transaction
from runtime.db.models import QueueEntry
from runtime.pubsub.statements import NOTIFY_CHANNEL

if TYPE_CHECKING:
    from collections.abc import Mapping

    from runtime.pubsub.delivery import DeliveryLoop
    from runtime.pubsub.watchers import QueueWatchers

_log = logging.getLogger(__name__)

#: With LISTEN/NOTIFY working, how often PostgreSQL workers still look for missed entries.
PG_SAFETY_POLL_SECS = 1.0

#: How long a broken LISTEN connection waits before it connects again.
RELISTEN_SECS = 1.0


class Wakeups:
    """Wakes the loops of ``loops`` (the broker's, by subscription id) and the watchers of ``watchers``
    for entries other processes queued."""

    def __init__(self, engine: Engine, poll_interval_secs: float, loops: Mapping[int, DeliveryLoop],
                 watchers: QueueWatchers | None = None) -> None:
        self._engine = engine
        self._poll_interval_secs = poll_interval_secs
        self._loops = loops
        self._watchers = watchers
        #: The newest queue entry id seen; entries above it are news.
        self.last_queue_id = 0
        #: Whether the LISTEN connection is up (the poll then slows down).
        self.listening = False

    def start(self) -> None:
        """Take the newest queue entry id as the point from which to look (the loops read what is older)."""
        self.last_queue_id = run_transaction(self._engine, lambda c: c.execute(
            select(func.coalesce(func.max(QueueEntry.id), 0))).scalar_one(), write=False)

    def listen(self) -> None:
        """PostgreSQL: wake local loops as soon as another process commits entries for them."""
        # The engine's own connection parameters: with [database] dead_client_secs, keepalives and
        # tcp_user_timeout, without which a cut link would leave this connection waiting for minutes.
        cargs, cparams = self._engine.dialect.create_connect_args(self._engine.url)
        while True:
            try:
                with psycopg.connect(*cargs, autocommit=True, **cparams) as conn:
                    conn.execute(f'LISTEN {NOTIFY_CHANNEL}')
                    self.listening = True
                    for note in conn.notifies():
                        self.wake_listed(note.payload)
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.warning('LISTEN connection failed (%s: %s); polling until it is back', type(e).__name__, e)
            finally:
                self.listening = False
            gevent.sleep(RELISTEN_SECS)

    def wake_listed(self, payload: str) -> None:
        """Wake the loops a NOTIFY payload names (comma-separated subscription ids, or '*' for all)."""
        if payload == '*':
            for loop in list(self._loops.values()):
                loop.wake()
            if self._watchers:
                self._watchers.wake_all()
            return
        for part in payload.split(','):
            if part.isdigit():
                self._wake(int(part))

    def poll_forever(self) -> None:
        """Poll for other processes' entries, every poll interval (slower while LISTEN works)."""
        while True:
            gevent.sleep(self._poll_interval_secs if not self.listening else PG_SAFETY_POLL_SECS)
            try:
                self.poll_once()
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.warning('queue poll failed: %s: %s', type(e).__name__, e)

    def poll_once(self) -> None:
        """Wake the local loops whose queues got entries since the last look (one indexed query)."""
        if not self._loops and not self._watchers:
            return
        last = self.last_queue_id
        rows = run_transaction(self._engine, lambda c: c.execute(
            select(QueueEntry.sub_id, func.max(QueueEntry.id)).where(QueueEntry.id > last)
            .group_by(QueueEntry.sub_id)).all(), write=False)
        for sub_id, max_id in rows:
            self.last_queue_id = max(self.last_queue_id, max_id)
            self._wake(sub_id)

    def _wake(self, sub_id: int) -> None:
        loop = self._loops.get(sub_id)
        if loop is not None:
            loop.wake()
        if self._watchers:
            self._watchers.wake(sub_id)
