"""The statements every publication and every delivered batch runs, as the driver's own SQL.

Through SQLAlchemy Core a statement costs about 30 µs of Python (cache key, parameter processing,
result set-up); the same statement through ``Connection.exec_driver_sql`` about 8, measured on the
development machine. These few run for every message, so they are written out here for SQLite
(``?`` parameters) and PostgreSQL (``%s``); everything else in ``runtime.pubsub.statements`` stays in
Core. They run on the caller's connection, inside its transaction, and fail with SQLAlchemy's
exceptions, like every other statement.

On SQLite they go to sqlite3's own cursor (``runtime.db.engine.sqlite_execute``): ``exec_driver_sql``
still sets up SQLAlchemy's result for every call, 85 µs for a queue's head here against 7 µs, and a
sequential publisher's commit runs six of these statements.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from sqlalchemy import Connection

from runtime.db.engine import sqlite_execute

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
_HEAD = ('q.id', 'q.sub_id', 'q.delivery_count', 'q.next_attempt_at', 'q.last_error', 'q.recv_time', 'm.id', 'm.msg_id',
         'm.topic_name', 'm.data', 'm.mime_type', 'm.priority', 'm.pub_time', 'm.expiration_time', 'm.publisher',
         'm.correl_id', 'm.in_reply_to', 'm.ext_client_id', 'm.has_gd', 'm.size', 'm.topic_id', 'm.ext_pub_time')
_FROM = f'FROM {QUEUE} q JOIN {MESSAGE} m ON m.id = q.message_id'
_HEAD_COLUMNS = f'{", ".join(_HEAD)} {_FROM}'
_ORDER = 'ORDER BY q.priority, q.message_id LIMIT {p}'
# The head and the count of its attempts in one PostgreSQL statement (one round trip): every part of a
# statement sees the same snapshot, so the rows answered are as they were before the count.
_TAKE_CTES = (f'h AS (SELECT {", ".join(f"{c} AS c{i}" for i, c in enumerate(_HEAD))}, q.priority AS o {_FROM} '
              'WHERE q.sub_id = %s AND q.ack_id IS NULL {due}{skip}' + _ORDER.format(p='%s') + '), '
              f'c AS (UPDATE {QUEUE} SET delivery_count = delivery_count + 1 WHERE id IN (SELECT c0 FROM h))')
_TAKE = (f'WITH {_TAKE_CTES} SELECT {", ".join(f"c{i}" for i in range(len(_HEAD)))} FROM h ORDER BY o, c6'
         .replace('{skip}', ''))
# The same, with the last batch's acks and the lease's fence in the statement: the acked entries deleted
# (and, as the head is read in the snapshot from before the delete, left out of it), the lease's version
# (None when the owner does not hold it) in the first column of every row, and one row of NULLs after it
# when the head is empty. Unless the lease is held at the expected version, the statement changes nothing
# and answers no entry: it may run in a transaction that commits whatever its caller makes of the answer
# (see runtime.pubsub.one_trip).
_FENCED_TAKE = ('WITH f AS (SELECT version FROM conduit_lease WHERE name = %s AND owner = %s FOR KEY SHARE), '
                'ok AS (SELECT 1 FROM f WHERE version = %s), '
                f'a AS (DELETE FROM {QUEUE} WHERE id = ANY(%s::bigint[]) AND EXISTS (SELECT 1 FROM ok)), '
                + _TAKE_CTES.replace('{skip}', 'AND q.id <> ALL(%s::bigint[]) AND EXISTS (SELECT 1 FROM ok) ')
                + f' SELECT (SELECT version FROM f), {{next_due}}, {", ".join(f"h.c{i}" for i in range(len(_HEAD)))} '
                'FROM (SELECT 1) AS one LEFT JOIN h ON true ORDER BY h.o, h.c6')
# When nothing due was taken, when the earliest entry left is due (runtime.pubsub.statements.next_due): read
# only then, and without the entries the statement acks (its snapshot still holds them).
_NEXT_DUE = (f'(SELECT min(next_attempt_at) FROM {QUEUE} WHERE sub_id = %s AND ack_id IS NULL '
             'AND id <> ALL(%s::bigint[]) AND NOT EXISTS (SELECT 1 FROM h))')
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
        'take': _TAKE.format(due=''),
        'take_due': _TAKE.format(due='AND q.next_attempt_at <= %s '),
        'fenced_take': _FENCED_TAKE.format(due='', next_due='NULL::float8'),
        'fenced_take_due': _FENCED_TAKE.format(due='AND q.next_attempt_at <= %s ', next_due=_NEXT_DUE),
        'count': f'UPDATE {QUEUE} SET delivery_count = delivery_count + 1 WHERE id = ANY(%s)',
        'uncount': f'UPDATE {QUEUE} SET delivery_count = delivery_count - 1 WHERE id = ANY(%s)',
        'ack': f'DELETE FROM {QUEUE} WHERE id = ANY(%s)',
    },
}


# A whole publication batch on PostgreSQL in one statement, so one round trip: ids drawn from the message
# sequence and numbered in increasing order (an id also orders a message within its priority), the
# messages inserted with them, the queue entries inserted pointing at them by that number, and the
# NOTIFY sent (at commit) from the same statement. The foreign key from an entry to its message is
# checked at the end of the statement, when the message rows exist; the entries are inserted, and so
# numbered, in the order given (a message's copies in the order of its subscriptions). Messages and
# entries arrive as two JSON arrays of objects: two parameters whatever the batch, which a driver binds
# at the cost of one string each (as arrays, one per column, binding them on the client cost 1.6 ms
# for 50 messages).
_PG_MESSAGE_ROWS = ', '.join(f'{c} {_PG_TYPES[c]}' for c in MESSAGE_COLUMNS[1:])
_PG_PUBLISH_HEAD = (
    f"WITH ids AS (SELECT row_number() OVER (ORDER BY id) AS n, id FROM (SELECT nextval(pg_get_serial_sequence("
    f"'{MESSAGE}', 'id')) AS id FROM generate_series(1, %s)) AS s), "
    f"msg AS (INSERT INTO {MESSAGE} ({', '.join(MESSAGE_COLUMNS)}) SELECT ids.id, "
    + ', '.join(f'u.{c}' for c in MESSAGE_COLUMNS[1:])
    + f" FROM ROWS FROM (json_to_recordset(%s::json) AS ({_PG_MESSAGE_ROWS})) "
    f"WITH ORDINALITY AS u({', '.join(MESSAGE_COLUMNS[1:])}, n) JOIN ids ON ids.n = u.n), "
    f"ent AS (INSERT INTO {QUEUE} ({', '.join(ENTRY_COLUMNS)}) SELECT e.sub_id, ids.id, e.priority, 0.0, "
    f"e.recv_time, 0, '' FROM ROWS FROM (json_to_recordset(%s::json) "
    f"AS (sub_id integer, n bigint, priority integer, recv_time float8)) WITH ORDINALITY AS e(sub_id, n, priority, "
    "recv_time, k) JOIN ids ON ids.n = e.n ORDER BY e.k) ")
_PG_PUBLISH = _PG_PUBLISH_HEAD + 'SELECT 1'
_PG_PUBLISH_NOTIFY = _PG_PUBLISH_HEAD + 'SELECT pg_notify(%s, %s)'


def publish_statement(messages: list[tuple[Any, ...]], entries: list[tuple[int, int, int, float]],
                      notify: tuple[str, str] | None) -> tuple[str, tuple[Any, ...]]:
    """The PostgreSQL statement that inserts messages and their queue entries, and NOTIFYs: (sql, params).

    messages: tuples in the order of MESSAGE_COLUMNS without the id (the statement draws the ids);
    entries: (sub_id, the 1-based position of its message in messages, priority, recv_time).
    """
    params = (len(messages), _json([dict(zip(MESSAGE_COLUMNS[1:], m, strict=True)) for m in messages]),
              _json([dict(zip(_ENTRY_KEYS, e, strict=True)) for e in entries]))
    if notify is None:
        return _PG_PUBLISH, params
    return _PG_PUBLISH_NOTIFY, (*params, *notify)


_ENTRY_KEYS = ('sub_id', 'n', 'priority', 'recv_time')


def _json(rows: list[dict[str, Any]]) -> str:
    return orjson.dumps(rows).decode()


def _sqlite(conn: Connection) -> bool:
    return conn.dialect.name == 'sqlite'


def next_message_ids(conn: Connection, count: int) -> Sequence[int]:
    """Ids for the next count messages, in increasing order (an id also orders a message in its priority).

    On SQLite the ids follow the table's AUTOINCREMENT sequence, which only the holder of the write lock
    may do: the caller's transaction must be a write transaction (``BEGIN IMMEDIATE``).
    """
    if _sqlite(conn):
        row = sqlite_execute(conn, _SQL['sqlite']['last_message_id']).fetchone()
        if row is None:  # no message was ever stored: the sequence has no row yet
            row = sqlite_execute(conn, f'SELECT coalesce(max(id), 0) FROM {MESSAGE}').fetchone()
        last = row[0]
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
        sqlite_execute(conn, _SQL['sqlite'][name], rows, many=True)
    else:
        conn.exec_driver_sql(_SQL['postgresql'][name], tuple(list(column) for column in zip(*rows, strict=True)))


def head(conn: Connection, sub_id: int, limit: int, due_before: float | None) -> list[tuple[Any, ...]]:
    """The rows of a queue's head (see runtime.pubsub.statements.fetch_batch)."""
    if _sqlite(conn):
        sql = _SQL['sqlite']
        if due_before is None:
            return sqlite_execute(conn, sql['head'], (sub_id, limit)).fetchall()
        return sqlite_execute(conn, sql['head_due'], (sub_id, due_before, limit)).fetchall()
    sql = _SQL['postgresql']
    if due_before is None:
        return list(conn.exec_driver_sql(sql['head'], (sub_id, limit)).fetchall())
    return list(conn.exec_driver_sql(sql['head_due'], (sub_id, due_before, limit)).fetchall())


def take(conn: Connection, sub_id: int, limit: int, due_before: float | None) -> list[tuple[Any, ...]]:
    """head() and count_attempt() of its entries: the rows as they were before the count."""
    if _sqlite(conn):
        rows = head(conn, sub_id, limit, due_before)
        if rows:
            count_attempt(conn, [row[0] for row in rows])
        return rows
    sql = _SQL['postgresql']
    if due_before is None:
        return list(conn.exec_driver_sql(sql['take'], (sub_id, limit)).fetchall())
    return list(conn.exec_driver_sql(sql['take_due'], (sub_id, due_before, limit)).fetchall())


def fenced_take_statement(lease: str, owner: str, version: int, acked: list[int], sub_id: int, limit: int,
                          due_before: float | None) -> tuple[str, tuple[Any, ...]]:
    """Ack, then take() on PostgreSQL, unless the lease is not held at version: (sql, params).

    Its rows go to fenced_rows(). The statement changes nothing when the lease is lost.
    """
    sql = _SQL['postgresql']
    # The ids as one array literal: a driver binding on the client quotes one string, not each element.
    ids = '{' + ','.join(str(int(i)) for i in acked) + '}'
    if due_before is None:
        return sql['fenced_take'], (lease, owner, version, ids, sub_id, ids, limit)
    return sql['fenced_take_due'], (lease, owner, version, ids, sub_id, due_before, ids, limit, sub_id, ids)


def fenced_rows(rows: Sequence[Sequence[Any]]) -> tuple[int | None, float | None, list[tuple[Any, ...]]]:
    """What a fenced take answered: the lease's version (None when not held), next due and the head's rows.

    Next due is read when a take with a due time found nothing due: when the earliest entry left is
    due, None for an empty queue (and always None for a take without a due time, or one that took rows).
    """
    return rows[0][0], rows[0][1], [tuple(row[2:]) for row in rows if row[2] is not None]


def _by_ids(conn: Connection, pg_name: str, sqlite_template: str, ids: list[int]) -> None:
    if not _sqlite(conn):
        conn.exec_driver_sql(_SQL['postgresql'][pg_name], (list(ids),))
        return
    # SQLite has no arrays; the statement cache holds one text per batch size.
    sqlite_execute(conn, sqlite_template.format(', '.join('?' * len(ids))), tuple(ids))


def count_attempt(conn: Connection, entry_ids: list[int]) -> None:
    """Record that delivery of these entries starts now."""
    _by_ids(conn, 'count', f'UPDATE {QUEUE} SET delivery_count = delivery_count + 1 WHERE id IN ({{}})', entry_ids)


def uncount_attempt(conn: Connection, entry_ids: list[int]) -> None:
    """Take back attempts recorded for entries that were not tried after all."""
    _by_ids(conn, 'uncount', f'UPDATE {QUEUE} SET delivery_count = delivery_count - 1 WHERE id IN ({{}})', entry_ids)


def ack_statement(entry_ids: list[int]) -> tuple[str, tuple[Any, ...]]:
    """ack() on PostgreSQL as a statement to run: (sql, params)."""
    return _SQL['postgresql']['ack'], (list(entry_ids),)


def ack(conn: Connection, entry_ids: list[int]) -> None:
    """Remove delivered entries from their queue."""
    _by_ids(conn, 'ack', f'DELETE FROM {QUEUE} WHERE id IN ({{}})', entry_ids)
