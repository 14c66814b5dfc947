"""The sweeper: removes what nobody will read, in the one worker that holds its lease.

Every ``sweep_interval_secs`` it dead-letters (reason ``expired``) the queue entries whose
message expired in queues no loop of a worker delivers now (pull queues, paused subscriptions:
delivery loops dead-letter their own), deletes topic backlogs past their retention, expired
messages waiting in topics and messages no queue or dead letter holds any more.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import gevent
from sqlalchemy import Connection

from runtime.pubsub import statements
from runtime.pubsub.dead_letters import DeadLetterer, Moves
from runtime.pubsub.registry import Registry
from runtime.spawn import killed

_log = logging.getLogger(__name__)

T = TypeVar('T')

#: Lease held by the worker that sweeps expired and consumed messages.
SWEEPER_LEASE = 'pubsub:sweeper'


class Sweeper:
    """Sweeps the pub/sub tables while ``owns_lease()`` says this worker is the sweeper."""

    def __init__(self, write: Callable[[Callable[[Connection], T]], T], registry: Callable[[], Registry],
                 dead_letterer: DeadLetterer, delivered_kinds: frozenset[str], interval_secs: float,
                 owns_lease: Callable[[], bool]) -> None:
        self._write = write
        self._registry = registry
        self._dead_letterer = dead_letterer
        self._delivered_kinds = delivered_kinds
        self._interval_secs = interval_secs
        self._owns_lease = owns_lease

    def run(self) -> None:
        """Sweep every interval while this worker holds the lease; until killed."""
        while True:
            gevent.sleep(self._interval_secs)
            if not self._owns_lease():
                continue
            try:
                self.sweep()
            except gevent.GreenletExit:
                raise
            except Exception as e:
                if killed(e):
                    return  # stopping: the kill landed in a database call
                _log.warning('sweep failed: %s: %s', type(e).__name__, e)

    def sweep(self) -> dict[str, int]:
        """Dead-letter expired queue entries; delete expired, over-retention and consumed messages."""
        now = time.time()
        registry = self._registry()
        delivered = {s.id for s in registry.subs.values() if s.kind in self._delivered_kinds and s.is_active}

        def work(conn: Connection, moves: Moves) -> dict[str, int]:
            expired = statements.expired_entries(conn, now, skip_sub_ids=delivered)
            for d in expired:
                moves.add(conn, d, 'expired', d.last_error or 'the message expired before delivery')
            counts = {'expired_in_queues': len(expired)}
            retained = 0
            for topic in registry.topics.values():
                retained += statements.retention_expired_in_topic(conn, topic.id, now - topic.limit_retention)
            counts['over_retention'] = retained
            counts.update(statements.sweep(conn, now))
            return counts
        counts = self._dead_letterer.run(self._write, work)
        if any(counts.values()):
            _log.info('pub/sub sweep: %s', counts)
        return counts
