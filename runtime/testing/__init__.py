"""A test kit for users of Conduit (and for Conduit's own suite): runtimes in-process.

Load it as a pytest plugin (``pytest_plugins = ['runtime.testing']``) and use the fixtures::

    def test_create_customer(runtime_factory):
        rt = runtime_factory(CreateCustomer, StoreCustomer)
        assert rt.invoke('crm.customer.create', {'name': 'Ada', 'email': 'a@x'}) == {'customer_id': 1}

``runtime_factory`` makes a started runtime on a temporary SQLite database (or the URL given),
without the directory watchers, with the given service classes (or modules) deployed; every
runtime it made is stopped when the test ends, as Nameko's ``container_factory`` does. The
temporary database is a copy of one migrated once per pytest process, so that a runtime starts
without running every migration again.
``wait_until`` polls a condition cooperatively, for anything that happens in the background.

Without a database (``docs/testing.md`` has the details):

- ``service_factory`` (``runtime.testing.services``) runs one service through the real invoker,
  the services it calls answered from canned responses and what it publishes recorded;
- ``MemoryQueueBackend`` (``runtime.testing.memory``) is the in-memory twin of the delivery
  loop's SQL storage, with ``drain`` to run delivery loops until their queues are empty.

``admin_client`` (``runtime.testing.app_client``) is falcon's ``TestClient`` over a runtime's real
app, signed in as the admin: HTTP behaviour without gunicorn (on the runtime's database).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import gevent
import pytest

from runtime.config import Settings
from runtime.core import Runtime
from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.service.base import Service
from runtime.testing.app_client import AppClient, admin_client
from runtime.testing.memory import DeliveryFailed, MemoryQueueBackend
from runtime.testing.services import Invocation, RecordedPublication, ServiceUnderTest, Subscription, service_factory

#: The former name of RecordedPublication (pub/sub's own Publication is runtime.pubsub.message's).
Publication = RecordedPublication

__all__ = [
    # Runtimes on a database
    'TestRuntime', 'make_settings', 'runtime_factory', 'wait_until', 'FakeSparkSubmitter',
    # HTTP without a server
    'AppClient', 'admin_client',
    # Services without a database
    'Invocation', 'Publication', 'RecordedPublication', 'ServiceUnderTest', 'Subscription', 'service_factory',
    # Delivery without a database
    'DeliveryFailed', 'MemoryQueueBackend',
]


class TestRuntime(Runtime):
    """A Runtime with shortcuts for tests."""

    __test__ = False  # not a pytest test class

    def deploy(self, *items: type[Service] | ModuleType | str | Path) -> list[str]:
        """Deploy service classes, modules, or module files; returns the names registered."""
        names: list[str] = []
        for item in items:
            if isinstance(item, ModuleType):
                classes = self.store.prepare_module(item, item.__name__.rsplit('.', 1)[-1])
                names += self.store.register_all(classes, item.__name__, getattr(item, '__file__', '') or '')
            elif isinstance(item, (str, Path)):
                names += self.hot_deployer.load_file(Path(item))
            else:
                names.append(self.store.register(item))
        return names

    def invoke(self, name: str | type[Service], payload: Any = None, timeout: float | None = None) -> Any:
        """Invoke a service as another service would; returns its response payload."""
        return self.invoker.invoke(name, payload, timeout=timeout)


def make_settings(base_dir: Path, db_url: str | None = None) -> Settings:
    """Settings for a runtime rooted in base_dir, with no built-in services directory."""
    settings = Settings(base_dir=base_dir)
    settings.database.url = db_url or f'sqlite:///{base_dir / "conduit.db"}'
    settings.hot_deploy.services_dir = str(base_dir / 'no-services')
    settings.hot_deploy.dir = str(base_dir / 'hot-deploy')
    settings.objects.dir = str(base_dir / 'objects')
    settings.admin.password = 'test-admin-password'
    # Tests push to receivers on this machine, which the outbound policy refuses by default.
    settings.pubsub.push_allow_hosts = '127.0.0.0/8,::1,localhost'
    return settings


def wait_until(condition: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01,
               message: str = 'condition') -> Any:
    """Poll condition (cooperatively) until it returns something truthy; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f'{message} not met within {timeout:g} s')
        gevent.sleep(interval)


@pytest.fixture(scope='session')
def migrated_sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite database migrated to the newest schema, made once per pytest process, to copy from."""
    path = tmp_path_factory.mktemp('conduit-template') / 'conduit.db'
    engine = make_engine(f'sqlite:///{path}', pool_size=1)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    return path


@pytest.fixture
def runtime_factory(tmp_path: Path, migrated_sqlite_template: Path) -> Iterator[Callable[..., TestRuntime]]:
    """Make started in-process runtimes; each is stopped at the end of the test."""
    made: list[TestRuntime] = []

    def factory(*services: type[Service] | ModuleType | str | Path, db_url: str | None = None,
                settings: Settings | None = None) -> TestRuntime:
        base = tmp_path / f'runtime{len(made)}'
        base.mkdir()
        if settings is None and db_url is None:
            shutil.copyfile(migrated_sqlite_template, base / 'conduit.db')
        rt = TestRuntime(settings or make_settings(base, db_url))
        made.append(rt)
        # Classes and modules are registered before start, as a server loads services/ before it
        # serves: object files applied at start may name them (a channel must name a service that
        # exists). Files go through the hot deployer, which records them in the started database.
        files = [s for s in services if isinstance(s, (str, Path))]
        rt.deploy(*(s for s in services if not isinstance(s, (str, Path))))
        rt.start(watch=False)
        rt.deploy(*files)
        return rt

    yield factory
    for rt in made:
        rt.stop()


class FakeSparkSubmitter:
    """The in-memory twin of runtime.spark.SparkSubmitter: records submissions, runs no Spark.

    Install it with ``rt.spark.submitter = FakeSparkSubmitter(...)``. Each job "runs" for
    ``duration_secs`` (cooperatively; a kill or timeout ends it as killed), then ends with
    ``status`` and ``result`` or ``error``; ``outcomes`` maps a pipeline to its own
    ``(status, result, error)``. ``submissions`` holds every Submission in order.
    """

    __test__ = False

    def __init__(self, status: str = 'succeeded', result: Any = None, error: str = '',
                 duration_secs: float = 0.0, outcomes: dict[str, tuple[str, Any, str]] | None = None) -> None:
        self.status = status
        self.result = result
        self.error = error
        self.duration_secs = duration_secs
        self.outcomes = outcomes or {}
        self.submissions: list[Any] = []

    def check(self) -> None:
        """Always ready: no Spark is needed."""

    def run(self, sub: Any, on_started: Callable[[int | None], None],
            should_stop: Callable[[], str | None]) -> Any:
        """Pretend to run a submission; returns its JobOutcome."""
        from runtime.spark.submit import KILLED, SUCCEEDED, JobOutcome
        self.submissions.append(sub)
        on_started(None)
        deadline = time.monotonic() + self.duration_secs
        while time.monotonic() < deadline:
            reason = should_stop()
            if reason:
                return JobOutcome(KILLED, None, reason)
            gevent.sleep(min(0.01, max(0.0, deadline - time.monotonic())))
        status, result, error = self.outcomes.get(sub.pipeline, (self.status, self.result, self.error))
        return JobOutcome(status, 0 if status == SUCCEEDED else 1, '' if status == SUCCEEDED else error,
                          result if status == SUCCEEDED else None)
