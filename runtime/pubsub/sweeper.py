"""The sweeper: removes what nobody will read, in the one worker that holds its lease.

Every ``sweep_interval_secs`` it dead-letters (reason ``expired``) the queue entries whose
message expired in queues no loop of a worker delivers now (pull queues, paused subscriptions, and
what a kind delivers not now, such as a WebSocket subscription with no client attached: delivery
loops dead-letter their own), deletes topic backlogs past their retention, expired messages
waiting in topics and messages no queue or dead letter holds any more.

It also deletes, with their queues, the subscriptions their kind finds nobody uses any more (the
WebSocket kind's idle ones: ``runtime.pubsub.subscribers.websocket.clients``). Each deletion is
logged (WARNING, naming the subscription's label, never its sub_key, and why), announced to the
observers (``on_subscription_expired``) and bumps the ``pubsub`` sync key, so every worker forgets
the subscription. The sweeper names no kind: it asks each kind's plug-in.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import gevent
from sqlalchemy import Connection

from runtime.cluster.sync import bump
from runtime.pubsub import statements
from runtime.pubsub.catalog import SYNC_KEY
from runtime.pubsub.dead_letters import DeadLetterer, Moves
from runtime.pubsub.kinds import Kinds
from runtime.pubsub.observers import Observers
from runtime.pubsub.registry import Registry, SubInfo
from runtime.util.spawn import killed

_log = logging.getLogger(__name__)

T = TypeVar('T')

#: Lease held by the worker that sweeps expired and consumed messages.
SWEEPER_LEASE = 'pubsub:sweeper'

#: A subscription whose client's worker stopped its heartbeat is kept at least this many lease TTLs.
DEAD_OWNER_TTLS = 3

class Sweeper:
    """Sweeps the pub/sub tables while ``owns_lease()`` says this worker is the sweeper."""

    def __init__(self, write: Callable[[Callable[[Connection], T]], T], registry: Callable[[], Registry],
                 dead_letterer: DeadLetterer, kinds: Kinds, interval_secs: float,
                 owns_lease: Callable[[], bool], *, observers: Observers | None = None,
                 lease_ttl_secs: float = 10.0, changed: Callable[[], None] = lambda: None) -> None:
        self._write = write
        self._registry = registry
        self._dead_letterer = dead_letterer
        #: The subscriber kinds: each says which of its subscriptions it delivers not now, and sweeps its own.
        self._kinds = kinds
        self._delivered_kinds = frozenset(k for k in kinds.names if kinds.plugin(k).delivered)
        self._interval_secs = interval_secs
        self._owns_lease = owns_lease
        self._observers = observers if observers is not None else Observers()
        #: How long a worker's leases last without renewal: its heartbeat stopping for longer means it died.
        self._lease_ttl_secs = lease_ttl_secs
        #: Reloads this worker's registry after subscriptions were deleted.
        self._changed = changed

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
        """Delete subscriptions their kinds find unused, dead-letter expired entries, delete old and consumed ones."""
        now = time.time()
        before = self._registry()
        kinds = self._kinds_present(before)
        counts = {'inactive_subscriptions': self._sweep_inactive(before, kinds, now)}
        registry = self._registry()  # reloaded if subscriptions were deleted
        delivered = {s.id for s in registry.subs.values() if s.kind in self._delivered_kinds and s.is_active}

        def work(conn: Connection, moves: Moves) -> dict[str, int]:
            # A kind may deliver some of its subscriptions not now (a WebSocket one with no client
            # attached): their expired messages are the sweeper's.
            skip = delivered - {sub_id for kind in kinds for sub_id in self._kinds.plugin(kind).undelivered(conn)}
            expired = statements.expired_entries(conn, now, skip_sub_ids=skip)
            for d in expired:
                moves.add(conn, d, 'expired', d.last_error or 'the message expired before delivery')
            counts = {'expired_in_queues': len(expired)}
            retained = 0
            for topic in registry.topics.values():
                retained += statements.retention_expired_in_topic(conn, topic.id, now - topic.limit_retention)
            counts['over_retention'] = retained
            counts.update(statements.sweep(conn, now))
            return counts
        counts.update(self._dead_letterer.run(self._write, work))
        if any(counts.values()):
            _log.info('pub/sub sweep: %s', counts)
        return counts

    def _kinds_present(self, registry: Registry) -> dict[str, list[SubInfo]]:
        """The subscriptions of each kind the registry has now."""
        present: dict[str, list[SubInfo]] = {}
        for sub in registry.subs.values():
            present.setdefault(sub.kind, []).append(sub)
        return {kind: subs for kind, subs in present.items() if kind in self._kinds}

    def _sweep_inactive(self, registry: Registry, present: dict[str, list[SubInfo]], now: float) -> int:
        """Delete the subscriptions their kinds find nobody uses any more, with their queues; how many."""
        if not present:
            return 0
        dead_owner_secs = DEAD_OWNER_TTLS * self._lease_ttl_secs

        def work(conn: Connection) -> list[tuple[SubInfo, str]]:
            gone = [g for kind, subs in present.items()
                    for g in self._kinds.plugin(kind).sweep(conn, registry, subs, now, dead_owner_secs)]
            if gone:
                bump(conn, SYNC_KEY)
            return gone
        gone = self._write(work)
        if not gone:
            return 0
        self._changed()
        for sub, why in gone:
            _log.warning('%s: deleted with its queue: %s', sub.label, why)
            self._observers.emit('on_subscription_expired', sub)
        return len(gone)
