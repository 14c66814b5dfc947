"""A worker's in-memory copies never go back to an older read of the database.

Two reloads of one copy can overlap: the sync poll's (it saw the key's version move) and the one
a change made in this worker runs at once. If the earlier one read before the change was committed
and finished last, it put back what the change had replaced: seen in CI as a REST subscribe
answering 404 "subscription not found" for the subscription it had just made, right after a
WebSocket subscribe had bumped the sync key and the worker's poll was reloading for it.

Each test makes the first reload slow after it read (the pool thread's answer comes back late),
runs a change with its own reload meanwhile, and checks what is installed once both ended.

A deployment has the same race the other way round: the sync poll runs between the deployment
and the commit of its record, reads the rows before it, and loads the last recorded version.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import pytest

from runtime import core
from runtime.deploy import hot_deploy
from runtime.files import manager as file_manager
from runtime.files.definition import FileChannelDef
from runtime.pubsub import broker as broker_module
from runtime.pubsub import permissions as permissions_module
from runtime.service import Service
from runtime.testing import TestRuntime

#: How long the first reload's answer is held back: long enough for the change to end meanwhile.
HELD_BACK = 0.3


class Echo(Service):
    """What a channel needs: a service to name."""

    name = 'reload-order.echo'

    def handle(self) -> None:
        self.response.payload = self.request.payload


@pytest.fixture
def rt(db_url: str, runtime_factory: Callable[..., TestRuntime]) -> Iterator[TestRuntime]:
    """A started runtime on the database under test (stopped before the database is dropped)."""
    runtime = runtime_factory(db_url=db_url)
    yield runtime
    runtime.stop()


def slow_in(module: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> Callable[[Callable[[], None]], gevent.Greenlet]:
    """Start a reload whose calls of module.name (made after it read) come back HELD_BACK late."""
    slow: set[gevent.Greenlet] = set()
    original = getattr(module, name)

    def held_back(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if gevent.getcurrent() in slow:
            gevent.sleep(HELD_BACK)  # what it read is already old when it is swapped in
        return result
    monkeypatch.setattr(module, name, held_back)

    def start(reload: Callable[[], None]) -> gevent.Greenlet:
        greenlet = gevent.spawn(reload)
        slow.add(greenlet)
        gevent.sleep(HELD_BACK / 6)  # it has read and is now held back
        return greenlet
    return start


def test_a_held_back_registry_read_does_not_undo_a_new_subscription(rt: TestRuntime,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    rt.catalog.create_topic('orders.created')
    stale = slow_in(broker_module, 'run_transaction', monkeypatch)(rt.broker.reload)
    sub = rt.catalog.subscribe('orders.created', 'pull', security='crm')
    stale.get(timeout=10)
    assert rt.broker.registry.subs_by_key.get(sub.sub_key) is not None
    assert rt.catalog.queue_depth(sub.sub_key) == 0  # the 404 seen in CI


def test_a_held_back_registry_read_does_not_undo_a_new_topic(rt: TestRuntime,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    stale = slow_in(broker_module, 'run_transaction', monkeypatch)(rt.broker.reload)
    rt.catalog.create_topic('invoices.paid')
    stale.get(timeout=10)
    assert rt.broker.registry.topic('invoices.paid') is not None


def test_a_held_back_permissions_read_does_not_undo_a_grant(rt: TestRuntime,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    rt.security_admin.create({'name': 'crm', 'username': 'crm'}, 'a-long-password-1')
    stale = slow_in(permissions_module, 'run_transaction', monkeypatch)(rt.permissions.reload)
    rt.permission_admin.update('crm', pub=['orders.*'], sub=[])
    stale.get(timeout=10)
    grant = rt.permissions.get('crm')
    assert grant is not None and grant.pub.patterns == ('orders.*',)


def test_a_held_back_channels_read_does_not_undo_a_new_channel(rt: TestRuntime,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rt.deploy(Echo)
    stale = slow_in(core, 'ChannelRouter', monkeypatch)(rt.reload_channels)
    rt.channel_admin.create({'name': 'echo', 'service': 'reload-order.echo', 'url_path': '/echo'})
    stale.get(timeout=10)
    assert [c.name for c in rt.router.find('/echo')[0]] == ['echo']


def test_a_held_back_security_read_does_not_undo_a_new_definition(rt: TestRuntime,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    rt.security_admin.create({'name': 'crm', 'username': 'crm'}, 'a-long-password-1')
    stale = slow_in(core, 'BasicAuth', monkeypatch)(rt.reload_security)
    rt.security_admin.create({'name': 'erp', 'username': 'erp'}, 'a-long-password-2')
    stale.get(timeout=10)
    assert rt.security.get('erp') is not None


def test_a_held_back_file_channels_read_does_not_undo_a_new_channel(rt: TestRuntime, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    stale = slow_in(file_manager, 'run_transaction', monkeypatch)(rt.file_transfer.reload)
    rt.file_channel_admin.create(FileChannelDef.from_values(
        {'name': 'invoices', 'directory': str(tmp_path / 'in'), 'topics': ['invoice.received'], 'is_active': False},
        "file channel 'invoices'"))
    stale.get(timeout=10)
    assert 'invoices' in rt.file_transfer.channels()


#: A deployed module whose one service answers with its version.
VERSIONED = '''from runtime import Service


class Version(Service):
    name = 'reload-order.version'

    def handle(self):
        self.response.payload = {version}
'''


def poll_during_record(deployer: hot_deploy.HotDeployer, monkeypatch: pytest.MonkeyPatch) -> list[gevent.Greenlet]:
    """Start the worker's sync poll once a deployer records, and give it time before the record goes on."""
    polls: list[gevent.Greenlet] = []
    original = hot_deploy.bump

    def poll_meanwhile(conn: Any, key: str) -> Any:
        if not polls:
            polls.append(gevent.spawn(deployer.apply_recorded))
            polls[0].join(timeout=HELD_BACK)
        return original(conn, key)
    monkeypatch.setattr(hot_deploy, 'bump', poll_meanwhile)
    return polls


def test_a_sync_poll_between_a_deployment_and_its_record_does_not_bring_back_the_older_version(
        rt: TestRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    # CI: a deployment answered 200, and the next invoke ran the version before it. The worker's sync
    # poll had read the recorded rows before the new one was committed and loaded the last of them.
    rt.hot_deployer.deploy('versioned', VERSIONED.format(version=1), 'versioned.py')
    polls = poll_during_record(rt.hot_deployer, monkeypatch)
    rt.hot_deployer.deploy('versioned', VERSIONED.format(version=2), 'versioned.py')
    assert rt.invoke('reload-order.version') == 2
    polls[0].get(timeout=10)
    assert rt.invoke('reload-order.version') == 2


def test_a_sync_poll_between_an_undeployment_and_its_record_does_not_bring_the_service_back(
        rt: TestRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    rt.hot_deployer.deploy('versioned', VERSIONED.format(version=1), 'versioned.py')
    polls = poll_during_record(rt.hot_deployer, monkeypatch)
    rt.hot_deployer.undeploy('reload-order.version')
    assert not rt.store.has('reload-order.version')
    polls[0].get(timeout=10)
    assert not rt.store.has('reload-order.version')
