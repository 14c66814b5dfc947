"""Messages waiting in a topic are found through their partial index, whatever asks for them.

The index holds only the messages that wait in their topic (``in_topic``), so that storing a message
that goes straight to a queue costs no index entry. A partial index is used only by a query whose
condition implies the index's; on SQLite the term must even be written the same way. These tests
run the runtime's own queries of waiting messages, capture the statements they send and ask the
database for each one's plan: a query that no longer matches the index (``in_topic = 1`` instead of
``in_topic IS 1``, say) would scan the whole message table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event

from runtime.pubsub import queue_statements, statements, topic_admin

INDEX = 'ix_conduit_message_waiting'


@contextmanager
def _captured(engine: Engine) -> Iterator[list[tuple[str, Any]]]:
    """The statements run on engine meanwhile that read or delete waiting messages, with their parameters."""
    seen: list[tuple[str, Any]] = []

    def before(conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool) -> None:
        # The sweep's other query asks for consumed messages (in_topic IS false), which the index leaves out.
        if ('in_topic IS 1' in statement or 'in_topic IS true' in statement) and not executemany:
            seen.append((statement, parameters))

    event.listen(engine, 'before_cursor_execute', before)
    try:
        yield seen
    finally:
        event.remove(engine, 'before_cursor_execute', before)


def _plan(conn: Connection, statement: str, parameters: Any) -> str:
    if conn.dialect.name == 'postgresql':
        # With empty tables the planner would rightly scan them; the question is whether it can use the index.
        conn.exec_driver_sql('SET LOCAL enable_seqscan = off')
        rows = conn.exec_driver_sql('EXPLAIN ' + statement, parameters).all()
    else:
        rows = conn.exec_driver_sql('EXPLAIN QUERY PLAN ' + statement, parameters).all()
    return '\n'.join(str(row[-1]) for row in rows)


QUERIES: dict[str, Callable[[Connection], Any]] = {
    'a topic page of waiting messages': lambda c: queue_statements.topic_messages(c, 3, 50, None),
    'the next page': lambda c: queue_statements.topic_messages(c, 3, 50, 10),
    "a topic's depth, for its max depth": lambda c: statements.topic_depth(c, 3, True),
    "every topic's depth": lambda c: queue_statements.topic_depths(c),
    "some topics' depths": lambda c: queue_statements.topic_depths(c, [3, 4]),
    'the hand-over to a new subscription': lambda c: statements.hand_over_backlog(c, 1, [3, 4]),
    "a topic's retention": lambda c: statements.retention_expired_in_topic(c, 3, time.time()),
    'the sweep of expired waiting messages': lambda c: statements.sweep(c, time.time()),
    'deleting a topic': lambda c: topic_admin.delete_topic(c, 3, '/a/topic'),
}


@pytest.mark.parametrize('name', list(QUERIES))
def test_waiting_messages_are_read_through_their_index(engine: Engine, name: str) -> None:
    with _captured(engine) as seen, engine.connect() as conn:
        QUERIES[name](conn)
        conn.rollback()
    assert seen, f'{name}: no statement about waiting messages was run'
    for statement, parameters in seen:
        with engine.connect() as conn:
            plan = _plan(conn, statement, parameters)
            conn.rollback()
        assert INDEX in plan, f'{name}: {statement!r} does not use {INDEX}:\n{plan}'
