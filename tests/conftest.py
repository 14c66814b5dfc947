"""Fixtures shared by the suite: database backends, real servers, and what in-process services saw.

Every test that takes ``db_url`` runs twice: on SQLite and on PostgreSQL (127.0.0.1:5432,
database ``test``, trust auth; override with CONDUIT_TEST_PG_URL). Each PostgreSQL test gets a
database of its own, dropped afterwards. When PostgreSQL is unreachable the PostgreSQL variant
is skipped, except in CI (the CI environment variable set), where it fails.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import Engine

from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from tests.live_server import LiveServer
from tests.recorder import Recorder

pytest_plugins = ['runtime.testing', 'tests.sshd']

PG_ADMIN_URL = os.environ.get('CONDUIT_TEST_PG_URL', 'postgresql://127.0.0.1:5432/test')
BACKENDS = [b for b in os.environ.get('CONDUIT_TEST_BACKENDS', 'sqlite,postgresql').split(',') if b]


def _pg_admin() -> psycopg.Connection:
    try:
        return psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as e:
        if os.environ.get('CI'):
            pytest.fail(f'PostgreSQL at {PG_ADMIN_URL} is required in CI and unreachable: {e}')
        pytest.skip(f'PostgreSQL at {PG_ADMIN_URL} unreachable: {e}')


@pytest.fixture(params=BACKENDS)
def db_backend(request: pytest.FixtureRequest) -> str:
    """'sqlite' or 'postgresql'."""
    return request.param


@pytest.fixture
def db_url(db_backend: str, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty database of the backend under test."""
    if db_backend == 'sqlite':
        yield f'sqlite:///{tmp_path / "conduit.db"}'
        return
    name = f'conduit_test_{uuid.uuid4().hex[:12]}'
    with _pg_admin() as conn:
        conn.execute(sql.SQL('CREATE DATABASE {}').format(sql.Identifier(name)))
    base = PG_ADMIN_URL.rsplit('/', 1)[0]
    yield f'{base}/{name}'
    with _pg_admin() as conn:
        conn.execute(sql.SQL('DROP DATABASE IF EXISTS {} WITH (FORCE)').format(sql.Identifier(name)))


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on a fresh database of the backend under test, migrated to the newest schema."""
    engine = make_engine(db_url, pool_size=3)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def server_factory(tmp_path: Path, db_url: str) -> Iterator[Callable[..., LiveServer]]:
    """Start real servers (not yet started: call .start()); all are stopped at the end."""
    made: list[LiveServer] = []

    def factory(workers: int = 1, extra_config: str = '', env: dict[str, str] | None = None,
                name: str = '', demo: bool = False) -> LiveServer:
        base = tmp_path / (name or f'server{len(made)}')
        server = LiveServer(base, db_url, workers=workers, extra_config=extra_config, env=env, demo=demo)
        made.append(server)
        return server

    yield factory
    for server in made:
        server.stop()


@pytest.fixture
def server(server_factory: Callable[..., LiveServer]) -> LiveServer:
    """One started server with one worker."""
    return server_factory().start()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """A fresh Recorder for this test's services (bind them with recorder.bind); cleared at the end."""
    made = Recorder()
    yield made
    made.clear()
