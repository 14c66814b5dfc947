"""The sweeper: removes what nobody will read, in the one worker that holds its lease.

Every ``sweep_interval_secs`` it dead-letters (reason ``expired``) the queue entries whose
message expired in queues no loop of a worker delivers now (pull queues, paused subscriptions,
WebSocket subscriptions with no client attached: delivery loops dead-letter their own), deletes
topic backlogs past their retention, expired messages waiting in topics and messages no queue or
dead letter holds any more.

It also deletes, with their queues, the WebSocket subscriptions nobody uses any more: those with
no client attached and no activity for their topic's ``limit_sub_inactivity`` seconds (0: never;
for a pattern subscription the largest limit among the topics it matches now, the default when it
matches none), and those whose client's worker stopped writing its heartbeat for that long or for
three lease TTLs, whichever is longer (the worker died without detaching its clients). Each
deletion is logged (WARNING, naming the subscription's label, never its sub_key), announced to
the observers (``on_subscription_expired``) and bumps the ``pubsub`` sync key, so every worker
forgets the subscription.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

import gevent
from sqlalchemy import Connection

from runtime.cluster.sync import bump
from runtime.pubsub import statements
from runtime.pubsub.catalog import SYNC_KEY
from runtime.pubsub.dead_letters import DeadLetterer, Moves
from runtime.pubsub.observers import Observers
from runtime.pubsub.registry import KIND_WEBSOCKET, Registry, SubInfo, TopicInfo
from runtime.util.spawn import killed

_log = logging.getLogger(__name__)

T = TypeVar('T')

#: Lease held by the worker that sweeps expired and consumed messages.
SWEEPER_LEASE = 'pubsub:sweeper'

#: A subscription whose client's worker stopped its heartbeat is kept at least this many lease TTLs.
DEAD_OWNER_TTLS = 3

#: The limit of a WebSocket subscription that matches no topic now.
DEFAULT_INACTIVITY_SECS = TopicInfo(0, '').limit_sub_inactivity


def inactivity_limits(registry: Registry, subs: Iterable[SubInfo]) -> dict[int, int | None]:
    """Each subscription's limit_sub_inactivity in seconds, or None for never.

    A subscription to one topic has that topic's; a pattern subscription the largest among the
    topics it matches (0, "never", is the largest of all), or the default when it matches none.
    """
    limits: dict[int, int | None] = {}
    found: dict[int, list[int]] = {}
    for sub in subs:
        topic = registry.topic(sub.pattern)  # topic names have no wildcards: found means exact
        if topic is not None:
            limits[sub.id] = topic.limit_sub_inactivity or None
        else:
            found[sub.id] = []
    if found:
        # One pass over the topics through the pattern index, rather than every pattern against every topic.
        for topic in registry.topics.values():
            for sub in registry.all_subscribers(topic.name):
                if sub.id in found:
                    found[sub.id].append(topic.limit_sub_inactivity)
        for sub_id, values in found.items():
            if not values:
                limits[sub_id] = DEFAULT_INACTIVITY_SECS
            else:
                limits[sub_id] = None if 0 in values else max(values)
    return limits


class Sweeper:
    """Sweeps the pub/sub tables while ``owns_lease()`` says this worker is the sweeper."""

    def __init__(self, write: Callable[[Callable[[Connection], T]], T], registry: Callable[[], Registry],
                 dead_letterer: DeadLetterer, delivered_kinds: frozenset[str], interval_secs: float,
                 owns_lease: Callable[[], bool], *, observers: Observers | None = None,
                 lease_ttl_secs: float = 10.0, changed: Callable[[], None] = lambda: None) -> None:
        self._write = write
        self._registry = registry
        self._dead_letterer = dead_letterer
        self._delivered_kinds = delivered_kinds
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
        """Delete inactive WebSocket subscriptions, dead-letter expired entries, delete old and consumed messages."""
        now = time.time()
        counts = {'inactive_ws_subscriptions': self.sweep_inactive(now)}
        registry = self._registry()
        delivered = {s.id for s in registry.subs.values() if s.kind in self._delivered_kinds and s.is_active}
        has_ws = any(s.kind == KIND_WEBSOCKET for s in registry.subs.values())

        def work(conn: Connection, moves: Moves) -> dict[str, int]:
            skip = delivered
            if has_ws:
                # No loop delivers a WebSocket subscription while no client is attached: its expired messages are ours.
                skip = delivered - {sub_id for sub_id, (owner, _) in statements.ws_activity(conn).items() if not owner}
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

    def sweep_inactive(self, now: float) -> int:
        """Delete the WebSocket subscriptions inactive past their limit, with their queues; how many."""
        registry = self._registry()
        subs = {s.id: s for s in registry.subs.values() if s.kind == KIND_WEBSOCKET}
        if not subs:
            return 0
        limits = inactivity_limits(registry, subs.values())
        dead_owner_secs = DEAD_OWNER_TTLS * self._lease_ttl_secs

        def work(conn: Connection) -> list[tuple[SubInfo, float]]:
            gone = []
            for sub_id, (owner, last_active_at) in statements.ws_activity(conn).items():
                sub, limit = subs.get(sub_id), limits.get(sub_id)
                if sub is None or limit is None:  # made since this worker's last reload, or never expires
                    continue
                before = now - (max(limit, dead_owner_secs) if owner else limit)
                if last_active_at < before and statements.delete_inactive_ws_subscription(conn, sub_id, owner, before):
                    gone.append((sub, now - last_active_at))
            if gone:
                bump(conn, SYNC_KEY)
            return gone
        gone = self._write(work)
        if not gone:
            return 0
        self._changed()
        for sub, idle_secs in gone:
            _log.warning('%s: deleted with its queue: no client and no activity for %d s (limit_sub_inactivity)',
                         sub.label, idle_secs)
            self._observers.emit('on_subscription_expired', sub)
        return len(gone)
