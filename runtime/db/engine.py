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

import math
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, create_engine, event, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, DisconnectionError

from runtime.errors import ConfigError
from runtime.util.datafiles import create_private_file, private_dir


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
    if isinstance(engine_or_url, str):
        return engine_or_url.startswith('sqlite')
    # Not str(engine.url): that renders the whole URL again, and this runs for every transaction.
    return engine_or_url.dialect.name == 'sqlite'


def dead_link_params(secs: float) -> dict[str, str]:
    """libpq connection parameters that take a connection silent for ``secs`` for dead, on both ends.

    A cut network link drops packets without a word: without these, a query waits for TCP's
    retransmissions to give up (about 15 minutes on Linux), holding its greenlet, and the database
    keeps the cut client's session — and the row locks of its open transaction — as long. The
    client side gets keepalives, ``tcp_user_timeout`` (unacknowledged data) and ``connect_timeout``;
    the server side the same through ``options``, so that PostgreSQL ends a cut server's session.
    """
    user_timeout_ms = str(int(secs * 1000))
    idle, interval, count = str(max(1, int(secs / 3))), str(max(1, int(secs / 6))), '3'
    return {
        'connect_timeout': str(max(2, math.ceil(secs))),
        'keepalives': '1', 'keepalives_idle': idle, 'keepalives_interval': interval, 'keepalives_count': count,
        'tcp_user_timeout': user_timeout_ms,
        'options': f'-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} '
                   f'-c tcp_keepalives_count={count} -c tcp_user_timeout={user_timeout_ms}',
    }


def idle_transaction_options(secs: float) -> str:
    """The libpq ``options`` by which PostgreSQL ends a session idle inside a transaction for ``secs``.

    A process stopped in the middle of a transaction (SIGSTOP, a frozen virtual machine, a hub
    blocked by a long call) keeps its connection: the kernel still answers for it, so neither TCP
    nor ``dead_client_secs`` notice, and the rows it locked stay locked. A lease row so locked could
    never be taken over by another worker (``LeaseManager._take`` skips locked rows), however long
    ago the lease expired. With this, the server ends such a session after ``secs``, its locks go
    with it, and the stopped process finds its connection closed when it goes on. Time a statement
    runs does not count, only time the server waits for the client's next statement.
    """
    return f'-c idle_in_transaction_session_timeout={max(1, int(secs * 1000))}'


def make_engine(url: str, pool_size: int = 10, sqlite_synchronous: str = 'FULL',
                sqlite_busy_timeout_ms: int = 10000, dead_client_secs: float = 0.0,
                idle_in_transaction_secs: float = 0.0, **kwargs: Any) -> Engine:
    """Create an engine configured for the runtime.

    Bound parameters are hidden from SQLAlchemy's error messages: they may hold password hashes,
    sub_keys or message data, and database errors end up in logs. On PostgreSQL, a
    ``dead_client_secs`` above 0 adds ``dead_link_params`` to the URL's query, where every
    connection made from the URL finds them (the LISTEN connection of ``runtime.pubsub.wakeups`` too),
    and an ``idle_in_transaction_secs`` above 0 has the server end a session that sits that long
    inside a transaction (``idle_in_transaction_session_timeout``; see ``idle_transaction_options``).
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
        register_sqlite_adapters()
        return engine
    if parsed.get_backend_name() != 'postgresql':
        raise ConfigError('database.url', f'unsupported database {parsed.get_backend_name()!r}; '
                                          f'use sqlite:/// or postgresql://')
    params = dead_link_params(dead_client_secs) if dead_client_secs > 0 else {}
    # In this order, so that a later -c of the same setting wins: the URL's own over the idle limit.
    options = [idle_transaction_options(idle_in_transaction_secs)] if idle_in_transaction_secs > 0 else []
    if given := parsed.query.get('options'):
        options.append(given if isinstance(given, str) else ' '.join(given))
    if 'options' in params:
        options.append(params['options'])
    if options:
        params['options'] = ' '.join(options)
        parsed = parsed.update_query_dict({k: v for k, v in params.items()
                                           if k == 'options' or k not in parsed.query})
    engine = create_engine(parsed, pool_size=pool_size, max_overflow=pool_size, hide_parameters=True, **kwargs)
    _setup_postgresql_ping(engine)
    return engine


def _setup_postgresql_ping(engine: Engine) -> None:
    """Ping a pooled connection when it is checked out; a dead one is replaced by a new one.

    In place of SQLAlchemy's ``pool_pre_ping``: that one switches psycopg to autocommit for its
    ``SELECT 1`` and back in a ``finally``. A greenlet killed while it waits for the answer (a
    stopping server kills its loops) left the query running, so switching back raised
    ``ProgrammingError`` in place of the kill, and a loop that logs its errors and goes on
    survived it. Here an interrupted ping leaves the kill as it is; the pool then closes the
    connection, whose state is unknown.
    """
    @event.listens_for(engine, 'connect')
    def _on_connect(_dbapi_conn: Any, record: Any) -> None:
        record.info['conduit_fresh'] = True  # just made: its first checkout needs no ping

    @event.listens_for(engine, 'checkout')
    def _on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        if record.info.pop('conduit_fresh', False):
            return
        was = dbapi_conn.autocommit
        try:
            # No transaction for the ping (it would have to be rolled back: a second round trip).
            dbapi_conn.autocommit = True
            dbapi_conn.execute('SELECT 1')
            dbapi_conn.autocommit = was
        except psycopg.Error as e:
            raise DisconnectionError(f'pooled connection failed its ping: {type(e).__name__}') from e


def register_sqlite_adapters() -> None:
    """Have sqlite3 bind NULL and booleans without a search that cost 0.4 to 1 µs per such parameter here.

    sqlite3 binds int, float, str and bytearray directly. Any other parameter goes through its
    adaptation protocol, whose fallback looks ``__adapt__`` up on a class that lacks it: Python then
    formats an AttributeError message only to discard it. A publication's row has six such
    parameters (four NULL columns and two booleans), which made binding them cost about three times
    what binding integers does. An adapter registered for the type is found before that search. These
    two bind exactly what sqlite3 binds without them (NULL; 1 and 0), so registering them for the
    whole process changes no other user of sqlite3.
    """
    # {}.get answers None for None, and is a C function, as int is: no Python frame per parameter.
    sqlite3.register_adapter(type(None), {}.get)
    sqlite3.register_adapter(bool, int)


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
        # Not sqlite_execute: SQLAlchemy counts the transaction as begun only once this returns.
        _on_driver(conn, 'BEGIN IMMEDIATE' if immediate else 'BEGIN')


def sqlite_execute(conn: Connection, sql: str, params: Sequence[Any] = (), many: bool = False) -> sqlite3.Cursor:
    """One statement on the transaction's own sqlite3 connection, failing with SQLAlchemy's exceptions.

    For the statements every message runs: ``exec_driver_sql`` sets up SQLAlchemy's result on every
    call, which for the 22 columns of a queue's head took 85 µs here against 7 µs for sqlite3 alone.
    """
    if not conn.in_transaction():
        # What exec_driver_sql would do (autobegin): the statement must not run in sqlite3's autocommit.
        conn.begin()
    return _on_driver(conn, sql, params, many)


def _on_driver(conn: Connection, sql: str, params: Sequence[Any] = (), many: bool = False) -> sqlite3.Cursor:
    raw = conn.connection.driver_connection
    try:
        return raw.executemany(sql, params) if many else raw.execute(sql, params)  # type: ignore[union-attr]
    except sqlite3.Error as e:
        # As SQLAlchemy itself would raise it (IntegrityError, OperationalError, ...), parameters hidden.
        raise DBAPIError.instance(sql, params, e, sqlite3.Error, hide_parameters=True, dialect=conn.dialect,
                                  ismulti=many) from e


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
