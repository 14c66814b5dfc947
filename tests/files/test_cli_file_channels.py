"""``conduit file-channel list|show|create|edit|delete|runs`` against a live server."""

from __future__ import annotations

import json
import time
from typing import Any

from click.testing import CliRunner
from sqlalchemy import insert

from runtime import cli as cli_module
from runtime.db.engine import make_engine
from runtime.db.models import FileRun
from tests.live_server import LiveServer

TOPICS = '''
pubsub_topic:
  - name: invoice.received
  - name: invoice.archived
file_channel:
  - name: declared
    directory: /var/conduit/declared
    topics: [invoice.received]
'''


def _cli(server: LiveServer, *args: str, code: int = 0) -> str:
    config = str(server.base / 'config' / 'server.toml')
    result = CliRunner().invoke(cli_module.main, ['--config', config, *args])
    assert result.exit_code == code, f'{args}: {result.output}'
    assert 'Traceback' not in result.output
    return result.output


def _json(server: LiveServer, *args: str) -> Any:
    return json.loads(_cli(server, *args, '--json'))


def test_file_channels_through_the_cli(server_factory) -> None:
    server = server_factory()
    server.write_objects('files.yaml', TOPICS)
    server.start()

    out = _cli(server, 'file-channel', 'create', 'invoices', '--directory', '/var/conduit/in', '--pattern', '*.csv',
               '--pattern', '*.CSV', '--format', 'csv', '--topic', 'invoice.received', '--after', 'move',
               '--set', 'batch_size=250')
    assert 'created file channel invoices: /var/conduit/in -> publish to invoice.received' in out
    shown = _json(server, 'file-channel', 'show', 'invoices')
    assert (shown['patterns'], shown['format'], shown['batch_size'], shown['after']) == \
        (['*.csv', '*.CSV'], 'csv', 250, 'move')
    listed = _cli(server, 'file-channel', 'list')
    assert 'invoices' in listed and '/var/conduit/in' in listed and 'declared' in listed

    out = _cli(server, 'file-channel', 'edit', 'invoices', '--topic', 'invoice.archived', '--inactive',
               '--set', 'batch_size=null')
    assert 'publish to invoice.archived' in out
    shown = _json(server, 'file-channel', 'show', 'invoices')
    assert (shown['topics'], shown['is_active'], shown['batch_size']) == (['invoice.archived'], False, 500)

    # Refusals name the field or the channel; a secret written in clear is never repeated.
    assert "'batch_size'" in _cli(server, 'file-channel', 'edit', 'invoices', '--batch-size', '0', code=1)
    assert "'ghost'" in _cli(server, 'file-channel', 'show', 'ghost', code=1)
    assert 'already exists' in _cli(server, 'file-channel', 'create', 'invoices', '--directory', '/x',
                                    '--topic', 'invoice.received', code=1)
    out = _cli(server, 'file-channel', 'create', 'remote', '--directory', 'in', '--topic', 'invoice.received',
               '--sftp-host', '127.0.0.1', '--sftp-username', 'u', '--sftp-password', 'hunter2-plain',
               '--sftp-known-hosts', '/etc/ssh/known_hosts', code=1)
    assert 'sftp_password' in out and 'hunter2-plain' not in out
    assert '--directory is required' in _cli(server, 'file-channel', 'create', 'nodir', code=2)

    # A channel an object file declares is changed only after --detach.
    assert 'files.yaml' in _cli(server, 'file-channel', 'edit', 'declared', '--batch-size', '7', code=1)
    _cli(server, 'file-channel', 'edit', 'declared', '--batch-size', '7', '--detach')
    assert _json(server, 'file-channel', 'show', 'declared')['origin'] == 'api'

    engine = make_engine(server.db_url, pool_size=1)
    try:
        with engine.begin() as conn:
            now = time.time()
            conn.execute(insert(FileRun), [
                {'channel': 'invoices', 'file_name': f'in/day {i}.csv', 'size': 10, 'mtime': now,
                 'content_hash': f'{i:064x}', 'state': 'failed' if i == 2 else 'done', 'records_done': i,
                 'published': i, 'owner': 'host-1', 'started_at': now + i, 'finished_at': now + i,
                 'error': 'record 3 (line 4): bad date' if i == 2 else ''} for i in range(3)])
    finally:
        engine.dispose()
    runs = _cli(server, 'file-channel', 'runs', 'invoices', '--limit', '2')
    assert runs.index('in/day 2.csv') < runs.index('in/day 1.csv') and 'in/day 0.csv' not in runs
    assert 'record 3 (line 4): bad date' in runs and '--offset 2 for more' in runs
    assert _json(server, 'file-channel', 'runs', 'invoices', '--state', 'failed')['total'] == 1

    assert 'deleted file channel invoices' in _cli(server, 'file-channel', 'delete', 'invoices')
    assert [c['name'] for c in _json(server, 'file-channel', 'list')['file_channels']] == ['declared']
    audit = _cli(server, 'audit', '--kind', 'file_channel', '--json')
    assert 'hunter2' not in audit and '"create"' in audit and '"detach"' in audit
