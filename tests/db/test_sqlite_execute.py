"""The hot statements on sqlite3's own cursor fail as every other statement does: with SQLAlchemy's exceptions."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from runtime.db.engine import make_engine, transaction
from runtime.db.migrate import upgrade
from runtime.pubsub import queue_sql

SECRET = 'card 4111-1111-1111-1111'


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    engine = make_engine(f'sqlite:///{tmp_path / "conduit.db"}', pool_size=2, sqlite_busy_timeout_ms=50)
    upgrade(engine)
    yield engine
    engine.dispose()


def _message(message_id: int, msg_id: str) -> tuple[object, ...]:
    return (message_id, msg_id, 1, '/t', SECRET, 'application/json', 5, 1.0, 0.0, 'p', '', '', '', True,
            len(SECRET), False, None)


def test_a_refused_insert_is_sqlalchemys_integrity_error_without_the_data(engine: Engine) -> None:
    with transaction(engine, write=True) as conn:
        queue_sql.insert_messages(conn, [_message(1, 'm-1')])
    with pytest.raises(IntegrityError) as caught, transaction(engine, write=True) as conn:
        queue_sql.insert_messages(conn, [_message(2, 'm-1')])  # the same msg_id
    assert isinstance(caught.value.orig, sqlite3.IntegrityError)
    assert SECRET not in str(caught.value)
    # The failed transaction was rolled back and the connection is usable again.
    with transaction(engine, write=True) as conn:
        queue_sql.insert_messages(conn, [_message(2, 'm-2')])
        assert queue_sql.next_message_ids(conn, 2) == range(3, 5)


def test_a_database_locked_by_another_writer_is_sqlalchemys_operational_error(engine: Engine, tmp_path: Path) -> None:
    other = sqlite3.connect(tmp_path / 'conduit.db', isolation_level=None)
    other.execute('BEGIN IMMEDIATE')
    try:
        with pytest.raises(OperationalError, match='locked'), transaction(engine, write=True) as conn:
            queue_sql.ack(conn, [1])
    finally:
        other.execute('ROLLBACK')
        other.close()
    with transaction(engine, write=True) as conn:
        queue_sql.ack(conn, [1])


def test_a_statement_outside_a_transaction_begins_one_as_sqlalchemy_would(engine: Engine) -> None:
    # Without it, sqlite3 (in autocommit: the runtime emits BEGIN itself) would have stored the row at once.
    with engine.connect() as conn:
        queue_sql.insert_messages(conn, [_message(1, 'm-1')])
        assert conn.in_transaction()
        conn.rollback()
    with transaction(engine) as conn:
        assert queue_sql.next_message_ids(conn, 1) == range(1, 2)  # nothing was stored


def test_nulls_and_booleans_are_stored_as_sqlite3_stores_them(engine: Engine) -> None:
    """The adapters that spare sqlite3 its slow search bind what it binds without them: NULL, 1 and 0."""
    with transaction(engine, write=True) as conn:
        queue_sql.insert_messages(conn, [(1, 'm-1', 1, '/t', 'x', 'text/plain', 5, 1.0, 2.0, 'p', None, None, None,
                                          True, 1, False, None)])
    with transaction(engine) as conn:
        row = conn.exec_driver_sql(
            'SELECT typeof(correl_id), correl_id, typeof(has_gd), has_gd, typeof(in_topic), in_topic, ext_pub_time '
            'FROM conduit_message').one()
    assert tuple(row) == ('null', None, 'integer', 1, 'integer', 0, None)


def test_the_adapters_change_nothing_for_other_users_of_sqlite3(engine: Engine) -> None:
    """They are registered for the whole process: a plain sqlite3 connection still gets NULL, 1 and 0."""
    plain = sqlite3.connect(':memory:')
    try:
        plain.execute('CREATE TABLE t (a, b, c)')
        plain.execute('INSERT INTO t VALUES (?, ?, ?)', (None, True, False))
        row = plain.execute('SELECT typeof(a), a, typeof(b), b, c FROM t').fetchone()
        assert row == ('null', None, 'integer', 1, 0)
    finally:
        plain.close()
