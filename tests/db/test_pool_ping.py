"""The PostgreSQL pool's ping on checkout: a loop killed while it pings stops, and the pool stays sound.

A stopping server kills its loops wherever they wait, and a loop that takes a connection waits
first in the ping of the checkout. SQLAlchemy's own ping (``pool_pre_ping``) switches psycopg to
autocommit for it and back in a ``finally``; interrupted, the query is still running, so switching
back raised ``ProgrammingError`` in place of the kill. A loop that logs its ordinary errors and goes
on then survived the kill, and logged a three-line error at every server stop.
"""

from __future__ import annotations

import gevent
import pytest
from sqlalchemy import text

from runtime.db.engine import make_engine


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_a_greenlet_killed_in_the_ping_of_a_checkout_ends_and_the_pool_stays_sound(db_url: str) -> None:
    engine = make_engine(db_url, pool_size=1)
    try:
        with engine.connect() as conn:  # a pooled connection that is not fresh, so the next checkout pings it
            conn.execute(text('SELECT 1'))
        for _ in range(5):
            taker = gevent.spawn(engine.connect)
            gevent.sleep(0)  # it runs until it waits for the ping's answer
            taker.kill()
            assert taker.successful(), repr(taker.exception)
            assert isinstance(taker.value, gevent.GreenletExit)
            with engine.connect() as conn:  # the pool hands out a connection fit for use
                assert conn.execute(text('SELECT 2')).scalar_one() == 2
            assert engine.pool.checkedout() == 0
    finally:
        engine.dispose()


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_a_checkout_replaces_a_connection_the_server_closed(db_url: str) -> None:
    engine = make_engine(db_url, pool_size=1)
    try:
        with engine.connect() as conn:
            pid = conn.execute(text('SELECT pg_backend_pid()')).scalar_one()
        with engine.connect() as other:
            other.execute(text('SELECT 1'))  # the same pooled connection (pool of one)
        killer = make_engine(db_url, pool_size=1)
        try:
            with killer.connect() as conn:
                assert conn.execute(text('SELECT pg_terminate_backend(:pid)'), {'pid': pid}).scalar_one()
        finally:
            killer.dispose()
        with engine.connect() as conn:  # the ping found it dead: a new connection, no error
            assert conn.execute(text('SELECT pg_backend_pid()')).scalar_one() != pid
    finally:
        engine.dispose()
