"""The ``conduit`` command line against a live server.

Every command runs as users run it, ``python -m runtime.cli`` in a subprocess, configured only
through CONDUIT_CONFIG pointing at the server's server.toml.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from runtime import cli as cli_module
from tests.live_server import REPO, LiveServer, poll

SERVICES = '''
import gevent

from runtime import Service


class Echo(Service):
    name = 'test.echo'

    def handle(self):
        self.response.payload = {'echo': self.request.payload}


class Boom(Service):
    name = 'test.boom'

    def handle(self):
        raise ValueError('boom: internal detail')


class Slow(Service):
    """Tells the test it started (by creating the marker file), then takes a second."""

    name = 'test.slow'

    def handle(self):
        with open(self.request.payload['marker'], 'w') as f:
            f.write('started')
        gevent.sleep(1)
        self.response.payload = {'slow': 'done'}
'''

DEPLOYED = '''
from runtime import Service


class Deployed(Service):
    name = 'test.deployed-by-cli'

    def handle(self):
        self.response.payload = {'deployed': True}
'''


def run_cli(server: LiveServer, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run ``python -m runtime.cli ARGS`` for this server, as a user would."""
    env = {**os.environ, 'CONDUIT_CONFIG': str(server.base / 'config' / 'server.toml'), 'COLUMNS': '80'}
    return subprocess.run([sys.executable, '-m', 'runtime.cli', *args], cwd=server.base, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def live(server_factory: Callable[..., LiveServer]) -> LiveServer:
    """A started server with the test services."""
    server = server_factory()
    server.write_module('cli_services.py', SERVICES)
    return server.start()


def test_invoke_prints_the_response_and_reports_failures(live: LiveServer) -> None:
    done = run_cli(live, 'invoke', 'conduit.ping')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)['pong'] is True

    done = run_cli(live, 'invoke', 'test.echo', '--data', '{"a": [1, 2], "b": "zażółć"}')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {'echo': {'a': [1, 2], 'b': 'zażółć'}}

    done = run_cli(live, 'invoke', 'test.echo', '--data', '{"a": ')
    assert done.returncode != 0
    assert '--data is not valid JSON' in done.stderr

    done = run_cli(live, 'invoke', 'test.boom')
    assert done.returncode != 0
    assert '500' in done.stderr and 'ValueError: boom: internal detail' in done.stderr

    done = run_cli(live, 'invoke', 'no.such.service')
    assert done.returncode != 0
    assert '404' in done.stderr and 'no.such.service' in done.stderr


def test_deploy_services_and_undeploy(live: LiveServer, tmp_path: Path) -> None:
    module = tmp_path / 'from_cli.py'
    module.write_text(DEPLOYED)
    done = run_cli(live, 'deploy', str(module))
    assert done.returncode == 0, done.stderr
    assert 'deployed: test.deployed-by-cli' in done.stdout
    assert live.invoke('test.deployed-by-cli') == {'deployed': True}

    broken = tmp_path / 'broken_from_cli.py'
    broken.write_text('from runtime import Service\n\nclass Broken(Service:\n    pass\n')
    done = run_cli(live, 'deploy', str(broken))
    assert done.returncode != 0
    assert 'broken_from_cli.py:3' in done.stderr

    done = run_cli(live, 'services')
    assert done.returncode == 0, done.stderr
    for name in ('conduit.ping', 'test.echo', 'test.deployed-by-cli'):
        assert name in done.stdout, done.stdout

    done = run_cli(live, 'undeploy', 'test.deployed-by-cli')
    assert done.returncode == 0, done.stderr
    assert 'undeployed: test.deployed-by-cli' in done.stdout
    r = live.request('POST', '/admin/services/test.deployed-by-cli/invoke', auth=live.admin)
    assert r.status_code == 404

    done = run_cli(live, 'undeploy', 'test.deployed-by-cli')
    assert done.returncode != 0
    assert '404' in done.stderr


def test_status_and_stop_let_a_request_in_flight_finish(live: LiveServer, tmp_path: Path) -> None:
    done = run_cli(live, 'status')
    assert done.returncode == 0, done.stderr
    assert f'running: master pid {live.proc.pid}' in done.stdout

    marker = tmp_path / 'slow-started'
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(live.request, 'POST', '/admin/services/test.slow/invoke',
                           json={'marker': str(marker)}, auth=live.admin, timeout=30)
        poll(marker.exists, timeout=10, message='slow service started')
        stopped = run_cli(live, 'stop')
        response = slow.result()

    assert stopped.returncode == 0, stopped.stderr
    assert f'stopped (pid {live.proc.pid})' in stopped.stdout
    assert response.status_code == 200, response.text
    assert response.json()['response'] == {'slow': 'done'}
    assert live.proc.wait(10) == 0, f'the server exited with {live.proc.returncode}:\n{live.log()}'
    with pytest.raises(requests.ConnectionError):
        live.request('GET', '/health', timeout=2)

    done = run_cli(live, 'status')
    assert done.returncode == 1
    assert 'not running' in done.stdout
    done = run_cli(live, 'stop')
    assert done.returncode != 0
    assert 'no server is running' in done.stderr


def test_start_does_not_print_the_database_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / 'config' / 'server.toml'
    config.parent.mkdir()
    config.write_text('[database]\nurl = "postgresql://conduit:db-secret-pw-5@db.example.com:5432/conduit"\n')
    started = []
    monkeypatch.setattr('runtime.server.run', lambda settings, demo=False: started.append(settings))
    result = CliRunner().invoke(cli_module.main, ['--config', str(config), 'start'])
    assert result.exit_code == 0, result.output
    assert started and started[0].database.url.endswith('db-secret-pw-5@db.example.com:5432/conduit')
    assert 'db-secret-pw-5' not in result.output
    assert 'conduit:***@db.example.com:5432/conduit' in result.output


def test_admin_commands_do_not_load_the_server_stack() -> None:
    """invoke, deploy, status and friends start fast: no database or server libraries are imported."""
    code = ('import sys, runtime.cli, runtime.admin_client; '
            'print(sorted(m for m in ("sqlalchemy", "alembic", "gunicorn", "falcon", "gevent") if m in sys.modules))')
    done = subprocess.run([sys.executable, '-c', code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '[]'


def test_the_cli_finds_the_server_from_any_directory(live: LiveServer, tmp_path: Path) -> None:
    elsewhere = tmp_path / 'elsewhere'
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k != 'CONDUIT_CONFIG'}
    env['CONDUIT_ADMIN_PASSWORD'] = live.admin[1]

    def status(*args: str, cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, '-m', 'runtime.cli', *args, 'status'], cwd=cwd, env={**env, **extra},
                              capture_output=True, text=True, timeout=60)

    # Another directory, the server named by --url or CONDUIT_URL.
    for done in (status('--url', live.url, cwd=elsewhere), status(cwd=elsewhere, CONDUIT_URL=live.url)):
        assert done.returncode == 0, done.stderr
        assert f'running: master pid {live.proc.pid}' in done.stdout and live.url in done.stdout
    # A directory inside the project: its config/server.toml is found above.
    done = status(cwd=live.hot_deploy)
    assert done.returncode == 0, done.stderr
    assert f'running: master pid {live.proc.pid}' in done.stdout
    assert 'is not an http:// or https:// URL' in status('--url', 'localhost:1', cwd=elsewhere).stderr
    # The objects and audit commands follow --url too (they used to read only the configuration).
    audit = subprocess.run([sys.executable, '-m', 'runtime.cli', '--url', live.url, 'audit', '--json'], cwd=elsewhere,
                           env=env, capture_output=True, text=True, timeout=60)
    assert audit.returncode == 0, audit.stderr
    assert isinstance(json.loads(audit.stdout), (dict, list))


def test_look_alike_environment_variables_are_warned_about(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / 'config' / 'server.toml'
    config.parent.mkdir()
    config.write_text('[server]\nworkers = 1\n')
    monkeypatch.setattr('runtime.server.run', lambda settings, demo=False: None)
    env = {'CONDUIT_PORT': '8080', 'CONDUIT_WORKERS': '4', 'CONDUIT_DATABSE_URL': 'sqlite://',
           'CONDUIT_SECRET_CRM_PASSWORD': 'x', 'CONDUIT_TEST_EXTRA': 'x'}
    result = CliRunner().invoke(cli_module.main, ['--config', str(config), 'start'], env=env)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.output.splitlines() if line.startswith('warning:')]
    assert warnings == [
        'warning: environment variable CONDUIT_DATABSE_URL is not a Conduit setting and is ignored; '
        'did you mean CONDUIT_DATABASE_URL?',
        'warning: environment variable CONDUIT_PORT is not a Conduit setting and is ignored; '
        'did you mean CONDUIT_SERVER_BIND?',
        'warning: environment variable CONDUIT_WORKERS is not a Conduit setting and is ignored; '
        'did you mean CONDUIT_SERVER_WORKERS?',
    ]


def test_job_commands_print_summaries_and_keep_names_whole(live: LiveServer) -> None:
    name = 'nightly.reconciliation.of.every.customer.account.in.every.region'
    done = run_cli(live, 'job', 'add', name, '--service', 'test.echo', '--type', 'interval_based',
                   '--hours', '1')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f'created job {name}: test.echo, ') and '0 run(s) so far' in done.stdout
    assert json.loads(run_cli(live, 'job', 'add', name + '.2', '--service', 'test.echo', '--type',
                              'interval_based', '--hours', '1', '--json').stdout)['name'] == name + '.2'
    done = run_cli(live, 'job', 'edit', name, '--hours', '2')
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f'changed job {name}: ')
    listed = run_cli(live, 'job', 'list')  # piped, with COLUMNS=80: names are not cut
    assert name in listed.stdout and f'{name}.2' in listed.stdout
    assert [j['name'] for j in json.loads(run_cli(live, 'job', 'list', '--json').stdout)['jobs']] == [
        name, f'{name}.2']
