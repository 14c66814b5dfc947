"""Database engines for SQLite (embedded default) and PostgreSQL (psycopg 3).

SQLite is opened in WAL mode with foreign keys on. pysqlite's own transaction handling is
turned off and ``BEGIN`` is emitted by us, so that a write transaction can start with
``BEGIN IMMEDIATE`` (``transaction(engine, write=True)``): it takes the write lock up front,
instead of failing with "database is locked" when a reader later tries to upgrade.

Under gevent, psycopg 3 waits cooperatively; sqlite3 calls run inline and block the hub for
their duration, which is fine for the short statements the runtime issues. Long operations
(sweeps, scans) go through ``runtime.db.pool.run_blocking``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from runtime.datafiles import create_private_file, private_dir
from runtime.errors import ConfigError


def make_psycopg_cooperative() -> None:
    """Make psycopg wait through gevent even if it was imported before monkey-patching.

    psycopg picks its wait function when ``psycopg.waiting`` is first imported: the C one, which
    blocks the whole process, unless ``select`` is already patched. gunicorn imports the runtime
    (and so psycopg) in the master, and the gevent worker patches only after the fork, so every
    query would freeze the worker's hub. This rebinds the choice once the worker is patched.
    """
    import gevent.monkey
    if not gevent.monkey.is_module_patched('select'):
        return
    import select
    import selectors

    from psycopg import waiting
    waiting.wait = waiting.wait_poll if hasattr(select, 'poll') else waiting.wait_select
    if hasattr(waiting, 'DefaultSelector'):
        waiting.DefaultSelector = selectors.DefaultSelector


def normalize_url(url: str) -> str:
    """Use psycopg 3 for plain postgresql:// URLs."""
    if url.startswith('postgresql://') or url.startswith('postgres://'):
        return 'postgresql+psycopg://' + url.split('://', 1)[1]
    return url


def is_sqlite(engine_or_url: Engine | str) -> bool:
    """Whether this is a SQLite database."""
    url = engine_or_url if isinstance(engine_or_url, str) else str(engine_or_url.url)
    return url.startswith('sqlite')


def make_engine(url: str, pool_size: int = 10, sqlite_synchronous: str = 'FULL',
                sqlite_busy_timeout_ms: int = 10000, **kwargs: Any) -> Engine:
    """Create an engine configured for the runtime.

    Bound parameters are hidden from SQLAlchemy's error messages: they may hold password hashes,
    sub_keys or message data, and database errors end up in logs.
    """
    url = normalize_url(url)
    try:
        parsed = make_url(url)
    except Exception as e:
        raise ConfigError('database.url', f'not a valid database URL: {e}') from None
    if parsed.get_backend_name() == 'sqlite':
        if parsed.database and parsed.database != ':memory:' and not parsed.database.startswith('file:'):
            # Made before the first connection: SQLite would create the file with the umask's mode,
            # and it gives the -wal and -shm files the mode of the database file.
            path = Path(parsed.database)
            private_dir(path.parent)
            create_private_file(path)
        if sqlite_synchronous.upper() not in ('OFF', 'NORMAL', 'FULL', 'EXTRA'):
            raise ConfigError('database.sqlite_synchronous', f'must be OFF, NORMAL, FULL or EXTRA, '
                                                             f'not {sqlite_synchronous!r}')
        engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size, hide_parameters=True,
                               connect_args={'check_same_thread': False,
                                             'timeout': sqlite_busy_timeout_ms / 1000}, **kwargs)
        _setup_sqlite(engine, sqlite_synchronous.upper(), sqlite_busy_timeout_ms)
        return engine
    if parsed.get_backend_name() != 'postgresql':
        raise ConfigError('database.url', f'unsupported database {parsed.get_backend_name()!r}; '
                                          f'use sqlite:/// or postgresql://')
    return create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True,
                         hide_parameters=True, **kwargs)


def _setup_sqlite(engine: Engine, synchronous: str, busy_timeout_ms: int) -> None:
    @event.listens_for(engine, 'connect')
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves, see the module docstring
        cur = dbapi_conn.cursor()
        cur.execute('PRAGMA journal_mode=WAL')
        cur.execute('PRAGMA foreign_keys=ON')
        cur.execute(f'PRAGMA synchronous={synchronous}')
        cur.execute(f'PRAGMA busy_timeout={int(busy_timeout_ms)}')
        cur.close()

    @event.listens_for(engine, 'begin')
    def _on_begin(conn: Connection) -> None:
        immediate = conn.get_execution_options().get('sqlite_immediate', False)
        conn.exec_driver_sql('BEGIN IMMEDIATE' if immediate else 'BEGIN')


@contextmanager
def transaction(engine: Engine, write: bool = False) -> Iterator[Connection]:
    """A connection in a transaction, committed on success; write=True locks SQLite up front."""
    conn = engine.connect()
    try:
        if write and is_sqlite(engine):
            conn = conn.execution_options(sqlite_immediate=True)
        with conn.begin():
            yield conn
    finally:
        conn.close()


def database_answers(engine: Engine) -> bool:
    """Whether the database answers a trivial query now (the health check); never raises."""
    try:
        with engine.connect() as conn:
            conn.execute(text('SELECT 1'))
    except Exception:
        return False
    return True
