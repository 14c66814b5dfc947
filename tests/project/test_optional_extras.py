"""paramiko (the ``sftp`` extra) and websocket-client (the ``websocket`` extra) are optional.

Without them every runtime module but runtime.files.sftp imports, the CLI runs, the demo server starts
and serves as ``make run`` starts it (its master's and one worker's steps, without gunicorn), an SFTP file
channel or SFTP file subscription is refused with a 400 naming ``conduit[sftp]``, and the Python
client's ``connect()`` raises an ImportError naming ``conduit[websocket]``.

One fresh interpreter does it all, because this process has both libraries loaded already: it blocks
them first (``None`` in ``sys.modules`` makes their import raise ModuleNotFoundError, as when they are
not installed), then runs each part and prints one JSON object of what it saw, or a part's traceback.
The tests assert on that object, one part each: one interpreter costs a second and a half of imports.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

#: Modules that legitimately need an optional library at import: the SFTP source itself.
NEED_AN_EXTRA = ('runtime.files.sftp',)

#: A minimal SFTP channel of the admin API (the host key is a well-formed ed25519 line of zeros).
SFTP_CHANNEL = {'name': 'remote', 'directory': 'in', 'topics': ['extras.in'], 'sftp_host': '127.0.0.1',
                'sftp_username': 'conduit', 'sftp_password': '${CONDUIT_SECRET_SFTP}',
                'sftp_host_key': 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA'}

#: Why a channel or subscription on SFTP is refused without paramiko.
PARAMIKO_MISSING = "SFTP needs paramiko, which is not installed: pip install 'conduit[sftp]'"

CHILD_TIMEOUT_SECS = 90

CHILD = '''
import sys
sys.modules['paramiko'] = None
sys.modules['websocket'] = None
from gevent import monkey
monkey.patch_all()  # as a server's worker runs

import json
import traceback

out = {}


def part(function):
    """Run one part; its answer, or its traceback, goes under its name."""
    try:
        out[function.__name__] = function()
    except BaseException:
        out[function.__name__] = {'traceback': traceback.format_exc()}
    return function


@part
def imports():
    import importlib
    import pkgutil

    import runtime

    failed, names = {}, []
    # walk_packages imports each package to list it: one that fails is reported, not left out.
    for info in pkgutil.walk_packages(runtime.__path__, 'runtime.',
                                      onerror=lambda name: failed.setdefault(name, 'package')):
        if info.name in NEED_AN_EXTRA or info.name.endswith('.__main__'):  # __main__ would run the CLI
            continue
        names.append(info.name)
        try:
            importlib.import_module(info.name)
        except Exception as e:
            failed[info.name] = f'{type(e).__name__}: {e}'
    return {'names': names, 'failed': failed}


@part
def cli():
    from click.testing import CliRunner

    from runtime.cli import main

    return {' '.join(args): CliRunner().invoke(main, args).exit_code
            for args in (['--help'], ['file-channel', 'create', '--help'], ['pubsub', 'websockets', '--help'])}


@part
def server():
    import shutil
    import tempfile
    from pathlib import Path

    import runtime.server
    from runtime.config import load_settings
    from runtime.core import prepare_database
    from runtime.files.definition import FileChannelDef
    from runtime.observability.metrics_share import MetricsDir
    from runtime.security.admin_credentials import admin_password
    from runtime.testing import AppClient

    # What `make run` reads, copied (as tests/project/test_readme_examples.py does): var/ stays untouched.
    base = Path(tempfile.mkdtemp())
    for name in ('config', 'services', 'spark_pipeline', 'hot-deploy'):
        shutil.copytree(name, base / name)
    settings = load_settings(base / 'config' / 'server.toml', env={})
    # The master's steps before workers start (runtime.server.run, _on_starting), then one worker's.
    prepare_database(settings, demo=True)
    MetricsDir(settings.path(settings.server.metrics_dir)).reset()
    app = runtime.server.ConduitApplication(settings, demo=True).load()
    try:
        client = AppClient(app, settings.admin.username, admin_password(settings, create=True))
        seen = {'health': client.simulate_get('/health').status_code,
                'ping': client.simulate_post('/admin/services/conduit.ping/invoke', json={}).json,
                'customer': client.as_user('demo', 'demo-password').simulate_post(
                    '/api/crm/customer', json={'name': 'Ada', 'email': 'ada@example.com'}).json}
        assert client.simulate_post('/admin/topics', json={'name': 'extras.in'}).status_code == 201

        local = {'name': 'local', 'directory': str(base / 'inbox'), 'topics': ['extras.in']}
        known_hosts = {**SFTP_CHANNEL, 'name': 'remote2', 'sftp_host_key': '',
                       'sftp_known_hosts': '/etc/ssh/ssh_known_hosts'}
        for name, body in (('sftp_channel', SFTP_CHANNEL), ('known_hosts_channel', known_hosts),
                           ('local_channel', local)):
            r = client.simulate_post('/admin/file-channels', json=body)
            seen[name] = [r.status_code, r.json.get('details')]
        sftp_options = {'file_password': '${CONDUIT_SECRET_OUT}', 'file_host_key': SFTP_CHANNEL['sftp_host_key']}
        for name, target, options in (('sftp_subscription', 'sftp://ann@127.0.0.1/out', sftp_options),
                                      ('local_subscription', f'file://{base}/outbox', {})):
            r = client.simulate_post('/admin/subscriptions', json={'topic': 'extras.in', 'kind': 'file',
                                                                   'push_url': target, 'options': options})
            seen[name] = [r.status_code, r.json.get('details')]
        try:
            FileChannelDef.from_values(SFTP_CHANNEL, "file channel 'remote'")
        except Exception as e:
            seen['definition'] = [type(e).__name__, str(e)]
        return seen
    finally:
        runtime.server._worker_runtime.stop()


@part
def client():
    from runtime.client import ConduitError, Client, Disconnected, WebSocketClientMissing, backoff_secs

    made = Client('ws://127.0.0.1:1', 'crm', 'secret')  # nothing is sent before connect()
    seen = {'repr': repr(made), 'backoff': backoff_secs(3, 30, lambda low, high: high),
            'error': str(Disconnected('gone'))}
    try:
        made.connect()
    except ImportError as e:
        seen['connect'] = [type(e).__name__, str(e), e.name, isinstance(e, (ConduitError, WebSocketClientMissing))]
    made.close()  # no socket: nothing to close, and no library needed to close it
    return seen


@part
def sftp_source():
    try:
        import runtime.files.sftp  # noqa: F401
    except ImportError as e:
        return [type(e).__name__, str(e), e.name]
    return 'imported'


print(json.dumps(out))
'''


@pytest.fixture(scope='module')
def seen() -> dict[str, Any]:
    """What the child without paramiko and websocket-client saw, by part."""
    # A developer's CONDUIT_* variables must not reach the child's settings (a new user has none).
    env = {k: v for k, v in os.environ.items() if not k.startswith('CONDUIT_')}
    constants = f'NEED_AN_EXTRA = {NEED_AN_EXTRA!r}\nSFTP_CHANNEL = {SFTP_CHANNEL!r}\n'
    result = subprocess.run([sys.executable, '-c', constants + textwrap.dedent(CHILD)], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=CHILD_TIMEOUT_SECS)
    assert result.returncode == 0, f'exit {result.returncode}\n{result.stdout}\n{result.stderr}'
    return json.loads(result.stdout.strip().splitlines()[-1])


def _part(seen: dict[str, Any], name: str) -> Any:
    answer = seen[name]
    assert not (isinstance(answer, dict) and 'traceback' in answer), answer.get('traceback')
    return answer


def test_every_runtime_module_imports_without_either_library(seen: dict[str, Any]) -> None:
    answer = _part(seen, 'imports')
    assert answer['failed'] == {}
    # The walk saw the whole runtime, the server's, the CLI's and the client's entry points among it.
    entry_points = {'runtime.server', 'runtime.core', 'runtime.cli', 'runtime.client', 'runtime.http.dashboard',
                    'runtime.files.sftp_params', 'runtime.files.sources', 'runtime.pubsub.subscribers.file'}
    assert entry_points <= set(answer['names'])
    assert len(answer['names']) > 100


def test_the_cli_runs_without_either_library(seen: dict[str, Any]) -> None:
    assert _part(seen, 'cli') == {'--help': 0, 'file-channel create --help': 0, 'pubsub websockets --help': 0}


def test_the_demo_server_serves_and_refuses_sftp_naming_the_extra(seen: dict[str, Any]) -> None:
    answer = _part(seen, 'server')
    assert answer['health'] == 200, answer
    assert answer['ping']['response']['pong'] is True and answer['customer'] == {'customer_id': 1}, answer
    # Refused when made (400), before any poller or delivery would fail on it; a local one is made.
    assert answer['sftp_channel'] == [400, f"file channel 'remote': {PARAMIKO_MISSING}"]
    assert answer['known_hosts_channel'] == [400, f"file channel 'remote2': {PARAMIKO_MISSING}"]
    assert answer['local_channel'][0] == 201, answer
    assert answer['sftp_subscription'][0] == 400, answer
    assert answer['sftp_subscription'][1].endswith(PARAMIKO_MISSING), answer
    assert answer['local_subscription'][0] == 201, answer
    assert answer['definition'] == ['ConfigError', f"file channel 'remote': {PARAMIKO_MISSING}"]


def test_the_client_connects_only_with_websocket_client_and_says_so(seen: dict[str, Any]) -> None:
    answer = _part(seen, 'client')
    assert answer['repr'] == "<Client ws://127.0.0.1:1/pubsub/ws user='crm' auth=hello not connected>"
    assert answer['backoff'] == 4.0 and answer['error'] == 'disconnected (1006): gone'
    assert answer['connect'] == [
        'WebSocketClientMissing',
        "runtime.client.Client needs websocket-client, which is not installed: pip install 'conduit[websocket]'",
        'websocket', True]


def test_the_sftp_source_names_the_extra(seen: dict[str, Any]) -> None:
    assert _part(seen, 'sftp_source') == ['ModuleNotFoundError', f'runtime.files.sftp: {PARAMIKO_MISSING}',
                                           'paramiko']
