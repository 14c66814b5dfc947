"""Leases: which worker does a once-only job (delivering a subscription, sweeping) right now.

A lease is a row (name, owner, expires_at, version). Its owner renews all of its leases every
``renew_secs``; a lease not renewed for ``ttl_secs`` is free, and any worker may take it with a
compare-and-set update. A worker considers itself the owner only until ``valid_until`` (its last
successful renewal plus the TTL, less a margin), so that when it is cut off from the database it
stops before another worker can have taken over.

Fencing: every take of a lease gives it a new, higher ``version`` (a new row starts at the clock in
milliseconds, so that a lease deleted and taken again never reuses a version; a takeover adds one).
The holder keeps the version it took (``Fence``), and each write that settles deliveries checks, in
its own transaction, that the lease still has that owner and version (``check_fence``): a holder
that was cut off, paused or slow and has lost its lease meanwhile gets ``LeaseLost`` instead of
acking, retrying or dead-lettering messages that another worker now delivers. On PostgreSQL the
check locks the row (``FOR KEY SHARE``) and a takeover skips a row so locked (``FOR UPDATE SKIP
LOCKED``): a settlement that passed its check commits before the lease can change hands. SQLite has
one writer at a time, so there the check alone is enough.

Spread: some leases (``spread``: service, REST push and file subscriptions, which any worker may
deliver) are shared out among the live workers. Each worker announces itself with a lease row of
its own (``worker:<owner>``, renewed with its other leases), and from the rows it reads at each
refresh it counts the live workers and what each holds. Its fair share is the number of spread
leases divided by the live workers, rounded up, counted twice: over all of them, and over those
whose subscription has work waiting (``busy``), so that a burst to a few subscriptions is spread
even when many idle ones are spread evenly. A worker takes a free lease only while it is under its
share (busy ones first), and gives back (``shed``) the leases above its share that another worker
has room for — only when that was so at two refreshes in a row (hysteresis: a passing burst moves
nothing), and it does not take a lease back for two renewals after giving it up. The broker hands
a shed lease back once its delivery loop has stored the outcome of its current batch. A free lease
that nobody took for two renewals is taken whatever the shares say, so that no subscription waits
on a worker that does not want it. Other leases (the sweeper's, a WebSocket subscription's, which
follows its client) are taken whenever free, as before.

Leases are refreshed every ``renew_secs``, or at once when ``kick`` asks (a WebSocket client
attached here: its subscription's lease should follow it now, not at the next renewal).
``release`` hands one lease back at once (its client left, or it was shed), ``release_all`` every
one (on stop).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Collection, Set
from typing import NamedTuple

import gevent
from gevent.event import Event
from gevent.lock import RLock
from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from runtime.cluster.workers import new_worker_id
from runtime.db.blocking import run_transaction
from runtime.db.engine import sqlite_execute
from runtime.db.models import Lease
from runtime.errors import LeaseLost

_log = logging.getLogger(__name__)

#: Share of the TTL a worker keeps in reserve before it stops trusting its own leases.
SAFETY_MARGIN = 0.25

#: Names of the lease rows by which workers announce that they are alive.
PRESENCE_PREFIX = 'worker:'

#: Refreshes in a row at which a worker must be above its share before it gives leases back.
SHED_AFTER_REFRESHES = 2

#: Renewal periods during which a lease given back is left to the others (and a free lease waits for them).
SHED_COOLDOWN_RENEWALS = 2

_CHECK_SQL = {
    'sqlite': 'SELECT version FROM conduit_lease WHERE name = ? AND owner = ?',
    'postgresql': 'SELECT version FROM conduit_lease WHERE name = %s AND owner = %s FOR KEY SHARE',
}


class Fence(NamedTuple):
    """A lease as one holder took it: the writes it makes under the lease check that it is still so."""

    name: str
    owner: str
    version: int


def check_fence(conn: Connection, fence: Fence) -> None:
    """LeaseLost unless fence's owner still holds the lease at fence's version (checked in conn's transaction)."""
    if conn.dialect.name == 'sqlite':
        # Runs in every commit that takes from a queue: sqlite3's own cursor (see sqlite_execute).
        row = sqlite_execute(conn, _CHECK_SQL['sqlite'], (fence.name, fence.owner)).fetchone()
        version = None if row is None else row[0]
    else:
        version = conn.exec_driver_sql(_CHECK_SQL['postgresql'], (fence.name, fence.owner)).scalar()
    if version != fence.version:
        raise LeaseLost(fence.name, fence.version, version)


class Shares(NamedTuple):
    """A worker's fair share of the spread leases: of all of them, and of those with work waiting."""

    all: int
    busy: int


def fair_share(count: int, workers: int) -> int:
    """count leases over that many workers, rounded up (so that the shares always cover them all)."""
    return -(-count // max(1, workers))


def shares(spread: int, busy: int, workers: int) -> Shares:
    """The fair shares of one of workers live workers."""
    return Shares(fair_share(spread, workers), fair_share(busy, workers))


def excess(mine: Set[str], others: Collection[Set[str]], busy: Set[str], share: Shares) -> tuple[int, int]:
    """How many busy and idle leases a worker holding mine should give up: what is above its share
    and another worker has room for (below its own share). Others hold the spread leases in others."""
    my_busy = len(mine & busy)
    room_busy = sum(max(0, share.busy - len(o & busy)) for o in others)
    shed_busy = min(max(0, my_busy - share.busy), room_busy)
    room_all = sum(max(0, share.all - len(o)) for o in others) - shed_busy
    shed_idle = min(max(0, len(mine) - shed_busy - share.all), max(0, room_all), len(mine) - my_busy)
    return shed_busy, shed_idle


class LeaseManager:
    """Acquires, renews and releases this worker's leases."""

    def __init__(self, engine: Engine, ttl_secs: float, renew_secs: float, owner: str | None = None) -> None:
        """owner: the worker's id (``runtime.cluster.workers.WorkerIdentity``); a new one when not given."""
        self._engine = engine
        self.ttl = ttl_secs
        self.renew_secs = renew_secs
        self.owner = owner or new_worker_id()
        #: The lease by which this worker tells the others that it is alive (held, but never reported).
        self.presence = PRESENCE_PREFIX + self.owner
        self.held: set[str] = set()
        #: The version of each lease held, as this worker took it.
        self.versions: dict[str, int] = {}
        self.valid_until = 0.0
        #: Live workers seen at the last refresh, this one included.
        self.workers = 1
        #: Leases given up and not yet handed back (their loops are settling); not counted in the shares.
        self.shedding: set[str] = set()
        #: Those the last refresh chose (the caller hands them back: ``run`` tells ``on_shed``).
        self.to_shed: set[str] = set()
        #: When each lease given back was, and since when each free spread lease has been seen free.
        self._shed_at: dict[str, float] = {}
        self._free_since: dict[str, float] = {}
        #: Refreshes in a row at which this worker was above its share (see SHED_AFTER_REFRESHES).
        self._over = 0
        #: Refreshes and releases do not interleave: a lease released meanwhile would be reported held.
        self._lock = RLock()
        #: Set by kick(): the run loop refreshes now instead of at the end of its wait.
        self._kicked = Event()

    def owns(self, name: str) -> bool:
        """Whether this worker may act on a lease now."""
        return name in self.held and time.time() < self.valid_until

    def fence(self, name: str) -> Fence | None:
        """The lease as this worker holds it (None if it does not)."""
        version = self.versions.get(name)
        return None if version is None or name not in self.held else Fence(name, self.owner, version)

    def refresh(self, wanted: set[str], spread: Set[str] = frozenset(),
                busy: Set[str] = frozenset()) -> tuple[set[str], set[str]]:
        """Renew held leases and try to take free ones of wanted; returns (gained, lost).

        spread names the wanted leases shared out among live workers, busy those of them with work
        waiting; the leases this refresh chose to give back are in ``to_shed`` afterwards (see the
        module docstring), to be handed back with ``release`` once their work is settled.
        """
        with self._lock:
            started = time.time()
            held, versions = run_transaction(
                self._engine, lambda conn: self._refresh(conn, wanted | {self.presence}, spread, busy, started))
            self.valid_until = started + self.ttl * (1 - SAFETY_MARGIN)
            held.discard(self.presence)
            gained, lost = held - self.held, self.held - held
            self.held, self.versions = held, versions
            self.shedding &= held
            self.to_shed &= held
            return gained, lost

    def _refresh(self, conn: Connection, wanted: set[str], spread: Set[str], busy: Set[str],
                 now: float) -> tuple[set[str], dict[str, int]]:
        expires = now + self.ttl
        conn.execute(update(Lease).where(Lease.owner == self.owner).values(expires_at=expires))
        rows = {r.name: r for r in conn.execute(select(Lease.name, Lease.owner, Lease.expires_at, Lease.version))}
        held = {name for name, r in rows.items() if r.owner == self.owner}
        versions = {name: rows[name].version for name in held}
        spread = set(spread) & wanted
        busy = set(busy) & spread
        # The other live workers, with the spread leases each holds.
        others: dict[str, set[str]] = {}
        for name, r in rows.items():
            if r.owner != self.owner and r.expires_at >= now:
                if name.startswith(PRESENCE_PREFIX):
                    others.setdefault(r.owner, set())
                elif name in spread:
                    others.setdefault(r.owner, set()).add(name)
        self.workers = 1 + len(others)
        share = shares(len(spread), len(busy), self.workers)
        mine = (held & spread) - self.shedding
        cooldown = SHED_COOLDOWN_RENEWALS * self.renew_secs
        self._free_since = {n: t for n, t in self._free_since.items() if n in spread}
        self._shed_at = {n: t for n, t in self._shed_at.items() if now - t < cooldown}
        # Busy leases first: they are the ones whose spread matters.
        for name in sorted(wanted - held, key=lambda n: (n not in busy, n)):
            row = rows.get(name)
            if row is not None and row.expires_at >= now:
                self._free_since.pop(name, None)
                continue
            if name in spread and now - self._free_since.setdefault(name, now) < cooldown:
                if name in self._shed_at:
                    continue
                if len(mine & busy) >= share.busy if name in busy else len(mine) >= share.all:
                    continue
            version = self._take(conn, name, row, expires)
            if version is not None:
                held.add(name)
                versions[name] = version
                self._free_since.pop(name, None)
                if name in spread:
                    mine.add(name)
        unwanted = held - wanted
        if unwanted:
            conn.execute(delete(Lease).where(Lease.owner == self.owner, Lease.name.in_(unwanted)))
            held -= unwanted
            mine -= unwanted
        self._shed(mine, list(others.values()), busy, share)
        # Workers gone for long leave their presence rows: removed by whoever sees them.
        gone = [name for name, r in rows.items()
                if name.startswith(PRESENCE_PREFIX) and r.expires_at < now - 10 * self.ttl]
        if gone:
            conn.execute(delete(Lease).where(Lease.name.in_(gone), Lease.expires_at < now - 10 * self.ttl))
        return held, {name: versions[name] for name in held}

    def _take(self, conn: Connection, name: str, row: object, expires: float) -> int | None:
        """Take a free lease (no row, or an expired one); its new version, or None if another worker was first."""
        if row is None:
            version = max(1, int(time.time() * 1000))
            nested = conn.begin_nested()
            try:
                conn.execute(insert(Lease).values(name=name, owner=self.owner, expires_at=expires, version=version))
                nested.commit()
                return version
            except IntegrityError:
                nested.rollback()  # another worker inserted it first
                return None
        old_owner, old_expires, old_version = row.owner, row.expires_at, row.version  # type: ignore[attr-defined]
        # A row its holder is settling under (locked by check_fence) is left for the next refresh.
        if conn.execute(select(Lease.name).where(Lease.name == name, Lease.owner == old_owner,
                                                 Lease.expires_at == old_expires)
                        .with_for_update(skip_locked=True)).first() is None:
            return None
        conn.execute(update(Lease).where(Lease.name == name).values(owner=self.owner, expires_at=expires,
                                                                      version=old_version + 1))
        if old_owner:
            _log.info('took over lease %s from %s', name, old_owner)
        return old_version + 1

    def _shed(self, mine: set[str], others: list[set[str]], busy: Set[str], share: Shares) -> None:
        """Mark the leases above this worker's share for giving back, once it has been so long enough."""
        self.to_shed = set()
        shed_busy, shed_idle = excess(mine, others, busy, share) if others else (0, 0)
        if not shed_busy and not shed_idle:
            self._over = 0
            return
        self._over += 1
        if self._over < SHED_AFTER_REFRESHES:
            return
        self._over = 0
        chosen = random.sample(sorted(mine & busy), shed_busy) + random.sample(sorted(mine - busy), shed_idle)
        _log.info('giving back %d lease(s) above this worker\'s share (%d busy, %d in all, %d workers)',
                  len(chosen), share.busy, share.all, self.workers)
        self.shedding.update(chosen)
        self.to_shed = set(chosen)

    def kick(self) -> None:
        """Refresh now (in the run loop) rather than at the next renewal."""
        self._kicked.set()

    def release(self, name: str) -> None:
        """Give up one lease now: forget it and delete its row if this worker owns it."""
        with self._lock:
            self.held.discard(name)
            self.versions.pop(name, None)
            if name in self.shedding:
                self.shedding.discard(name)
                self._shed_at[name] = time.time()
            run_transaction(self._engine, lambda conn: conn.execute(
                delete(Lease).where(Lease.name == name, Lease.owner == self.owner)))

    def release_all(self) -> None:
        """Give up every lease (on a graceful stop) so that another worker takes over at once."""
        with self._lock:
            self.held = set()
            self.versions = {}
            self.shedding = set()
            self.valid_until = 0.0
            run_transaction(self._engine,
                            lambda conn: conn.execute(delete(Lease).where(Lease.owner == self.owner)))

    def run(self, wanted: Callable[[], set[str]], on_change: Callable[[set[str], set[str]], None],
            spread: Callable[[], Set[str]] | None = None, busy: Callable[[], Set[str]] | None = None,
            on_shed: Callable[[set[str]], None] | None = None) -> None:
        """Refresh forever (in a greenlet), reporting gained and lost leases, and those to give back.

        busy is asked only while other workers are alive (it reads the queues).
        """
        while True:
            try:
                names = wanted()
                spread_names = spread() if spread is not None else frozenset()
                busy_names = busy() if busy is not None and spread_names and self.workers > 1 else frozenset()
                gained, lost = self.refresh(names, spread_names, busy_names)
                if gained or lost:
                    on_change(gained, lost)
                if self.to_shed and on_shed is not None:
                    on_shed(set(self.to_shed))
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.warning('lease refresh failed: %s: %s', type(e).__name__, e)
            self._kicked.wait(timeout=self.renew_secs)
            self._kicked.clear()
