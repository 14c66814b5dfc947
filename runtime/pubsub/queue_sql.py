"""The statements every publication and every delivered batch runs, as the driver's own SQL.

Through SQLAlchemy Core a statement costs about 30 µs of Python (cache key, parameter processing,
result set-up); the same statement through ``Connection.exec_driver_sql`` about 8, measured on the
development machine. These few run for every message, so they are written out here for SQLite
(``?`` parameters) and PostgreSQL (``%s``); everything else in ``runtime.pubsub.statements`` stays in
Core. They still run on the caller's SQLAlchemy connection, inside its transaction, and fail with
SQLAlchemy's exceptions, like every other statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

MESSAGE = 'conduit_message'
QUEUE = 'conduit_queue'

#: Columns of a stored message, in the order of the tuples insert_messages takes.
MESSAGE_COLUMNS = ('id', 'msg_id', 'topic_id', 'topic_name', 'data', 'mime_type', 'priority', 'pub_time',
                   'expiration_time', 'publisher', 'correl_id', 'in_reply_to', 'ext_client_id', 'has_gd', 'size',
                   'in_topic', 'ext_pub_time')
#: Columns of a queue entry, in the order of the tuples insert_entries takes.
ENTRY_COLUMNS = ('sub_id', 'message_id', 'priority', 'next_attempt_at', 'recv_time', 'delivery_count', 'last_error')

_PG_TYPES = {'id': 'bigint', 'msg_id': 'text', 'topic_id': 'integer', 'topic_name': 'text', 'data': 'text',
             'mime_type': 'text', 'priority': 'integer', 'pub_time': 'float8', 'expiration_time': 'float8',
             'publisher': 'text', 'correl_id': 'text', 'in_reply_to': 'text', 'ext_client_id': 'text',
             'has_gd': 'boolean', 'size': 'integer', 'in_topic': 'boolean', 'ext_pub_time': 'text', 'sub_id': 'integer',
             'message_id': 'bigint', 'next_attempt_at': 'float8', 'recv_time': 'float8', 'delivery_count': 'integer',
             'last_error': 'text'}

# The head of a queue with its messages, as Delivery takes them: high priority first (stored negated),
# then publication order.
_HEAD_COLUMNS = (f'q.id, q.sub_id, q.delivery_count, q.next_attempt_at, q.last_error, q.recv_time, m.id, m.msg_id, '
                 f'm.topic_name, m.data, m.mime_type, m.priority, m.pub_time, m.expiration_time, m.publisher, '
                 f'm.correl_id, m.in_reply_to, m.ext_client_id, m.has_gd, m.size, m.topic_id, m.ext_pub_time '
                 f'FROM {QUEUE} q JOIN {MESSAGE} m ON m.id = q.message_id')
_ORDER = 'ORDER BY q.priority, q.message_id LIMIT {p}'
_SQL = {
    'sqlite': {
        'last_message_id': "SELECT seq FROM sqlite_sequence WHERE name = 'conduit_message'",
        'insert_messages': f'INSERT INTO {MESSAGE} ({", ".join(MESSAGE_COLUMNS)}) '
                           f'VALUES ({", ".join("?" * len(MESSAGE_COLUMNS))})',
        'insert_entries': f'INSERT INTO {QUEUE} ({", ".join(ENTRY_COLUMNS)}) '
                          f'VALUES ({", ".join("?" * len(ENTRY_COLUMNS))})',
        'head': f'SELECT {_HEAD_COLUMNS} WHERE q.sub_id = ? AND q.ack_id IS NULL ' + _ORDER.format(p='?'),
        'head_due': f'SELECT {_HEAD_COLUMNS} WHERE q.sub_id = ? AND q.ack_id IS NULL AND q.next_attempt_at <= ? '
                    + _ORDER.format(p='?'),
    },
    'postgresql': {
        'next_message_ids': f"SELECT nextval(pg_get_serial_sequence('{MESSAGE}', 'id')) FROM generate_series(1, %s)",
        # One statement of the same text for any number of rows: an array per column.
        'insert_messages': f'INSERT INTO {MESSAGE} ({", ".join(MESSAGE_COLUMNS)}) SELECT * FROM unnest('
                           + ', '.join(f'%s::{_PG_TYPES[c]}[]' for c in MESSAGE_COLUMNS) + ')',
        'insert_entries': f'INSERT INTO {QUEUE} ({", ".join(ENTRY_COLUMNS)}) SELECT * FROM unnest('
                          + ', '.join(f'%s::{_PG_TYPES[c]}[]' for c in ENTRY_COLUMNS) + ')',
        'head': f'SELECT {_HEAD_COLUMNS} WHERE q.sub_id = %s AND q.ack_id IS NULL ' + _ORDER.format(p='%s'),
        'head_due': f'SELECT {_HEAD_COLUMNS} WHERE q.sub_id = %s AND q.ack_id IS NULL AND q.next_attempt_at <= %s '
                    + _ORDER.format(p='%s'),
        'count': f'UPDATE {QUEUE} SET delivery_count = delivery_count + 1 WHERE id = ANY(%s)',
        'uncount': f'UPDATE {QUEUE} SET delivery_count = delivery_count - 1 WHERE id = ANY(%s)',
        'ack': f'DELETE FROM {QUEUE} WHERE id = ANY(%s)',
    },
}


def _sqlite(conn: Connection) -> bool:
    return conn.dialect.name == 'sqlite'


def next_message_ids(conn: Connection, count: int) -> Sequence[int]:
    """Ids for the next count messages, in increasing order (an id also orders a message in its priority).

    On SQLite the ids follow the table's AUTOINCREMENT sequence, which only the holder of the write lock
    may do: the caller's transaction must be a write transaction (``BEGIN IMMEDIATE``).
    """
    if _sqlite(conn):
        last = conn.exec_driver_sql(_SQL['sqlite']['last_message_id']).scalar()
        if last is None:  # no message was ever stored: the sequence has no row yet
            last = conn.exec_driver_sql(f'SELECT coalesce(max(id), 0) FROM {MESSAGE}').scalar_one()
        return range(last + 1, last + 1 + count)
    return sorted(conn.exec_driver_sql(_SQL['postgresql']['next_message_ids'], (count,)).scalars())


def insert_messages(conn: Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert messages: tuples in the order of MESSAGE_COLUMNS."""
    _insert(conn, 'insert_messages', rows)


def insert_entries(conn: Connection, rows: list[tuple[Any, ...]]) -> None:
    """Insert queue entries: tuples in the order of ENTRY_COLUMNS."""
    _insert(conn, 'insert_entries', rows)


def _insert(conn: Connection, name: str, rows: list[tuple[Any, ...]]) -> None:
    if _sqlite(conn):
        conn.exec_driver_sql(_SQL['sqlite'][name], rows)
    else:
        conn.exec_driver_sql(_SQL['postgresql'][name], tuple(list(column) for column in zip(*rows, strict=True)))


def head(conn: Connection, sub_id: int, limit: int, due_before: float | None) -> list[tuple[Any, ...]]:
    """The rows of a queue's head (see runtime.pubsub.statements.fetch_batch)."""
    sql = _SQL['sqlite' if _sqlite(conn) else 'postgresql']
    if due_before is None:
        return list(conn.exec_driver_sql(sql['head'], (sub_id, limit)).fetchall())
    return list(conn.exec_driver_sql(sql['head_due'], (sub_id, due_before, limit)).fetchall())


def _by_ids(conn: Connection, pg_name: str, sqlite_template: str, ids: list[int]) -> None:
    if not _sqlite(conn):
        conn.exec_driver_sql(_SQL['postgresql'][pg_name], (list(ids),))
        return
    # SQLite has no arrays; the statement cache holds one text per batch size.
    conn.exec_driver_sql(sqlite_template.format(', '.join('?' * len(ids))), tuple(ids))


def count_attempt(conn: Connection, entry_ids: list[int]) -> None:
    """Record that delivery of these entries starts now."""
    _by_ids(conn, 'count', f'UPDATE {QUEUE} SET delivery_count = delivery_count + 1 WHERE id IN ({{}})', entry_ids)


def uncount_attempt(conn: Connection, entry_ids: list[int]) -> None:
    """Take back attempts recorded for entries that were not tried after all."""
    _by_ids(conn, 'uncount', f'UPDATE {QUEUE} SET delivery_count = delivery_count - 1 WHERE id IN ({{}})', entry_ids)


def ack(conn: Connection, entry_ids: list[int]) -> None:
    """Remove delivered entries from their queue."""
    _by_ids(conn, 'ack', f'DELETE FROM {QUEUE} WHERE id IN ({{}})', entry_ids)
