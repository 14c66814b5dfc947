"""A whole PostgreSQL transaction in one round trip: BEGIN, its statements and COMMIT sent as one query.

Through the driver, a commit that stores a publication and takes the next batch of its subscriber's
loop costs four round trips — BEGIN (psycopg sends it before the first statement), the publication,
the take, COMMIT — and on a loopback link of about 0.1 ms that was over a third of one sequential
publisher's time per message. Sent as one query of the simple protocol, the same transaction costs
one: the server runs the statements in order and answers once the commit is durable.

Each statement is prepared once per connection (``PREPARE``, in the first trip that uses it) and then
run by ``EXECUTE``: planning these statements costs the server about 0.2 ms each, more than the round
trips saved. The arguments are bound on the client, by psycopg's ``ClientCursor.mogrify``, which quotes
every value for the connection's encoding (the query never holds anything but quoted literals). If a
statement fails, the server skips the rest, COMMIT included: nothing was stored, the transaction is
rolled back, and ``Refused`` tells the caller so, who can run the work again the ordinary way to learn
which item failed. A failure of the link itself is raised as it is: whether the commit happened is then
unknown, as for any commit whose answer was lost.

Only work written as a ``StatementWork`` (one statement, and what to make of its rows) can ride in a
trip; the same object run on a SQLAlchemy connection executes its statement there, so one definition
serves both.
"""

from __future__ import annotations

import functools
import hashlib
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import psycopg
from psycopg.pq import ExecStatus, TransactionStatus
from sqlalchemy import Connection

T = TypeVar('T')

#: One statement with %s placeholders and its parameters.
Statement = tuple[str, Sequence[Any]]

# A prepared statement is planned anew for its arguments on each of its first five runs, and then whenever
# the server guesses that pays: about 0.2 ms of the server's time per statement. These statements are
# simple lookups by key whose best plan does not depend on the arguments (an index on the subscription's
# queue, a lease by name), so the plan made once is kept; LOCAL: for this transaction only.
_GENERIC_PLANS = 'SET LOCAL plan_cache_mode = force_generic_plan'


class Refused(Exception):
    """The server refused a statement of the trip (or it could not be put together): nothing was stored."""


class StatementWork(Generic[T]):
    """Work that is one PostgreSQL statement: run alone on a connection, or with others in one trip.

    Each placeholder's type must follow from the statement's text (a cast, a column compared with it): a
    prepared statement types a bare ``SELECT %s`` as text, whatever the value. finish(rows, conn) makes
    the work's value of the statement's rows; conn is the connection the
    statement ran on, or None when it ran in a trip (the transaction is then already committed, so
    finish may not write, and a finish that raises fails only its own work).
    """

    __slots__ = ('sql', 'params', 'finish')

    def __init__(self, sql: str, params: Sequence[Any],
                 finish: Callable[[list[tuple[Any, ...]], Connection | None], T]) -> None:
        self.sql = sql
        self.params = params
        self.finish = finish

    def __call__(self, conn: Connection) -> T:
        result = conn.exec_driver_sql(self.sql, tuple(self.params))
        return self.finish(list(result.fetchall()) if result.returns_rows else [], conn)


def run(raw: psycopg.Connection, statements: Sequence[Statement]) -> list[list[tuple[Any, ...]]]:
    """Run statements in one transaction, in one round trip; returns the rows each answered, in order.

    raw must be idle (no transaction open). Raises Refused when nothing was stored and the connection
    is fit for use; any other exception leaves it in an unknown state (close it).
    """
    cursor = psycopg.ClientCursor(raw)
    prepared = _prepared.setdefault(raw, set())
    try:
        prepare, execute, names = _bind(cursor, prepared, statements)
    except (psycopg.Error, TypeError, ValueError) as e:  # a value the driver cannot quote: nothing was sent
        raise Refused(f'a statement could not be bound: {type(e).__name__}') from e
    raw.autocommit = True  # so that psycopg sends no BEGIN of its own: the query holds the transaction
    try:
        try:
            cursor.execute(';\n'.join([*prepare, 'BEGIN', _GENERIC_PLANS, *execute, 'COMMIT']))
        except psycopg.Error as e:
            if e.sqlstate is None or raw.closed:
                raise  # the link failed: whether COMMIT ran is not known
            raw.rollback()  # the server left the transaction aborted at the failed statement
            # PREPARE outlives the rollback, or failed itself: learn which statements the session holds.
            prepared.clear()
            prepared.update(name for name, in raw.execute(
                "SELECT name FROM pg_prepared_statements WHERE name LIKE 'conduit\\_trip\\_%'"))
            raise Refused(f'the server refused a statement: {e.sqlstate}') from e
        prepared.update(names)
        results: list[list[tuple[Any, ...]]] = []
        while True:
            answered = cursor.pgresult is not None and cursor.pgresult.status == ExecStatus.TUPLES_OK
            results.append(cursor.fetchall() if answered else [])
            if not cursor.nextset():
                break
        skip = len(prepare) + 2
        if len(results) != skip + len(statements) + 1 or raw.info.transaction_status != TransactionStatus.IDLE:
            raise RuntimeError(f'a trip of {len(statements)} statement(s) answered {len(results) - skip - 1}')
        return results[skip:-1]
    finally:
        if not raw.closed:
            if raw.info.transaction_status == TransactionStatus.IDLE:
                raw.autocommit = False
            else:  # never hand a connection that may commit every statement on its own back to the pool
                raw.close()


#: Names of the statements prepared on each connection (see _bind).
_prepared: weakref.WeakKeyDictionary[psycopg.Connection, set[str]] = weakref.WeakKeyDictionary()


def _bind(cursor: psycopg.ClientCursor, prepared: set[str],
          statements: Sequence[Statement]) -> tuple[list[str], list[str], set[str]]:
    """The PREPAREs a trip needs first, its EXECUTEs with their arguments quoted, and the names it prepares."""
    prepare, execute, names = [], [], set()
    for sql, params in statements:
        name, numbered = _prepared_form(sql)
        if name not in prepared and name not in names:
            prepare.append(f'PREPARE {name} AS {numbered}')
            names.add(name)
        execute.append(cursor.mogrify(f'EXECUTE {name}(' + ', '.join(['%s'] * len(params)) + ')', tuple(params))
                       if params else f'EXECUTE {name}')
    return prepare, execute, names


@functools.lru_cache(maxsize=256)
def _prepared_form(sql: str) -> tuple[str, str]:
    """A statement's name and its text with $n placeholders, worked out once per text (the texts are few)."""
    pieces = sql.split('%s')
    if any('%' in piece for piece in pieces):
        raise ValueError('a statement of a trip may hold no % but its %s placeholders')
    numbered = ''.join(piece + (f'${n}' if n < len(pieces) else '') for n, piece in enumerate(pieces, 1))
    return 'conduit_trip_' + hashlib.sha1(sql.encode()).hexdigest()[:20], numbered
