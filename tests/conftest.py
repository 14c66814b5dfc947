"""Fixtures shared by the suite: database backends, real servers, and what in-process services saw.

Every test that takes ``db_url`` runs twice: on SQLite and on PostgreSQL (127.0.0.1:5432,
database ``test``, trust auth; override with CONDUIT_TEST_PG_URL). Each test gets a database no
other test uses, already migrated to the newest schema (tests/databases.py: copies of one template
per pytest process, PostgreSQL ones emptied and reused), which saves the second or so that running
every migration costs each test and each server start. A test of the migrations themselves takes
``empty_db_url``. When PostgreSQL is unreachable the PostgreSQL variant is skipped, except in CI
(the CI environment variable set), where it fails.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
from sqlalchemy import Engine

from runtime.db.engine import make_engine
from tests.databases import Databases
from tests.live_server import LiveServer
from tests.recorder import Recorder

if TYPE_CHECKING:
    from tests.websocket_peer import Peer

pytest_plugins = ['runtime.testing', 'tests.sshd']

#: Set by ``make chaos``: the tests marked ``chaos`` run too (``make test`` skips them, naming why).
CHAOS = bool(os.environ.get('CONDUIT_CHAOS'))

PG_ADMIN_URL = os.environ.get('CONDUIT_TEST_PG_URL', 'postgresql://127.0.0.1:5432/test')
BACKENDS = [b for b in os.environ.get('CONDUIT_TEST_BACKENDS', 'sqlite,postgresql').split(',') if b]


#: What a test marked ``unit`` may not take: each needs a database, a server, a browser or sshd.
#: tests/parallel.py runs every unit file in one pytest process, trusting that the mark tells the truth.
COSTLY_FIXTURES = frozenset({
    'db_backend', 'db_url', 'empty_db_url', 'engine', 'databases', 'server_factory', 'server',
    'module_db_backend', 'module_db_url', 'module_server_factory', 'shared_server', 'runtime_factory',
    'migrated_sqlite_template', 'peers', 'sshd', 'sshd_module', 'target', 'browser',
})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Refuse a ``unit`` test that takes a costly fixture; skip the long scenarios marked ``chaos``
    unless ``make chaos`` runs the suite."""
    for item in items:
        if item.get_closest_marker('unit') is None:
            continue
        costly = sorted(COSTLY_FIXTURES.intersection(getattr(item, 'fixturenames', ())))
        if costly:
            raise pytest.UsageError(f'{item.nodeid} is marked unit but takes {", ".join(costly)}: '
                                    'a unit test needs no database, server, browser or sshd (drop the mark)')
    if CHAOS:
        return
    skip = pytest.mark.skip(reason='a long scenario: make chaos runs it')
    for item in items:
        mark = item.get_closest_marker('chaos')
        if mark is None:
            continue
        backend = mark.kwargs.get('backend')
        params = getattr(item, 'callspec', None)
        if backend and params is not None and params.params.get('db_backend') != backend:
            continue
        item.add_marker(skip)


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


@pytest.fixture(scope='session')
def databases(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Databases]:
    """The migrated templates every ``db_url`` database is a copy of (tests/databases.py)."""
    made = Databases(tmp_path_factory.mktemp('db-templates'), PG_ADMIN_URL)
    yield made
    made.close()


@pytest.fixture
def empty_db_url(db_backend: str, tmp_path: Path, databases: Databases) -> Iterator[str]:
    """A fresh, empty database of the backend under test (no migration run: for the migrations' own tests)."""
    if db_backend == 'sqlite':
        yield f'sqlite:///{tmp_path / "empty.db"}'
        return
    _pg_admin().close()
    name = f'conduit_test_{uuid.uuid4().hex[:12]}'
    databases.create(name)
    yield databases.pg_url(name)
    databases.drop(name)


def _copied_database(backend: str, folder: Path, databases: Databases) -> Iterator[str]:
    if backend == 'sqlite':
        yield databases.sqlite_copy(folder / 'conduit.db')
        return
    _pg_admin().close()  # in CI, an unreachable PostgreSQL fails the test; elsewhere it skips it
    name = databases.pg_take()
    yield databases.pg_url(name)
    databases.pg_give_back(name)


@pytest.fixture
def db_url(db_backend: str, tmp_path: Path, databases: Databases) -> Iterator[str]:
    """A database of the backend under test that no other test uses, migrated to the newest schema."""
    yield from _copied_database(db_backend, tmp_path, databases)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on a fresh database of the backend under test, migrated to the newest schema."""
    engine = make_engine(db_url, pool_size=3)
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


# One server per test module and backend, for the tests that need a server but not a fresh one: each
# such test leaves nothing another could see (its own topic, service and user names), and takes
# ``shared_server`` (or ``module_db_url``) instead of ``server`` and ``db_url``, never both kinds.
# Starting a server is most of what a short server test costs.


@pytest.fixture(scope='module', params=BACKENDS)
def module_db_backend(request: pytest.FixtureRequest) -> str:
    """'sqlite' or 'postgresql', for the fixtures that live as long as a test module."""
    return request.param


@pytest.fixture(scope='module')
def module_db_url(module_db_backend: str, tmp_path_factory: pytest.TempPathFactory,
                  databases: Databases) -> Iterator[str]:
    """A migrated database of the backend under test that every test of a module shares."""
    yield from _copied_database(module_db_backend, tmp_path_factory.mktemp('module-db'), databases)


@pytest.fixture(scope='module')
def module_server_factory(module_db_url: str,
                          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LiveServer]]:
    """server_factory for servers that live as long as a test module (on module_db_url); stopped at its end.

    A module that needs its own configuration makes its module-scoped server fixture with it.
    """
    made: list[LiveServer] = []

    def factory(workers: int = 1, extra_config: str = '', env: dict[str, str] | None = None,
                demo: bool = False) -> LiveServer:
        server = LiveServer(tmp_path_factory.mktemp('module-server'), module_db_url, workers=workers,
                            extra_config=extra_config, env=env, demo=demo)
        made.append(server)
        return server

    yield factory
    for server in made:
        server.stop()


@pytest.fixture(scope='module')
def shared_server(module_server_factory: Callable[..., LiveServer]) -> LiveServer:
    """One started server with one worker, shared by every test of a module (on module_db_url)."""
    return module_server_factory().start()


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    """A fresh Recorder for this test's services (bind them with recorder.bind); cleared at the end."""
    made = Recorder()
    yield made
    made.clear()


@pytest.fixture
def peers() -> Iterator[Callable[..., Peer]]:
    """WebSocket connections a test opens with open_peer(server, ...); all closed at the end."""
    from tests.websocket_peer import Peer  # websocket-client: only the tests that open peers need it

    made: list[Peer] = []

    def open_peer(server: LiveServer, **kwargs: object) -> Peer:
        peer = Peer.connect(server, **kwargs)
        made.append(peer)
        return peer

    yield open_peer
    for peer in made:
        peer.close()
