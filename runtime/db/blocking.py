"""Running a transaction without freezing the gevent hub.

psycopg 3 waits cooperatively under gevent, so PostgreSQL work runs inline. sqlite3 does not:
a commit that waits for fsync (or for another process's write lock) would stop every greenlet of
the worker. For SQLite the connection is checked out in the calling greenlet (the pool's locks are
gevent locks) and the work itself runs in gevent's thread pool, where sqlite3 releases the GIL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import gevent
from sqlalchemy import Connection, Engine

from runtime.db.engine import is_sqlite

T = TypeVar('T')


def run_transaction(engine: Engine, work: Callable[[Connection], T], write: bool = True) -> T:
    """Run work(conn) in one transaction, committed on success, off the hub for SQLite."""
    sqlite = is_sqlite(engine)
    conn = engine.connect()
    try:
        if sqlite and write:
            conn = conn.execution_options(sqlite_immediate=True)

        def in_transaction() -> T:
            with conn.begin():
                return work(conn)

        if not sqlite:
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
    finally:
        conn.close()
