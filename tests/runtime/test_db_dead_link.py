"""[database] dead_client_secs: the connection parameters that make both ends give up on a cut link.

The behaviour on a real cut link (a network namespace whose cable is pulled) is proven by
tests/reliability/test_cluster.py; this checks what a connection gets, against the machine's PostgreSQL.
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import text

from runtime.db.engine import make_engine


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_dead_client_secs_reaches_both_ends_of_every_connection(db_url: str) -> None:
    engine = make_engine(db_url, pool_size=1, dead_client_secs=4)
    try:
        with engine.connect() as conn:
            # The server's side: PostgreSQL drops the session of a client silent this long.
            assert conn.execute(text('SHOW tcp_user_timeout')).scalar() == '4000'
            assert conn.execute(text('SHOW tcp_keepalives_idle')).scalar() == '1'
            # The client's side.
            params = conn.connection.dbapi_connection.info.get_parameters()
            assert params['tcp_user_timeout'] == '4000'
            assert params['keepalives'] == '1'
        # The LISTEN connection of the wake-ups connects with the engine's own parameters.
        cargs, cparams = engine.dialect.create_connect_args(engine.url)
        with psycopg.connect(*cargs, autocommit=True, **cparams) as listen:
            assert listen.execute('SHOW tcp_user_timeout').fetchone() == ('4000',)
    finally:
        engine.dispose()


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_without_dead_client_secs_connections_keep_the_systems_defaults(db_url: str) -> None:
    engine = make_engine(db_url, pool_size=1)
    try:
        with engine.connect() as conn:
            assert conn.execute(text('SHOW tcp_user_timeout')).scalar() == '0'
    finally:
        engine.dispose()


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_options_given_in_the_url_are_kept(db_url: str) -> None:
    sep = '&' if '?' in db_url else '?'
    engine = make_engine(f'{db_url}{sep}options=-c%20statement_timeout%3D12345', pool_size=1, dead_client_secs=4)
    try:
        with engine.connect() as conn:
            assert conn.execute(text('SHOW statement_timeout')).scalar() == '12345ms'
            assert conn.execute(text('SHOW tcp_user_timeout')).scalar() == '4000'
    finally:
        engine.dispose()
