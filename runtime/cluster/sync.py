"""Keeping every worker's in-memory copies in step with the database.

Shared objects (deployments, channels, security definitions, ...) each have a row in
``conduit_sync_state`` whose version is bumped in the same transaction as the change. Each worker
reads that small table every ``sync.interval_secs`` and calls the reload function registered
for each key whose version moved. A worker that made a change itself calls ``changed(key)``
so that it does not wait for its next poll.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
from gevent.lock import RLock
from sqlalchemy import Connection, Engine, select, update
from sqlalchemy.dialects import postgresql, sqlite

from runtime.db.blocking import run_transaction
from runtime.db.models import SyncState

_log = logging.getLogger(__name__)

T = TypeVar('T')
M = TypeVar('M', bound=Callable[..., Any])


def one_reload_at_a_time(method: M) -> M:
    """Run a reload method one call at a time per object, so that an older read never replaces a newer one.

    A reload reads the database (other greenlets run meanwhile) and then swaps what it read in; two
    that overlap (the sync poll's and a change's own) can finish in the other order, and the one that
    read before a commit would then put back what that commit changed. Serialised, a reload that
    starts after a commit reads after it and is the last to swap. Reentrant, for a reload that
    reaches its own method again.
    """
    attribute = f'_{method.__name__}_one_at_a_time'

    @functools.wraps(method)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        lock = self.__dict__.get(attribute)
        if lock is None:  # no yield from here to setdefault: two greenlets cannot make two locks
            lock = self.__dict__.setdefault(attribute, RLock())
        with lock:
            return method(self, *args, **kwargs)
    return run  # type: ignore[return-value]


def _ensure_row(conn: Connection, key: str) -> None:
    """Create a key's row (version 0) unless it exists; never fails when another worker races us."""
    insert = postgresql.insert if conn.dialect.name == 'postgresql' else sqlite.insert
    # ON CONFLICT DO NOTHING: a concurrent transaction inserting the same key makes this one wait
    # for it and then do nothing, instead of failing on the primary key.
    conn.execute(insert(SyncState.__table__).values(key=key, version=0, value='').on_conflict_do_nothing())


def bump(conn: Connection, key: str, value: str | None = None) -> None:
    """Increase a key's version inside the caller's transaction (creating the row if needed).

    The row stays locked until the transaction ends, so concurrent writers of one key are serialised.
    """
    values: dict[str, object] = {'version': SyncState.version + 1}
    if value is not None:
        values['value'] = value
    stmt = update(SyncState).where(SyncState.key == key).values(**values)
    if not conn.execute(stmt).rowcount:
        _ensure_row(conn, key)
        conn.execute(stmt)


def lock(conn: Connection, key: str) -> str:
    """A key's value, with its row locked until the caller's transaction ends (created if missing).

    On SQLite the write transaction (BEGIN IMMEDIATE) already excludes other writers.
    """
    _ensure_row(conn, key)
    return conn.execute(select(SyncState.value).where(SyncState.key == key).with_for_update()).scalar_one()


def write_and_reload(engine: Engine, key: str, work: Callable[[Connection], T], reload: Callable[[], None],
                     wrote: Callable[[T], bool] = lambda _result: True) -> T:
    """Run work(conn) in one transaction that also bumps key's version, then reload key in this worker.

    The one way a shared object is changed: every other worker sees the bump within its next poll,
    and this one reloads at once rather than waiting for it. When ``wrote(result)`` is false, work
    changed nothing (a check failed before any write): neither the bump nor the reload happens.
    """
    def in_transaction(conn: Connection) -> T:
        result = work(conn)
        if wrote(result):
            bump(conn, key)
        return result
    result = run_transaction(engine, in_transaction)
    if wrote(result):
        reload()
    return result


class Synchronizer:
    """Polls conduit_sync_state and reloads what changed."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._reloaders: dict[str, Callable[[], None]] = {}
        self._versions: dict[str, int] = {}

    def register(self, key: str, reload: Callable[[], None]) -> None:
        """Call reload whenever key's version changes."""
        self._reloaders[key] = reload

    def changed(self, key: str) -> None:
        """Reload one key now (this worker just changed it)."""
        self._reloaders[key]()

    def poll(self) -> None:
        """Compare versions once and reload what moved."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(SyncState.key, SyncState.version)).all()
        for key, version in rows:
            if key in self._reloaders and self._versions.get(key) != version:
                self._versions[key] = version
                try:
                    self._reloaders[key]()
                except Exception:
                    _log.exception('reloading %s failed; will retry on the next change', key)
                    self._versions.pop(key, None)

    def run(self, interval: float) -> None:
        """Poll forever (run in a greenlet)."""
        while True:
            gevent.sleep(interval)
            try:
                self.poll()
            except Exception as e:
                _log.warning('sync poll failed: %s', e)
