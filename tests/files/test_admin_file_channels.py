"""The admin API of file channels in process: the real app and administration layer, no gunicorn.

Creating, reading, changing, replacing and deleting channels, their run history, and hostile
bodies: every refusal is a 400 naming the field, a 404 naming the channel or a 409, never a 500
or a traceback, and a secret written in clear is never echoed — not in the answer, not in the
audit log.

Most tests share one runtime per backend (``shared_client``): each keeps to channel names of its own,
and the channels it leaves are deleted after it, so every test starts with none, as on a fresh
runtime. The tests that list everything or declare channels in an object file keep their own.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert

from runtime.db.blocking import run_transaction
from runtime.db.models import FileRun
from runtime.observability.audit import MAX_PAGE
from runtime.testing import AppClient, TestRuntime, admin_client, make_settings, wait_until

_BLOB = base64.b64encode(len(b'ssh-ed25519').to_bytes(4, 'big') + b'ssh-ed25519'
                         + (32).to_bytes(4, 'big') + bytes(32)).decode()

CHANNEL = {'name': 'invoices', 'directory': '/var/conduit/in', 'patterns': ['*.csv'], 'format': 'csv',
           'topics': ['invoice.received']}
SFTP = {**CHANNEL, 'name': 'remote', 'directory': 'in', 'sftp_host': '127.0.0.1', 'sftp_port': 2222,
        'sftp_username': 'conduit', 'sftp_password': '${CONDUIT_SECRET_SFTP}', 'sftp_host_key': f'ssh-ed25519 {_BLOB}'}
SECRETS = ['hunter2-in-clear', '-----BEGIN OPENSSH PRIVATE KEY-----\nAAAAsecretkeybody\n']


@pytest.fixture
def runtime(runtime_factory: Callable[..., TestRuntime], db_url: str) -> TestRuntime:
    return runtime_factory(db_url=db_url)


@pytest.fixture
def client(runtime: TestRuntime) -> AppClient:
    """An admin client with the topic the channels publish to."""
    return _with_topic(admin_client(runtime))


def _with_topic(made: AppClient) -> AppClient:
    assert made.simulate_post('/admin/topics', json={'name': 'invoice.received'}).status_code == 201
    return made


@pytest.fixture(scope='module')
def shared_runtime(module_db_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestRuntime]:
    """A started runtime on module_db_url that the tests of this module share, as runtime_factory makes one."""
    rt = TestRuntime(make_settings(tmp_path_factory.mktemp('runtime'), module_db_url))
    rt.start(watch=False)
    yield rt
    rt.stop()


@pytest.fixture(scope='module')
def _shared_admin(shared_runtime: TestRuntime) -> AppClient:
    """The admin client of shared_runtime, with the topic the channels publish to."""
    return _with_topic(admin_client(shared_runtime))


@pytest.fixture
def shared_client(_shared_admin: AppClient) -> Iterator[AppClient]:
    """The admin client of shared_runtime; the channels a test leaves there are deleted after it."""
    yield _shared_admin
    # Every test then starts with no channel (as on a fresh runtime) and no poller of another's runs.
    for channel in _ok(_shared_admin.simulate_get('/admin/file-channels'))['file_channels']:
        _ok(_shared_admin.simulate_delete(f'/admin/file-channels/{channel["name"]}'))


def _ok(result: Any, status: int = 200) -> dict[str, Any]:
    assert result.status_code == status, result.text
    return result.json


def _refused(result: Any, status: int) -> str:
    assert result.status_code == status, result.text
    assert 'Traceback' not in result.text
    assert result.json['is_ok'] is False
    return result.json['details']


def test_create_list_show_change_replace_delete(client: AppClient) -> None:
    made = _ok(client.simulate_post('/admin/file-channels', json=CHANNEL), 201)['file_channel']
    assert made['name'] == 'invoices' and made['format'] == 'csv' and made['origin'] == 'api'
    assert made['batch_size'] == 500 and made['after'] == 'delete'  # defaults shown
    listed = _ok(client.simulate_get('/admin/file-channels'))['file_channels']
    assert [c['name'] for c in listed] == ['invoices']

    changed = _ok(client.simulate_patch('/admin/file-channels/invoices',
                                        json={'batch_size': 100, 'after': 'move'}))['file_channel']
    assert (changed['batch_size'], changed['after'], changed['format']) == (100, 'move', 'csv')
    restored = _ok(client.simulate_patch('/admin/file-channels/invoices', json={'batch_size': None}))['file_channel']
    assert restored['batch_size'] == 500

    replaced = _ok(client.simulate_put('/admin/file-channels/invoices',
                                       json={'directory': '/var/conduit/in2', 'topics': ['invoice.received']}))
    assert replaced['file_channel']['format'] == 'json' and replaced['file_channel']['after'] == 'delete'

    renamed = _ok(client.simulate_patch('/admin/file-channels/invoices', json={'name': 'invoices-eu'}))
    assert renamed['file_channel']['name'] == 'invoices-eu'
    _refused(client.simulate_get('/admin/file-channels/invoices'), 404)

    assert _ok(client.simulate_delete('/admin/file-channels/invoices-eu'))['deleted'] == 'invoices-eu'
    assert _ok(client.simulate_get('/admin/file-channels'))['file_channels'] == []

    entries = _ok(client.simulate_get('/admin/audit', params={'kind': 'file_channel'}))['entries']
    assert [e['action'] for e in reversed(entries)] == ['create', 'update', 'update', 'update', 'update', 'delete']
    assert entries[-1]['after']['definition']['format'] == 'csv'  # the JSON column is read


def test_a_duplicate_name_is_a_409(shared_client: AppClient) -> None:
    client, body = shared_client, {**CHANNEL, 'name': 'dup-invoices'}
    _ok(client.simulate_post('/admin/file-channels', json=body), 201)
    details = _refused(client.simulate_post('/admin/file-channels', json=body), 409)
    assert "'dup-invoices' already exists" in details
    _ok(client.simulate_post('/admin/file-channels', json={**CHANNEL, 'name': 'dup-other'}), 201)
    assert 'already exists' in _refused(client.simulate_patch('/admin/file-channels/dup-other',
                                                              json={'name': 'dup-invoices'}), 409)


@pytest.mark.parametrize('method', ['GET', 'PATCH', 'PUT', 'DELETE'])
def test_an_unknown_channel_is_a_404_naming_it(shared_client: AppClient, method: str) -> None:
    client = shared_client
    details = _refused(client.simulate_request(method, '/admin/file-channels/ghost', json={'directory': '/x'}), 404)
    assert "'ghost'" in details
    assert "'ghost'" in _refused(client.simulate_get('/admin/file-channels/ghost/runs'), 404)


@pytest.mark.parametrize(('body', 'field'), [
    ({**CHANNEL, 'colour': 'red'}, 'colour'),
    ({k: v for k, v in CHANNEL.items() if k != 'directory'}, 'directory'),
    ({k: v for k, v in CHANNEL.items() if k != 'name'}, 'name'),
    ({**CHANNEL, 'name': ''}, 'name'),
    ({**CHANNEL, 'name': 12}, 'name'),
    ({**CHANNEL, 'name': 'a\x00b'}, 'name'),
    ({**CHANNEL, 'name': 'x' * 5000}, 'name'),
    ({**CHANNEL, 'directory': 'relative'}, 'directory'),
    ({**CHANNEL, 'directory': '/in/../../etc'}, 'directory'),
    ({**CHANNEL, 'directory': '/in\ud800'}, 'directory'),
    ({**CHANNEL, 'patterns': 'x' * 300}, 'patterns'),
    ({**CHANNEL, 'patterns': ['../*']}, 'patterns'),
    ({**CHANNEL, 'topics': ['invoice.*']}, 'topics'),
    ({**CHANNEL, 'topics': ['no.such.topic']}, 'topics'),
    ({**CHANNEL, 'topics': [], 'service': ''}, 'topics'),
    ({**CHANNEL, 'service': 'no.such.service'}, 'service'),
    ({**CHANNEL, 'batch_size': 10 ** 12}, 'batch_size'),
    ({**CHANNEL, 'batch_size': -1}, 'batch_size'),
    ({**CHANNEL, 'batch_size': '10'}, 'batch_size'),
    ({**CHANNEL, 'poll_interval_secs': 1e308}, 'poll_interval_secs'),
    ({**CHANNEL, 'stable_polls': 0}, 'stable_polls'),
    ({**CHANNEL, 'format': 'xml'}, 'format'),
    ({**CHANNEL, 'format': 'bytes', 'records': 'each'}, 'records'),
    ({**CHANNEL, 'encoding': 'rot-13-and-a-half'}, 'encoding'),
    ({**CHANNEL, 'after': 'move', 'move_to': '../../{name}'}, 'move_to'),
    ({**CHANNEL, 'after': 'move', 'move_to': 'done/{secret}'}, 'move_to'),
    ({**CHANNEL, 'error_dir': '/x/../..'}, 'error_dir'),
    ({**SFTP, 'sftp_host_key': ''}, 'sftp_host_key'),
    ({**SFTP, 'sftp_username': ''}, 'sftp_username'),
    ({**SFTP, 'sftp_port': 0}, 'sftp_port'),
    ({**SFTP, 'sftp_password': '${PATH}'}, 'sftp_password'),
])
def test_hostile_bodies_are_a_400_naming_the_field(shared_client: AppClient, body: dict[str, Any],
                                                  field: str) -> None:
    client = shared_client
    # Sent as ASCII JSON: a lone surrogate travels as its \u escape, as a client would send it.
    result = client.simulate_post('/admin/file-channels', body=json.dumps(body),
                                  headers={'Content-Type': 'application/json'})
    assert field in _refused(result, 400)
    assert _ok(client.simulate_get('/admin/file-channels'))['file_channels'] == []


@pytest.mark.parametrize('raw', ['', '[]', '"x"', '{"name": ', '{"name": "x", "directory": NaN}', 'null'])
def test_malformed_bodies_are_a_400(shared_client: AppClient, raw: str) -> None:
    result = shared_client.simulate_post('/admin/file-channels', body=raw, headers={'Content-Type': 'application/json'})
    _refused(result, 400)


@pytest.mark.parametrize('secret', SECRETS)
@pytest.mark.parametrize('field', ['sftp_password', 'sftp_private_key'])
def test_a_secret_in_clear_is_refused_and_never_echoed(shared_client: AppClient, field: str, secret: str) -> None:
    client, sftp = shared_client, {**SFTP, 'name': f'remote-{field}-{SECRETS.index(secret)}'}
    result = client.simulate_post('/admin/file-channels', json={**sftp, field: secret})
    details = _refused(result, 400)
    assert field in details and secret.strip() not in result.text and 'secretkeybody' not in result.text
    _ok(client.simulate_post('/admin/file-channels', json=sftp), 201)
    result = client.simulate_patch(f'/admin/file-channels/{sftp["name"]}', json={field: secret})
    _refused(result, 400)
    assert 'secretkeybody' not in result.text and 'hunter2' not in result.text
    # The whole log, every test's entries included: more than a default page of them on a shared runtime.
    audit = client.simulate_get('/admin/audit', params={'limit': MAX_PAGE})
    assert _ok(audit)['total'] <= MAX_PAGE
    assert 'hunter2' not in audit.text and 'secretkeybody' not in audit.text


def test_sftp_channels_show_references_and_the_audit_log_masks_them(shared_client: AppClient) -> None:
    client = shared_client
    made = _ok(client.simulate_post('/admin/file-channels', json={**SFTP, 'name': 'remote-shown'}), 201)['file_channel']
    assert made['sftp_password'] == '${CONDUIT_SECRET_SFTP}' and made['sftp_port'] == 2222
    # Its own entries only: other tests' channels are audited on the shared runtime too.
    entry = _ok(client.simulate_get('/admin/audit', params={'kind': 'file_channel', 'name': 'remote-shown'}))[
        'entries'][0]
    assert entry['after']['definition']['sftp_password'] == '***'


def test_runs_are_paged_most_recent_first_and_filtered(shared_client: AppClient,
                                                      shared_runtime: TestRuntime) -> None:
    client = shared_client
    _ok(client.simulate_post('/admin/file-channels', json={**CHANNEL, 'name': 'paged'}), 201)
    now = time.time()
    run_transaction(shared_runtime.engine, lambda c: c.execute(insert(FileRun), [
        {'channel': 'paged', 'file_name': f'day-{i}.csv', 'size': 10, 'mtime': now, 'content_hash': f'{i:064x}',
         'state': 'failed' if i == 3 else 'done', 'owner': 'h-1', 'started_at': now + i,
         'finished_at': now + i + 1, 'error': 'record 2 (line 3): bad' if i == 3 else ''} for i in range(5)]))
    page = _ok(client.simulate_get('/admin/file-channels/paged/runs', params={'limit': 2}))
    assert page['total'] == 5 and [r['file_name'] for r in page['runs']] == ['day-4.csv', 'day-3.csv']
    assert page['runs'][1]['error'] == 'record 2 (line 3): bad'
    page = _ok(client.simulate_get('/admin/file-channels/paged/runs', params={'offset': 4}))
    assert [r['file_name'] for r in page['runs']] == ['day-0.csv']
    failed = _ok(client.simulate_get('/admin/file-channels/paged/runs', params={'state': 'failed'}))
    assert failed['total'] == 1
    for params in ({'state': 'exploded'}, {'limit': 0}, {'limit': 10 ** 9}, {'offset': -1}, {'limit': 'x'}):
        _refused(client.simulate_get('/admin/file-channels/paged/runs', params=params), 400)


def test_channels_declared_in_a_file_are_guarded(client: AppClient, runtime: TestRuntime) -> None:
    """A file's channel is changed only after detaching it, like every object a file declares."""
    objects = runtime.settings.path(runtime.settings.objects.dir)
    objects.mkdir(parents=True, exist_ok=True)
    (objects / 'files.yaml').write_text(
        'file_channel:\n  - name: declared\n    directory: /var/in\n    topics: [invoice.received]\n')
    runtime.objects.apply()
    details = _refused(client.simulate_patch('/admin/file-channels/declared', json={'batch_size': 5}), 409)
    assert 'files.yaml' in details
    _refused(client.simulate_delete('/admin/file-channels/declared'), 409)
    changed = _ok(client.simulate_patch('/admin/file-channels/declared?detach=true', json={'batch_size': 5}))
    assert changed['file_channel']['batch_size'] == 5 and changed['file_channel']['origin'] == 'api'
    actions = [e['action'] for e in _ok(client.simulate_get('/admin/audit', params={'name': 'declared'}))['entries']]
    assert 'detach' in actions


def test_the_openapi_document_describes_the_routes(shared_client: AppClient) -> None:
    doc = _ok(shared_client.simulate_get('/openapi.json'))
    paths = doc['paths']
    assert {'post', 'get'} <= set(paths['/admin/file-channels'])
    assert {'get', 'patch', 'put', 'delete'} <= set(paths['/admin/file-channels/{name}'])
    assert 'get' in paths['/admin/file-channels/{name}/runs']
    assert json.dumps(doc)  # plain JSON


def test_changes_take_effect_in_the_worker_at_once(shared_client: AppClient, shared_runtime: TestRuntime,
                                                   tmp_path: Path) -> None:
    """A channel made through the API polls at once; deactivated or deleted, it stops."""
    client, runtime = shared_client, shared_runtime
    inbox = tmp_path / 'inbox'
    inbox.mkdir()
    body = {'name': 'live', 'directory': str(inbox), 'patterns': ['*.json'], 'topics': ['invoice.received'],
            'poll_interval_secs': 0.05, 'stable_polls': 1}
    _ok(client.simulate_post('/admin/file-channels', json=body), 201)
    assert 'live' in runtime.file_transfer.pollers()
    (inbox / 'one.json').write_text('{"invoice_id": "INV-1"}')
    wait_until(lambda: _ok(client.simulate_get('/admin/file-channels/live/runs'))['total'] == 1, timeout=30,
               message='one.json processed')
    run = _ok(client.simulate_get('/admin/file-channels/live/runs'))['runs'][0]
    assert (run['file_name'], run['state'], run['published']) == ('one.json', 'done', 1)
    _ok(client.simulate_patch('/admin/file-channels/live', json={'is_active': False}))
    assert 'live' not in runtime.file_transfer.pollers()
    _ok(client.simulate_delete('/admin/file-channels/live'))
    assert 'live' not in runtime.file_transfer.channels()
