"""Running a transaction without freezing the gevent hub.

psycopg 3 waits cooperatively under gevent, so PostgreSQL work runs inline. sqlite3 does not:
a commit that waits for fsync (or for another process's write lock) would stop every greenlet of
the worker. For SQLite the connection is checked out in the calling greenlet (the pool's locks are
gevent locks) and the work itself runs in gevent's thread pool, where sqlite3 releases the GIL.

SQLite has one writer at a time, and a writer that finds the database locked waits in SQLite's
busy handler, which sleeps in steps of up to 100 ms. Within one process, write transactions
therefore queue on a gevent lock first (in arrival order, woken as soon as the previous writer
commits); the busy handler is left for writers of other processes.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TypeVar

import gevent
from gevent.lock import Semaphore
from sqlalchemy import Connection, Engine

from runtime.db.engine import is_sqlite

T = TypeVar('T')

_write_locks: weakref.WeakKeyDictionary[Engine, Semaphore] = weakref.WeakKeyDictionary()


def _write_lock(engine: Engine) -> Semaphore:
    lock = _write_locks.get(engine)
    if lock is None:
        lock = _write_locks[engine] = Semaphore()
    return lock


def run_transaction(engine: Engine, work: Callable[[Connection], T], write: bool = True) -> T:
    """Run work(conn) in one transaction, committed on success, off the hub for SQLite."""
    if write and is_sqlite(engine):
        with _write_lock(engine):
            return _run(engine, work, True, True)
    return _run(engine, work, write, is_sqlite(engine))


def write_connection(engine: Engine) -> Connection:
    """A connection for run_write_on, kept by its caller across transactions (SQLite: they begin IMMEDIATE)."""
    conn = engine.connect()
    return conn.execution_options(sqlite_immediate=True) if is_sqlite(engine) else conn


def run_write_on(engine: Engine, conn: Connection, work: Callable[[Connection], T]) -> T:
    """Run work(conn) in one write transaction on a connection from write_connection, as run_transaction would.

    For a caller that writes often (the group commit): checking a connection out of the pool and
    back for every transaction cost the hub about a tenth of a sequential publication's CPU.
    """
    if is_sqlite(engine):
        with _write_lock(engine):
            return _in_transaction(conn, work, True)
    return _in_transaction(conn, work, False)


def _run(engine: Engine, work: Callable[[Connection], T], write: bool, sqlite: bool) -> T:
    conn = engine.connect()
    try:
        if sqlite and write:
            conn = conn.execution_options(sqlite_immediate=True)
        return _in_transaction(conn, work, sqlite)
    finally:
        conn.close()


def _in_transaction(conn: Connection, work: Callable[[Connection], T], off_hub: bool) -> T:
    def in_transaction() -> T:
        with conn.begin():
            return work(conn)

    if not off_hub:
        return in_transaction()

    def in_thread() -> tuple[bool, object]:
        # Errors are returned, not raised: gevent's pool would print a traceback for every
        # ordinary one (a 404, a duplicate name) that the caller handles anyway.
        try:
            return True, in_transaction()
        except Exception as e:
            return False, e

    task = gevent.get_hub().threadpool.spawn(in_thread)
    try:
        ok, value = task.get()
    except BaseException:
        # Killed while waiting (a stopping loop, a lost lease): the thread still uses the
        # connection, so it must finish before the connection goes back to the pool.
        task.wait()
        raise
    if not ok:
        raise value  # type: ignore[misc]
    return value  # type: ignore[return-value]
