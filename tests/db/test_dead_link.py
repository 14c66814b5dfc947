"""[database] dead_client_secs and the lease time: the connection parameters that end a cut or stuck client's session.

The behaviour on a real cut link (a network namespace whose cable is pulled) is proven by
tests/reliability/test_cluster.py; this checks what a connection gets, against the machine's PostgreSQL.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine, text

from runtime.core import Runtime
from runtime.db.engine import make_engine
from runtime.testing import make_settings


def _shown(engine: Engine, *names: str) -> list[str]:
    """What a connection of the engine's shows of the named settings; the engine disposed of."""
    try:
        with engine.connect() as conn:
            return [conn.execute(text(f'SHOW {name}')).scalar() for name in names]
    finally:
        engine.dispose()


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
    assert _shown(make_engine(db_url, pool_size=1), 'tcp_user_timeout') == ['0']


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_options_given_in_the_url_are_kept(db_url: str) -> None:
    sep = '&' if '?' in db_url else '?'
    engine = make_engine(f'{db_url}{sep}options=-c%20statement_timeout%3D12345', pool_size=1, dead_client_secs=4)
    assert _shown(engine, 'statement_timeout', 'tcp_user_timeout') == ['12345ms', '4000']


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_a_runtimes_sessions_may_sit_in_a_transaction_for_the_lease_time(db_url: str, tmp_path: Path) -> None:
    settings = make_settings(tmp_path, db_url)
    settings.pubsub.lease_ttl_secs = 7.0
    assert _shown(Runtime(settings).engine, 'idle_in_transaction_session_timeout') == ['7s']


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_an_idle_in_transaction_limit_given_in_the_url_wins(db_url: str) -> None:
    sep = '&' if '?' in db_url else '?'
    engine = make_engine(f'{db_url}{sep}options=-c%20idle_in_transaction_session_timeout%3D60000', pool_size=1,
                         dead_client_secs=4, idle_in_transaction_secs=2)
    assert _shown(engine, 'idle_in_transaction_session_timeout', 'tcp_user_timeout') == ['1min', '4000']
