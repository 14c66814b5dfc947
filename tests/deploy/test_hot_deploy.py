"""Hot deployment against real servers.

A module dropped into hot-deploy/ answers through a channel within about a second, on every
worker of every server; a broken module never replaces a working one; deleting a file does
not undeploy, ``DELETE /admin/services/{name}`` does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import gevent
import pytest
from sqlalchemy import select

from runtime.cluster.sync import bump
from runtime.db.engine import make_engine, transaction
from runtime.db.migrate import upgrade
from runtime.db.models import SyncState
from tests.live_server import REPO, LiveServer, poll

#: The requirement: a dropped-in module answers within this many seconds.
DEPLOY_WITHIN_SECS = 2.0

VERSIONED = '''import os

from runtime import Service

VERSION = {version}


class Version(Service):
    name = 'test.version'

    def handle(self):
        self.response.payload = {{'version': VERSION, 'pid': os.getpid()}}
'''

#: Line 9 is not Python.
SYNTAX_ERROR = VERSIONED.format(version=98).replace("    name = 'test.version'", '    name = = 1')

#: Line 5 raises while the module is imported.
IMPORT_ERROR = VERSIONED.format(version=99).replace('VERSION = 99', "VERSION = {}['no-such-key']")

#: Defines a good new version and an invalid class: neither may be deployed.
HALF_VALID = VERSIONED.format(version=97) + '''

class NoHandler(Service):
    name = 'test.no-handler'
'''

PROBE = '''import os

from runtime import Service, ServiceNotFound


class Probe(Service):
    """Which worker answered, and what a service (test.version by default) answers there, if deployed."""

    name = 'test.probe'

    def handle(self):
        try:
            answer = self.invoke(self.request.input.get('target') or 'test.version')
        except ServiceNotFound:
            answer = None
        self.response.payload = {'pid': os.getpid(), 'answer': answer}
'''

# No channel names test.version: it is not deployed when the server starts, and a channel must
# name a service that exists. The probe invokes it instead.
OBJECTS = '''
channel_rest:
  - name: probe
    service: test.probe
    url_path: /api/probe
'''


def versioned(version: int) -> str:
    """The source of test.version answering version."""
    return VERSIONED.format(version=version)


def make_server(server_factory: Callable[..., LiveServer], workers: int = 1, name: str = '',
                module: str | None = None) -> LiveServer:
    """A server (not started) with the channels, the probe and optionally versioned.py in place."""
    server = server_factory(workers=workers, name=name)
    server.write_objects('channels.yaml', OBJECTS)
    server.write_module('probe.py', PROBE)
    if module is not None:
        server.write_module('versioned.py', module)
    return server


def version_of(server: LiveServer) -> int | None:
    """The version test.version answers (in the worker the probe reached), or None when it is not there."""
    r = server.request('GET', '/api/probe')
    answer = r.json()['answer'] if r.status_code == 200 else None
    return answer['version'] if answer else None


def wait_version(server: LiveServer, version: int, timeout: float = 10.0) -> float:
    """Wait until test.version answers version; returns the seconds it took."""
    start = time.monotonic()
    poll(lambda: version_of(server) == version, timeout=timeout, interval=0.02, message=f'version {version}')
    return time.monotonic() - start


def probe_workers(server: LiveServer, workers: int, accept: Callable[[Any], bool] = lambda answer: True,
                  target: str = 'test.version', timeout: float = 20.0) -> dict[int, Any]:
    """What target answers in each worker (None if not deployed), probing until every worker answered.

    A worker's answer counts once accept() takes it, so callers can wait for a change to reach
    every worker. New connections are spread over the workers by the kernel.
    """
    seen: dict[int, Any] = {}

    def one(_: int) -> None:
        r = server.request('GET', '/api/probe', params={'target': target})
        assert r.status_code == 200, r.text
        body = r.json()
        if accept(body['answer']):
            seen[body['pid']] = body['answer']

    def every_worker_answered() -> bool:
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(one, range(16)))
        return len(seen) == workers

    poll(every_worker_answered, timeout=timeout, interval=0, message=f'all {workers} workers answering')
    return seen


def test_dropped_in_module_answers_within_2_s_and_edits_replace_it(
        server_factory: Callable[..., LiveServer]) -> None:
    server = make_server(server_factory).start()
    assert version_of(server) is None

    start = time.monotonic()
    path = server.write_module('versioned.py', versioned(1))
    poll(lambda: version_of(server) == 1, timeout=10, interval=0.02, message='version 1')
    elapsed = time.monotonic() - start
    assert elapsed <= DEPLOY_WITHIN_SECS, f'deployed after {elapsed:.2f} s'

    server.write_module('versioned.py', versioned(2))
    wait_version(server, 2)

    # Broken versions are rejected with file and line in the log; version 2 stays live.
    server.write_module('versioned.py', SYNTAX_ERROR)
    log = server.wait_for_log(f'cannot deploy {path}:9: SyntaxError')
    assert 'previous version stays live' in log
    server.write_module('versioned.py', IMPORT_ERROR)
    server.wait_for_log(f"cannot deploy {path}:5: KeyError: 'no-such-key'")
    server.write_module('versioned.py', HALF_VALID)
    server.wait_for_log(f'cannot deploy {path}: service class')
    assert version_of(server) == 2
    assert server.request('GET', '/admin/services/test.no-handler', auth=server.admin).status_code == 404

    server.write_module('versioned.py', versioned(3))
    wait_version(server, 3)


def test_every_worker_runs_the_new_version(server_factory: Callable[..., LiveServer]) -> None:
    server = make_server(server_factory, workers=2, module=versioned(1)).start()
    before = probe_workers(server, 2)
    assert {answer['version'] for answer in before.values()} == {1}

    server.write_module('versioned.py', versioned(2))
    after = probe_workers(server, 2, accept=lambda answer: answer['version'] == 2)
    assert set(after) == set(before)
    # Once both have it, nobody answers the old version any more.
    with ThreadPoolExecutor(8) as pool:
        versions = set(pool.map(lambda _: version_of(server), range(40)))
    assert versions == {2}


def test_deleting_a_file_does_not_undeploy_and_undeploy_removes_it_from_every_worker(
        server_factory: Callable[..., LiveServer]) -> None:
    server = make_server(server_factory, workers=2, module=versioned(1)).start()
    (server.hot_deploy / 'versioned.py').unlink()
    # A module dropped in after the deletion: once every worker runs it, every watcher saw the deletion.
    server.write_module('other.py', VERSIONED.replace('test.version', 'test.other').format(version=1))
    probe_workers(server, 2, accept=lambda answer: answer is not None, target='test.other')
    assert {a['version'] for a in probe_workers(server, 2).values()} == {1}

    r = server.request('DELETE', '/admin/services/test.version', auth=server.admin)
    assert r.status_code == 200, r.text
    gone = probe_workers(server, 2, accept=lambda answer: answer is None)
    assert set(gone.values()) == {None}
    assert version_of(server) is None
    r = server.request('DELETE', '/admin/services/test.version', auth=server.admin)
    assert r.status_code == 404, r.text

    # Deploying the very same source again brings it back everywhere.
    r = server.request('POST', '/admin/deploy', auth=server.admin,
                       json={'file_name': 'versioned.py', 'source': versioned(1)})
    assert r.status_code == 200, r.text
    back = probe_workers(server, 2, accept=lambda answer: answer is not None)
    assert {a['version'] for a in back.values()} == {1}


def test_a_server_started_later_loads_recorded_deployments(server_factory: Callable[..., LiveServer]) -> None:
    a = make_server(server_factory, name='a', module=versioned(1)).start()
    a.write_module('versioned.py', versioned(2))
    wait_version(a, 2)

    b = make_server(server_factory, name='b')
    assert not (b.hot_deploy / 'versioned.py').exists()
    b.start()
    assert version_of(b) == 2

    # Later changes on one server reach the other one, too.
    a.write_module('versioned.py', versioned(3))
    wait_version(b, 3)
    assert a.request('DELETE', '/admin/services/test.version', auth=a.admin).status_code == 200
    poll(lambda: version_of(b) is None, message='undeployed on b')


def test_admin_deploy_loads_a_module_rejects_a_broken_one_and_confines_file_names(
        server_factory: Callable[..., LiveServer], tmp_path: Path) -> None:
    server = make_server(server_factory).start()

    def deploy(file_name: Any, source: Any) -> Any:
        return server.request('POST', '/admin/deploy', auth=server.admin,
                              json={'file_name': file_name, 'source': source})

    r = deploy('versioned.py', versioned(1))
    assert r.status_code == 200, r.text
    assert r.json()['services'] == ['test.version']
    assert version_of(server) == 1

    r = deploy('versioned.py', SYNTAX_ERROR)
    assert r.status_code == 400, r.text
    assert 'versioned.py:9' in r.json()['details'] and 'SyntaxError' in r.json()['details']
    r = deploy('versioned.py', IMPORT_ERROR)
    assert r.status_code == 400, r.text
    assert "versioned.py:5: KeyError: 'no-such-key'" in r.json()['details']
    assert version_of(server) == 1

    # Only the base name of file_name counts; nothing is written anywhere by a deployment.
    before = sorted(p for p in tmp_path.rglob('*') if p.suffix == '.py')
    for trick in ('../../etc/x.py', '/etc/x.py', '..\\..\\x.py', 'a/../../x.py'):
        r = deploy(trick, versioned(4).replace('test.version', 'test.tricky'))
        assert r.status_code == 200, (trick, r.text)
        info = server.request('GET', '/admin/services/test.tricky', auth=server.admin).json()['service']
        assert (info['module'], info['source_file']) == ('x', 'x.py'), trick
    assert sorted(p for p in tmp_path.rglob('*') if p.suffix == '.py') == before
    assert not Path('/etc/x.py').exists()

    for bad_name in ('x.txt', '.py', '../.py', 'x-y.py', '1x.py', 'a\0b.py', 42, None):
        r = deploy(bad_name, versioned(5))
        assert r.status_code == 400, (bad_name, r.text)
    assert deploy('versioned.py', None).status_code == 400
    r = server.request('POST', '/admin/deploy', auth=server.admin, json=['versioned.py'])
    assert r.status_code == 400, r.text
    assert version_of(server) == 1


def test_concurrent_first_bumps_of_a_sync_key_both_succeed(db_backend: str, db_url: str) -> None:
    """Two workers recording their first deployment at the same moment: neither fails."""
    if db_backend != 'postgresql':
        pytest.skip('SQLite write transactions exclude each other from BEGIN on')
    engine = make_engine(db_url, pool_size=2)
    try:
        upgrade(engine)
        first = engine.connect()
        tx = first.begin()
        bump(first, 'deployments')

        def second() -> None:
            with transaction(engine, write=True) as conn:
                bump(conn, 'deployments')

        other = gevent.spawn(second)
        gevent.sleep(0.2)  # let the second transaction run into the row the first one inserted
        tx.commit()
        first.close()
        other.get(timeout=10)
        with transaction(engine) as conn:
            version = conn.execute(select(SyncState.version).where(SyncState.key == 'deployments')).scalar()
        assert version == 2
    finally:
        engine.dispose()


def _cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, 'CONDUIT_CONFIG': str(server.base / 'config' / 'server.toml')}
    return subprocess.run([sys.executable, '-m', 'runtime.cli', *args], cwd=server.base, env=env,
                          capture_output=True, text=True, timeout=60)


def _restart(server: LiveServer) -> None:
    server.stop()
    server.start()


def test_deploying_a_module_again_brings_back_an_undeployed_service_for_good(
        server_factory: Callable[..., LiveServer]) -> None:
    """Undeploy conduit.ping, deploy services/builtin.py: it is live everywhere, across restarts."""
    a = make_server(server_factory, workers=2, name='a').start()
    assert a.invoke('conduit.ping')['pong'] is True
    done = _cli(a, 'undeploy', 'conduit.ping')
    assert done.returncode == 0, done.stderr
    assert set(probe_workers(a, 2, accept=lambda answer: answer is None, target='conduit.ping').values()) == {None}
    _restart(a)
    # The undeployment is recorded: it survives a restart.
    assert set(probe_workers(a, 2, target='conduit.ping').values()) == {None}

    done = _cli(a, 'deploy', str(REPO / 'services' / 'builtin.py'))
    assert done.returncode == 0, done.stderr
    assert 'conduit.ping' in done.stdout
    live = probe_workers(a, 2, accept=lambda answer: answer is not None, target='conduit.ping')
    assert all(answer['pong'] is True for answer in live.values())
    for _ in range(2):
        _restart(a)
        answers = probe_workers(a, 2, target='conduit.ping')
        assert all(answer is not None and answer['pong'] is True for answer in answers.values()), answers

    # A server started later on the same database runs it too.
    b = make_server(server_factory, workers=2, name='b').start()
    answers = probe_workers(b, 2, target='conduit.ping')
    assert all(answer is not None and answer['pong'] is True for answer in answers.values()), answers


ALT_PING = '''from runtime import Service


class AltPing(Service):
    name = 'conduit.ping'

    def handle(self):
        self.response.payload = {'pong': 'alt'}
'''


def test_deploying_a_module_brings_back_a_service_last_deployed_from_another_module(
        server_factory: Callable[..., LiveServer]) -> None:
    """conduit.ping came last from alt_ping.py and was undeployed: deploying builtin.py makes it live for good."""
    a = make_server(server_factory, workers=2, name='a').start()
    r = a.request('POST', '/admin/deploy', auth=a.admin, json={'file_name': 'alt_ping.py', 'source': ALT_PING})
    assert r.status_code == 200, r.text
    probe_workers(a, 2, accept=lambda answer: answer == {'pong': 'alt'}, target='conduit.ping')
    assert _cli(a, 'undeploy', 'conduit.ping').returncode == 0
    probe_workers(a, 2, accept=lambda answer: answer is None, target='conduit.ping')

    done = _cli(a, 'deploy', str(REPO / 'services' / 'builtin.py'))
    assert done.returncode == 0, done.stderr
    answers = probe_workers(a, 2, accept=lambda answer: answer is not None, target='conduit.ping', timeout=10)
    assert all(answer['pong'] is True for answer in answers.values()), answers
    _restart(a)
    answers = probe_workers(a, 2, target='conduit.ping')
    assert all(answer is not None and answer['pong'] is True for answer in answers.values()), answers
