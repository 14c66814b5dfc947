"""The topic, queue and dead-letter pages in a real browser, against a real server and real subscriber services.

- Publish from a topic's page and see the message on its queue's page; edit it there in place and
  see the subscriber service receive the edited data.
- A service that always fails fills the dead-letter queue; it is fixed by hot deployment; every
  matching letter is re-driven from the dead-letter page (after a confirmation showing the count)
  and every message is delivered.
- A viewer sees no change buttons on these pages, and the API refuses the viewer's changes.

The editing, the viewer's and the dead-letter moving tests share the module's server (one per
backend, dash.recorder deployed on it): each makes topics, subscriptions and definitions of its own
names and reads only its own subscriptions' queues and dead letters; only the editing test's messages
are ever delivered to dash.recorder (the others' subscriptions stay paused or pull). The re-drive test
starts its own: it hot-deploys a fixed dash.worker over a failing one and counts every dead letter.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.dashboard.conftest import PHONE, BrowserErrors
from tests.live_server import LiveServer, poll

FAST = '''
[pubsub]
wait_non_sock_err = 0.1
max_wait_secs = 0.5
poll_interval_secs = 0.05
lease_ttl_secs = 2.0
lease_renew_secs = 0.3
'''

RECORDER = '''
import json
import os

from runtime import Service


class Recorder(Service):
    """Records every message it receives."""

    name = 'dash.recorder'

    def handle(self):
        meta = self.request.raw_request
        with open(os.environ['CONDUIT_TEST_OUT'], 'a') as f:
            f.write(json.dumps({'data': self.request.payload, 'msg_id': meta['msg_id']}) + '\\n')
'''

WORKER_BROKEN = '''
from runtime import Service


class Worker(Service):
    """Version 1: fails on every message."""

    name = 'dash.worker'

    def handle(self):
        raise RuntimeError('worker v1 cannot handle ' + str(self.request.payload))
'''

WORKER_FIXED = '''
import json
import os

from runtime import Service


class Worker(Service):
    """Version 2: records every message it receives."""

    name = 'dash.worker'

    def handle(self):
        if self.request.payload == {'probe': True}:
            self.response.payload = {'version': 2}
            return
        meta = self.request.raw_request
        with open(os.environ['CONDUIT_TEST_OUT'], 'a') as f:
            f.write(json.dumps({'data': self.request.payload, 'msg_id': meta['msg_id']}) + '\\n')
'''


def _admin(server: LiveServer, method: str, path: str, expected: int = 200, **kwargs: Any) -> Any:
    """An admin call whose status must be exactly expected (200 unless said)."""
    return server.admin_json(method, path, expected, **kwargs)


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def _start(factory: Callable[..., LiveServer], tmp_path: Path, module: str, source: str) -> tuple[LiveServer, Path]:
    out = tmp_path / 'delivered.jsonl'
    server = factory(extra_config=FAST, env={'CONDUIT_TEST_OUT': str(out)})
    server.write_module(module, source)
    service = source.split("name = '")[1].split("'")[0]
    poll(lambda: server.request('GET', f'/admin/services/{service}', auth=server.admin).status_code == 200,
         message=f'{service} deployed')
    return server, out


@pytest.fixture(scope='module')
def recorder_server(shared_dash_server_factory: Callable[..., LiveServer],
                    tmp_path_factory: pytest.TempPathFactory) -> tuple[LiveServer, Path]:
    """The module's started server with dash.recorder deployed, and the file it records deliveries to."""
    return _start(shared_dash_server_factory, tmp_path_factory.mktemp('dash-recorder'), 'dash_recorder.py', RECORDER)


def test_publish_on_the_topic_page_then_edit_the_queued_message_in_place(
        recorder_server: tuple[LiveServer, Path], shared_dash_page: Callable[..., Any]) -> None:
    server, out = recorder_server
    _admin(server, 'POST', '/admin/topics', 201, json={'name': 'dash.orders'})
    # Paused: the message stays queued until it has been edited.
    sub_id = _admin(server, 'POST', '/admin/subscriptions', 201, json={
        'topic': 'dash.orders', 'kind': 'service', 'service': 'dash.recorder', 'is_active': False})[
        'subscription']['id']
    page = shared_dash_page(server, 'admin')

    page.goto('/dashboard/topics')
    page.fill('#topics-q', 'dash.ord')
    page.click('#topics-search button[type=submit]')
    page.get_by_role('link', name='dash.orders').click()
    page.wait_for_url('**/dashboard/topics/dash.orders')
    page.wait_for_selector(f'#topic-subs a[href="/dashboard/queues/{sub_id}"]')

    page.fill('#publish-data', '{"order": 1, "state": "new"}')
    page.fill('#publish-priority', '7')
    page.click('#publish-submit')
    notice = page.locator('.notice.ok', has_text='Published')
    notice.wait_for()
    msg_id = notice.inner_text().split('Published ')[1].split('.')[0]
    assert msg_id.startswith('zpsm')

    page.goto(f'/dashboard/queues/{sub_id}')
    row = page.locator('#queue-messages tr', has_text=msg_id)
    row.wait_for()
    assert '7' in row.inner_text()  # its priority
    page.get_by_role('button', name=msg_id).click()
    data = page.locator('#message-data')
    data.wait_for()
    assert json.loads(data.input_value()) == {'order': 1, 'state': 'new'}
    data.fill('{"order": 1, "state": "edited in the dashboard"}')
    page.click('#message-save')
    page.locator('.notice.ok', has_text='saved').wait_for()

    _admin(server, 'POST', f'/admin/subscriptions/{sub_id}/resume')
    poll(lambda: _records(out), message='the subscriber received the message')
    assert _records(out) == [{'data': {'order': 1, 'state': 'edited in the dashboard'}, 'msg_id': msg_id}]
    page.reload()
    page.locator('#queue-messages .empty').wait_for()  # delivered: the queue is empty

    audit = _admin(server, 'GET', '/admin/audit?limit=20')['entries']
    edits = [e for e in audit if e['method'] == 'PATCH' and msg_id in e['path']]
    assert edits and edits[0]['actor'] == 'admin'


def test_a_failing_service_fixed_by_hot_deploy_then_every_dead_letter_redriven(
        dash_server_factory: Callable[..., LiveServer], dash_page: Callable[..., Any], tmp_path: Path) -> None:
    server, out = _start(dash_server_factory, tmp_path, 'dash_worker.py', WORKER_BROKEN)
    _admin(server, 'POST', '/admin/topics', 201, json={'name': 'dash.jobs'})
    sub_id = _admin(server, 'POST', '/admin/subscriptions', 201, json={
        'topic': 'dash.jobs', 'kind': 'service', 'service': 'dash.worker',
        'options': {'max_attempts': 2, 'err_should_block': False}})['subscription']['id']
    msg_ids = {_admin(server, 'POST', '/admin/publish', json={'topic': 'dash.jobs', 'data': {'job': n},
                                                              'has_gd': True})['msg_id'] for n in range(6)}
    poll(lambda: _admin(server, 'GET', f'/admin/queues/{sub_id}')['queue']['dead_letters'] == 6,
         message='six dead letters')

    page = dash_page(server, 'admin')
    page.goto('/dashboard/dead-letters')
    page.fill('#dl-topic', 'dash.*')
    page.fill('#dl-error', 'worker v1')
    page.click('#dl-apply')
    rows = page.locator('#dl-table tbody tr')
    poll(lambda: rows.count() == 6, message='six rows')
    first = sorted(msg_ids)[0]
    page.get_by_role('button', name=first).click()
    page.locator('#letter-traceback', has_text='RuntimeError').wait_for()
    assert 'worker v1 cannot handle' in page.inner_text('#letter-error')

    # The fix: version 2 of the module, hot-deployed.
    server.write_module('dash_worker.py', WORKER_FIXED)
    poll(lambda: server.request('POST', '/admin/services/dash.worker/invoke', json={'probe': True},
                                auth=server.admin).json().get('response') == {'version': 2},
         message='version 2 deployed')

    page.click('#dl-redrive-all')
    dialog = page.locator('dialog')
    dialog.wait_for()
    assert 'Re-drive 6 dead letter(s)' in dialog.inner_text()
    dialog.get_by_role('button', name='Re-drive 6').click()
    page.locator('.notice.ok', has_text='Re-driven: 6').wait_for()
    poll(lambda: {r['msg_id'] for r in _records(out)} == msg_ids, message='every message delivered')
    assert _admin(server, 'POST', '/admin/dead-letters/count', json={})['count'] == 0
    page.locator('#dl-table .empty').wait_for()
    audit = _admin(server, 'GET', '/admin/audit?limit=20')['entries']
    assert any(e['action'] == 'redrive' and e['path'].endswith('/dead-letters/redrive') for e in audit)


def test_a_viewer_sees_no_change_buttons_and_the_api_refuses(
        recorder_server: tuple[LiveServer, Path], shared_dash_page: Callable[..., Any],
        browser_errors: BrowserErrors) -> None:
    server, _out = recorder_server
    _admin(server, 'POST', '/admin/topics', 201, json={'name': 'dash.view', 'on_no_subs': 'accept'})
    msg_id = _admin(server, 'POST', '/admin/publish', json={'topic': 'dash.view', 'data': {'x': 1},
                                                            'has_gd': True})['msg_id']
    _admin(server, 'POST', '/admin/security', 201, json={'name': 'vp', 'username': 'vp', 'password': 'pw'})
    _admin(server, 'PUT', '/admin/security/vp/permissions', json={'sub': ['dash.**']})
    sub_id = _admin(server, 'POST', '/admin/subscriptions', 201, json={
        'topic': 'dash.view', 'kind': 'pull', 'security': 'vp'})['subscription']['id']
    browser_errors.allow(r'40[34]')  # the refused calls and the unknown topic below log their status
    page = shared_dash_page(server, 'viewer')

    page.goto('/dashboard/topics/dash.view')
    page.wait_for_selector(f'#topic-subs a[href="/dashboard/queues/{sub_id}"]')
    assert page.locator('#publish-form, #topic-attrs-save, #waiting-save').count() == 0
    assert page.locator('#topic-attrs-fields input').first.is_disabled()

    page.goto(f'/dashboard/queues/{sub_id}')
    page.get_by_role('button', name=msg_id).click()
    page.locator('#message-data').wait_for()
    assert page.locator('#queue-purge, #message-save, #message-delete, #message-dead-letter').count() == 0
    assert page.locator('#message-data').get_attribute('readonly') is not None

    page.goto('/dashboard/dead-letters')
    page.locator('#dl-table').wait_for()
    assert page.locator('#dl-redrive-all, #dl-delete-all, #letter-save, #letter-redrive').count() == 0
    # A topic name with '/' (service topics have them): linked with %2F, found all the same.
    _admin(server, 'POST', '/admin/topics', 201, json={'name': '/dash/slashed'})
    page.goto('/dashboard/topics?q=slashed')
    page.get_by_role('link', name='/dash/slashed').click()
    page.locator('#topic-subs .empty').wait_for()
    assert page.inner_text('h1') == 'Topic /dash/slashed'
    page.goto('/dashboard/topics/no.such.topic')
    assert 'no.such.topic' in page.inner_text('main')

    for method, path, body in (('POST', '/dead-letters/redrive', {'expected': 0}),
                               ('POST', '/dead-letters/delete', {'expected': 0}),
                               ('PATCH', f'/queues/{sub_id}/messages/{msg_id}', {'data': 'x'}),
                               ('POST', f'/queues/{sub_id}/messages/{msg_id}/dead-letter', {}),
                               ('DELETE', f'/queues/{sub_id}/messages', None),
                               ('POST', '/publish', {'topic': 'dash.view', 'data': 1})):
        status = page.evaluate('''async ([method, path, body]) => {
            try { await Dash.api(method, path, body === null ? undefined : body); return 200; }
            catch (e) { return e.status; }
        }''', [method, path, body])
        assert status == 403, f'{method} {path}: {status}'
    # Nothing changed: the message is still queued as it was.
    message = _admin(server, 'GET', f'/admin/queues/{sub_id}/messages/{msg_id}')['message']
    assert message['data'] == {'x': 1}
    assert requests.get(server.url + '/dashboard/api/dead-letters', timeout=5).status_code == 401

    # Readable on a phone: nothing wider than the screen but the tables, which scroll inside their frame.
    phone = shared_dash_page(server, 'viewer', viewport=PHONE)
    # A topic's waiting messages are fetched after its subscriptions are drawn: both waited for. The dead
    # letters of this test's subscription (none: the list is empty), whatever another test left.
    for path, ready in (('/dashboard/topics', ('#topics-table table',)),
                        (f'/dashboard/queues/{sub_id}', ('#queue-messages table',)),
                        (f'/dashboard/dead-letters?sub_id={sub_id}', ('#dl-table .empty',)),
                        ('/dashboard/topics/dash.view', ('#topic-subs table', '#topic-waiting > *'))):
        phone.goto(path)
        for selector in ready:
            phone.wait_for_selector(selector)
        assert phone.evaluate('document.documentElement.scrollWidth <= window.innerWidth + 1'), path


def test_move_to_dead_letters_edit_and_redrive_one_delete_all_and_purge(
        recorder_server: tuple[LiveServer, Path], shared_dash_page: Callable[..., Any]) -> None:
    server, _out = recorder_server
    _admin(server, 'POST', '/admin/topics', 201, json={'name': 'dash.held'})
    sub_id = _admin(server, 'POST', '/admin/subscriptions', 201, json={
        'topic': 'dash.held', 'kind': 'service', 'service': 'dash.recorder', 'is_active': False})[
        'subscription']['id']
    ids = [_admin(server, 'POST', '/admin/publish', json={'topic': 'dash.held', 'data': {'n': n}, 'has_gd': True})[
        'msg_id'] for n in range(4)]
    page = shared_dash_page(server, 'admin')

    # Move two queued messages to the dead letters from the queue page.
    page.goto(f'/dashboard/queues/{sub_id}')
    for msg_id in ids[:2]:
        page.get_by_role('button', name=msg_id).click()
        page.locator('#message-data').wait_for()
        page.click('#message-dead-letter')
        page.locator('dialog').get_by_role('button', name='Confirm').click()
        page.locator('.notice.ok', has_text=f'{msg_id} moved').wait_for()
    poll(lambda: page.locator('#queue-messages tbody tr').count() == 2, message='two left in the queue')

    # Edit one dead letter and re-drive it alone: back in the queue with the edit.
    page.click('#queue-dead-link')
    page.wait_for_url(f'**/dashboard/dead-letters?sub_id={sub_id}')
    page.get_by_role('button', name=ids[0]).click()
    page.locator('#letter-error', has_text='administrator').wait_for()
    page.fill('#letter-data', '{"n": 0, "fixed": true}')
    page.click('#letter-save')
    page.locator('.notice.ok', has_text='saved').wait_for()
    page.click('#letter-redrive')
    page.locator('.notice.ok', has_text='re-driven').wait_for()
    back = _admin(server, 'GET', f'/admin/queues/{sub_id}/messages/{ids[0]}')['message']
    assert back['data'] == {'n': 0, 'fixed': True} and back['delivery_count'] == 0

    # Delete all that match (the one left), after a confirmation showing the count.
    page.click('#dl-apply')
    poll(lambda: page.locator('#dl-table tbody tr').count() == 1, message='one dead letter left')
    page.click('#dl-delete-all')
    dialog = page.locator('dialog')
    assert f'Delete 1 dead letter(s) matching this filter (sub_id {sub_id})' in dialog.inner_text()
    dialog.get_by_role('button', name='Delete 1').click()
    page.locator('.notice.ok', has_text='Deleted: 1').wait_for()
    assert _admin(server, 'GET', f'/admin/queues/{sub_id}')['queue']['dead_letters'] == 0

    # Purge the queue (3 messages) after a confirmation that says how many.
    page.goto(f'/dashboard/queues/{sub_id}')
    page.locator('#queue-messages tbody tr').first.wait_for()
    page.click('#queue-purge')
    dialog = page.locator('dialog')
    assert '3 message(s) will be deleted' in dialog.inner_text()
    dialog.get_by_role('button', name='Confirm').click()
    page.locator('.notice.ok', has_text='Purged: 3').wait_for()
    page.locator('#queue-messages .empty').wait_for()
