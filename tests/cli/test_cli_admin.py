"""``conduit topic|sub|queue|dlq|sec|channel`` and ``conduit publish`` against a live server."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Any

import requests
from click.testing import CliRunner

from runtime import cli as cli_module
from tests.live_server import LiveServer, poll

FAST = '''
[pubsub]
wait_non_sock_err = 0.05
max_wait_secs = 0.2
poll_interval_secs = 0.05
'''

SERVICES = '''
from runtime import Service


class Fussy(Service):
    name = 'cli.fussy'

    def handle(self):
        if not self.request.payload.get('ok'):
            raise ValueError('not ok')


class Hello(Service):
    name = 'cli.hello'

    def handle(self):
        self.response.payload = {'hello': self.request.input.get('who')}
'''


def _cli(server: LiveServer, *args: str, input: str | None = None, code: int = 0) -> str:
    config = str(server.base / 'config' / 'server.toml')
    result = CliRunner().invoke(cli_module.main, ['--config', config, *args], input=input)
    assert result.exit_code == code, f'{args}: {result.output}'
    return result.output


def _json(server: LiveServer, *args: str) -> Any:
    return json.loads(_cli(server, *args, '--json'))


def test_topics_subscriptions_publish_queues_and_dead_letters(server_factory) -> None:
    server = server_factory(extra_config=FAST)
    server.write_module('cli_services.py', SERVICES)
    server.start()
    assert 'created topic billing' in _cli(server, 'topic', 'create', 'billing', '--set', 'max_depth_gd=500')
    assert 'already exists' in _cli(server, 'topic', 'create', 'billing', code=1)
    _cli(server, 'topic', 'edit', 'billing', '--set', 'has_gd=true')
    listed = _cli(server, 'topic', 'list')
    assert 'billing' in listed and 'name' in listed

    out = _cli(server, 'sub', 'create', 'billing', '--service', 'cli.fussy', '--option', 'max_attempts=1',
               '--option', 'err_should_block=false')
    assert 'sub_key: sk.' in out
    sub_id = _json(server, 'sub', 'list', '--topic', 'billing')['subscriptions'][0]['id']
    assert 'cli.fussy' in _cli(server, 'sub', 'list')
    assert 'sk.' not in _cli(server, 'sub', 'show', str(sub_id))

    msg_id = _cli(server, 'publish', 'billing', '{"ok": false, "n": 1}', '--priority', '7').split()[0]
    assert msg_id.startswith('zpsm')
    poll(lambda: _json(server, 'queue', 'show', str(sub_id))['dead_letters'] == 1, message='dead letter')
    assert msg_id in _cli(server, 'dlq', 'list', str(sub_id))
    shown = _cli(server, 'dlq', 'show', str(sub_id), msg_id)
    # The traceback, with the subscriber's file and line, not only "ValueError: not ok".
    assert 'ValueError: not ok' in shown and 'cli_services.py", line' in shown
    assert "raise ValueError('not ok')" in shown
    dead = _json(server, 'dlq', 'show', str(sub_id), msg_id)
    assert dead['last_error'] == 'ValueError: not ok' and 'Traceback' in dead['last_traceback']
    _cli(server, 'dlq', 'edit', str(sub_id), msg_id, '--data', '{"ok": true}')
    assert 're-drove 1' in _cli(server, 'dlq', 'redrive', str(sub_id), msg_id)
    poll(lambda: _json(server, 'queue', 'show', str(sub_id))['dead_letters'] == 0
         and _json(server, 'queue', 'show', str(sub_id))['queue_depth'] == 0, message='re-driven')
    _cli(server, 'dlq', 'redrive', str(sub_id), code=2)  # neither msg_ids nor --all

    details = _cli(server, 'topic', 'show', 'billing')
    assert msg_id in details and 'max_depth_gd' in details

    # Queue browsing and editing, on a paused subscription so nothing leaves the queue.
    _cli(server, 'sub', 'pause', str(sub_id))
    ids = [_cli(server, 'publish', 'billing', f'{{"n": {n}}}').split()[0] for n in range(3)]
    browsed = _json(server, 'queue', 'browse', str(sub_id), '--limit', '2')
    assert [m['msg_id'] for m in browsed['messages']] == ids[:2] and browsed['next_offset'] == 2
    assert 'next page: --offset 2' in _cli(server, 'queue', 'browse', str(sub_id), '--limit', '2')
    _cli(server, 'queue', 'edit', str(sub_id), ids[2], '--priority', '9', '--data', '{"n": 2, "ok": true}')
    assert _json(server, 'queue', 'browse', str(sub_id))['messages'][0]['msg_id'] == ids[2]
    assert '"ok": true' in _cli(server, 'queue', 'get', str(sub_id), ids[2])
    _cli(server, 'queue', 'delete', str(sub_id), ids[0])
    assert 'purged 2' in _cli(server, 'queue', 'purge', str(sub_id), '--yes')
    _cli(server, 'sub', 'resume', str(sub_id))
    assert 'queue_depth' in _cli(server, 'queue', 'list', '--json')
    _cli(server, 'sub', 'delete', str(sub_id), '--yes')
    assert 'deleted topic billing' in _cli(server, 'topic', 'delete', 'billing', '--yes')
    assert 'not found' in _cli(server, 'topic', 'show', 'billing', code=1)


def test_security_definitions_and_channels(server_factory) -> None:
    server = server_factory()
    server.write_module('cli_services.py', SERVICES)
    server.start()
    out = _cli(server, 'sec', 'create', 'partner', '--username', 'partner', input='s3cret-pw-1\ns3cret-pw-1\n')
    assert 'created' in out and 's3cret' not in out
    _cli(server, 'sec', 'permissions', 'partner', '--pub', 'partner.**', '--sub', 'partner.**')
    assert 'partner.**' in _cli(server, 'sec', 'permissions', 'partner')
    _cli(server, 'channel', 'create', 'hello', '--service', 'cli.hello', '--url-path', '/api/hello/{who}',
         '--method', 'get', '--security', 'partner')
    assert '/api/hello/{who}' in _cli(server, 'channel', 'list')
    url = f'{server.url}/api/hello/ada'
    poll(lambda: requests.get(url, auth=('partner', 's3cret-pw-1'), timeout=5).status_code == 200,
         message='channel live')
    assert requests.get(url, auth=('partner', 's3cret-pw-1'), timeout=5).json() == {'hello': 'ada'}

    _cli(server, 'sec', 'passwd', 'partner', '--password-stdin', input='s3cret-pw-2\n')
    poll(lambda: requests.get(url, auth=('partner', 's3cret-pw-2'), timeout=5).status_code == 200,
         message='new password')
    assert requests.get(url, auth=('partner', 's3cret-pw-1'), timeout=5).status_code == 401
    shown = _cli(server, 'sec', 'show', 'partner') + _cli(server, 'sec', 'list', '--json')
    assert 's3cret' not in shown and 'scrypt' not in shown and 'partner' in shown
    _cli(server, 'sec', 'edit', 'partner', '--realm', 'Partners')
    assert 'used by' in _cli(server, 'sec', 'delete', 'partner', code=1)

    _cli(server, 'channel', 'edit', 'hello', '--security', '', '--inactive')
    assert _json(server, 'channel', 'show', 'hello')['is_active'] is False
    _cli(server, 'channel', 'delete', 'hello')
    _cli(server, 'sec', 'delete', 'partner')
    assert 'partner' not in _cli(server, 'sec', 'list')


def test_runs_as_a_user_runs_it(server: LiveServer) -> None:
    env = {**os.environ, 'CONDUIT_CONFIG': str(server.base / 'config' / 'server.toml')}
    done = subprocess.run([sys.executable, '-m', 'runtime.cli', 'topic', 'create', 'shell.made'], cwd=server.base,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    listed = subprocess.run([sys.executable, '-m', 'runtime.cli', 'topic', 'list'], cwd=server.base, env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and 'shell.made' in listed.stdout


LONG_SERVICES = '''
from runtime import Service


class Notifications(Service):
    name = 'crm.customer.created.notifications.handler.for.the.sales.department'

    def handle(self):
        pass


class Failing(Service):
    name = 'cli.always.fails'

    def handle(self):
        raise KeyError('address')
'''


def test_tables_never_cut_names_and_bulk_deletes_ask_first(server_factory) -> None:
    server = server_factory(extra_config=FAST)
    server.write_module('cli_long.py', LONG_SERVICES)
    server.start()
    service = 'crm.customer.created.notifications.handler.for.the.sales.department'
    service_topic = f"/zato/s/to/{service.replace('.', '_')}"
    _cli(server, 'publish', service, '{"n": 1}')  # creates the service's own topic and subscription

    # Piped output (CliRunner is not a terminal) keeps every name whole, on one line.
    listed = _cli(server, 'sub', 'list')
    assert service_topic in listed and service in listed
    # On an 80-column terminal, names fold onto more lines but are never cut.
    env = {**os.environ, 'CONDUIT_CONFIG': str(server.base / 'config' / 'server.toml'), 'FORCE_COLOR': '1',
           'NO_COLOR': '1', 'COLUMNS': '80'}
    done = subprocess.run([sys.executable, '-m', 'runtime.cli', 'sub', 'list'], env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = re.sub(r'\x1b\[[0-9;]*m', '', done.stdout).splitlines()  # no styles: bold titles
    assert max(len(line) for line in lines) <= 80
    body = [line.split('│') for line in lines if line.startswith('│')]
    assert ''.join(cells[2].strip() for cells in body) == service_topic
    assert ''.join(cells[4].strip() for cells in body) == service

    _cli(server, 'topic', 'create', 'cli.details')
    _cli(server, 'sub', 'create', 'cli.details', '--service', service)
    assert service in _cli(server, 'topic', 'show', 'cli.details')  # the subscriber, not '-'

    # dlq delete --all asks, like queue purge; --yes skips the question.
    _cli(server, 'topic', 'create', 'cli.fails')
    out = _cli(server, 'sub', 'create', 'cli.fails', '--service', 'cli.always.fails', '--option', 'max_attempts=1')
    sub_id = _json(server, 'sub', 'list', '--topic', 'cli.fails')['subscriptions'][0]['id']
    assert 'sub_key' in out
    _cli(server, 'publish', 'cli.fails', '{"n": 1}')
    poll(lambda: _json(server, 'queue', 'show', str(sub_id))['dead_letters'] == 1, message='dead letter')
    refused = _cli(server, 'dlq', 'delete', str(sub_id), '--all', input='n\n', code=1)
    assert 'Delete every dead letter' in refused and 'Aborted' in refused
    assert _json(server, 'queue', 'show', str(sub_id))['dead_letters'] == 1
    assert 'deleted 1 dead letter(s)' in _cli(server, 'dlq', 'delete', str(sub_id), '--all', input='y\n')
    _cli(server, 'publish', 'cli.fails', '{"n": 2}')
    poll(lambda: _json(server, 'queue', 'show', str(sub_id))['dead_letters'] == 1, message='dead letter')
    assert 'deleted 1' in _cli(server, 'dlq', 'delete', str(sub_id), '--all', '--yes')

    # Every list command takes --json.
    for command in (['services'], ['topic', 'list'], ['sub', 'list'], ['queue', 'list'], ['dlq', 'list', str(sub_id)],
                    ['queue', 'browse', str(sub_id)], ['sec', 'list'], ['channel', 'list'], ['job', 'list'],
                    ['spark', 'list'], ['spark', 'pipelines']):
        assert _json(server, *command)['is_ok'] is True, command
