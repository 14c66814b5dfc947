"""Leases: which worker does a once-only job (delivering a subscription, sweeping) right now.

A lease is a row (name, owner, expires_at). Its owner renews all of its leases every
``renew_secs``; a lease not renewed for ``ttl_secs`` is free, and any worker may take it with a
compare-and-set update. A worker considers itself the owner only until ``valid_until`` (its last
successful renewal plus the TTL, less a margin), so that when it is cut off from the database it
stops before another worker can have taken over.

Leases are refreshed every ``renew_secs``, or at once when ``kick`` asks (a WebSocket client
attached here: its subscription's lease should follow it now, not at the next renewal).
``release`` hands one lease back at once (its client left), ``release_all`` every one (on stop).
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from collections.abc import Callable

import gevent
from gevent.event import Event
from sqlalchemy import Connection, Engine, delete, insert, select, update
from sqlalchemy.exc import IntegrityError

from runtime.db.blocking import run_transaction
from runtime.db.models import Lease

_log = logging.getLogger(__name__)

#: Share of the TTL a worker keeps in reserve before it stops trusting its own leases.
SAFETY_MARGIN = 0.25


def new_owner_id() -> str:
    """A worker identity: host, pid and a random part (pids are reused)."""
    return f'{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}'


class LeaseManager:
    """Acquires, renews and releases this worker's leases."""

    def __init__(self, engine: Engine, ttl_secs: float, renew_secs: float) -> None:
        self._engine = engine
        self.ttl = ttl_secs
        self.renew_secs = renew_secs
        self.owner = new_owner_id()
        self.held: set[str] = set()
        self.valid_until = 0.0
        #: Set by kick(): the run loop refreshes now instead of at the end of its wait.
        self._kicked = Event()

    def owns(self, name: str) -> bool:
        """Whether this worker may act on a lease now."""
        return name in self.held and time.time() < self.valid_until

    def refresh(self, wanted: set[str]) -> tuple[set[str], set[str]]:
        """Renew held leases and try to take free ones of wanted; returns (gained, lost)."""
        started = time.time()
        held = run_transaction(self._engine, lambda conn: self._refresh(conn, wanted, started))
        self.valid_until = started + self.ttl * (1 - SAFETY_MARGIN)
        gained, lost = held - self.held, self.held - held
        self.held = held
        return gained, lost

    def _refresh(self, conn: Connection, wanted: set[str], now: float) -> set[str]:
        expires = now + self.ttl
        conn.execute(update(Lease).where(Lease.owner == self.owner).values(expires_at=expires))
        rows = {r.name: r for r in conn.execute(select(Lease.name, Lease.owner, Lease.expires_at)).all()}
        held = {name for name, r in rows.items() if r.owner == self.owner}
        for name in wanted - held:
            row = rows.get(name)
            if row is None:
                nested = conn.begin_nested()
                try:
                    conn.execute(insert(Lease).values(name=name, owner=self.owner, expires_at=expires))
                    nested.commit()
                    held.add(name)
                except IntegrityError:
                    nested.rollback()  # another worker inserted it first
            elif row.expires_at < now:
                taken = conn.execute(update(Lease).where(Lease.name == name, Lease.owner == row.owner,
                                                         Lease.expires_at == row.expires_at)
                                     .values(owner=self.owner, expires_at=expires)).rowcount
                if taken:
                    _log.info('took over lease %s from %s', name, row.owner)
                    held.add(name)
        unwanted = held - wanted
        if unwanted:
            conn.execute(delete(Lease).where(Lease.owner == self.owner, Lease.name.in_(unwanted)))
            held -= unwanted
        return held

    def kick(self) -> None:
        """Refresh now (in the run loop) rather than at the next renewal."""
        self._kicked.set()

    def release(self, name: str) -> None:
        """Give up one lease now: forget it and delete its row if this worker owns it."""
        self.held.discard(name)
        run_transaction(self._engine, lambda conn: conn.execute(
            delete(Lease).where(Lease.name == name, Lease.owner == self.owner)))

    def release_all(self) -> None:
        """Give up every lease (on a graceful stop) so that another worker takes over at once."""
        self.held = set()
        self.valid_until = 0.0
        run_transaction(self._engine, lambda conn: conn.execute(delete(Lease).where(Lease.owner == self.owner)))

    def run(self, wanted: Callable[[], set[str]], on_change: Callable[[set[str], set[str]], None]) -> None:
        """Refresh forever (in a greenlet), reporting gained and lost leases."""
        while True:
            try:
                gained, lost = self.refresh(wanted())
                if gained or lost:
                    on_change(gained, lost)
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.warning('lease refresh failed: %s: %s', type(e).__name__, e)
            self._kicked.wait(timeout=self.renew_secs)
            self._kicked.clear()
