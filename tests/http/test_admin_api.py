"""The admin API against real servers: topics, subscriptions, queues, dead letters,
publishing, security definitions and channels, each change live without a restart.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.live_server import LiveServer, poll

#: Delivery settings that keep retries and polls short.
FAST = '''
[pubsub]
wait_non_sock_err = 0.1
max_wait_secs = 0.5
poll_interval_secs = 0.05
lease_ttl_secs = 2.0
lease_renew_secs = 0.3
'''

SERVICES = '''
import json
import os

from runtime import Service

OUT = os.environ['CONDUIT_TEST_OUT']


class Picky(Service):
    """Records every message it gets; fails unless the data says ok."""

    name = 'test.picky'

    def handle(self):
        data = self.request.payload
        meta = self.request.raw_request
        with open(OUT, 'a') as f:
            f.write(json.dumps({'topic': meta['topic_name'], 'data': data, 'msg_id': meta['msg_id'],
                                'count': meta['delivery_count'], 'publisher': meta['publisher']}) + '\\n')
        if not (isinstance(data, dict) and data.get('ok')):
            raise ValueError('not ok')


class Echo(Service):
    name = 'test.echo'

    def handle(self):
        self.response.payload = {'echo': self.request.payload}
'''


class Admin:
    """Calls the admin API, checks statuses, and keeps every answer to search for secrets later."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.answers: list[str] = []

    def __call__(self, method: str, path: str, expected: int = 200, **kwargs: Any) -> Any:
        kwargs.setdefault('auth', self.server.admin)
        r = self.server.request(method, path, **kwargs)
        self.answers.append(r.text)
        assert r.status_code == expected, f'{method} {path}: {r.status_code} {r.text}'
        body = r.json()
        assert body['is_ok'] is (expected < 400), body
        return body


def _start(server_factory: Any, tmp_path: Path, workers: int = 1) -> tuple[LiveServer, Admin, Path]:
    out = tmp_path / 'delivered.jsonl'
    server = server_factory(workers=workers, extra_config=FAST, env={'CONDUIT_TEST_OUT': str(out)})
    server.write_module('test_admin_services.py', SERVICES)
    server.start()
    return server, Admin(server), out


# Every test but the two-worker one shares one server per backend (starting one is most of what a
# test costs): each names its objects with its own tag, and reads only the deliveries of its own
# topics from the file all of them share.


@pytest.fixture(scope='module')
def shared(module_server_factory: Callable[..., LiveServer],
           tmp_path_factory: pytest.TempPathFactory) -> tuple[LiveServer, Path]:
    """The module's server with the test services, and the file its test.picky writes deliveries to."""
    out = tmp_path_factory.mktemp('admin-api-out') / 'delivered.jsonl'
    server = module_server_factory(extra_config=FAST, env={'CONDUIT_TEST_OUT': str(out)})
    server.write_module('test_admin_services.py', SERVICES)
    return server.start(), out


@pytest.fixture
def tag() -> str:
    """A suffix that makes this test's object names its own on the shared server."""
    return uuid.uuid4().hex[:8]


def _records(out: Path, topic: str) -> list[dict[str, Any]]:
    """What test.picky got from one topic, in order."""
    lines = out.read_text().splitlines() if out.exists() else []
    return [r for r in map(json.loads, lines) if r['topic'] == topic]


def _fill(path: str, sub_id: int) -> str:
    return re.sub(r'{(\w+)}', lambda m: str(sub_id) if m.group(1) == 'sub_id' else 'x', path)


def test_every_admin_endpoint_requires_admin_credentials(shared: tuple[LiveServer, Path], tag: str) -> None:
    server, _out = shared
    admin = Admin(server)
    client, guarded = f'client-{tag}', f'guarded.{tag}'
    admin('POST', '/admin/security', 201, json={'name': client, 'username': client, 'password': 'client-pw'})
    admin('POST', '/admin/topics', 201, json={'name': guarded})
    admin('PUT', f'/admin/security/{client}/permissions', json={'sub': [guarded]})
    # The paths with a subscription id name this test's own, which holds a message: had any of those
    # requests got through (a purge, a pause, a delete), it would show.
    sub_id = admin('POST', '/admin/subscriptions', 201, json={'topic': guarded, 'kind': 'pull',
                                                             'security': client})['subscription']['id']
    admin('POST', '/admin/publish', json={'topic': guarded, 'data': 'kept'})

    def topics() -> tuple[list[str], list[dict[str, Any]]]:
        # Other tests' queues may still be settling on the shared server: their depths are not compared.
        listed = admin('GET', '/admin/topics')['topics']
        return [t['name'] for t in listed], [t for t in listed if t['name'] == guarded]

    def subscription() -> dict[str, Any]:
        view = admin('GET', f'/admin/subscriptions/{sub_id}')['subscription']
        (view['oldest_message'] or {}).pop('age_secs', None)  # grows by itself
        return view

    sub_before = subscription()
    assert sub_before['queue_depth'] == 1 and sub_before['is_active'] is True
    topics_before = topics()
    security_before = admin('GET', '/admin/security')['security']
    assert client in [s['name'] for s in security_before]
    doc = server.request('GET', '/openapi.json', auth=server.admin).json()
    admin_ops = [(m.upper(), p) for p, ops in doc['paths'].items() if p.startswith('/admin') for m in ops]
    assert len(admin_ops) > 50
    for method, path in admin_ops + [('GET', '/admin'), ('GET', '/admin/no/such/thing')]:
        url = _fill(path, sub_id)
        for auth in (None, (server.admin[0], 'wrong'), (client, 'client-pw'), ('', '')):
            r = server.request(method, url, auth=auth, json={'name': 'x'})
            assert r.status_code == 401, f'{method} {url} with {auth and auth[0]!r}: {r.status_code} {r.text}'
            assert r.headers['WWW-Authenticate'].startswith('Basic realm=')
            assert r.json()['is_ok'] is False
    # Nothing those requests could have changed did change.
    assert topics() == topics_before
    assert admin('GET', '/admin/security')['security'] == security_before
    assert subscription() == sub_before


def test_bad_input_gets_a_clear_4xx_and_nothing_stored_changes(shared: tuple[LiveServer, Path], tag: str) -> None:
    server, _out = shared
    admin = Admin(server)
    kept, reader = f'kept.{tag}', f'r-{tag}'
    admin('POST', '/admin/topics', 201, json={'name': kept})
    admin('POST', '/admin/security', 201, json={'name': reader, 'username': reader, 'password': 'pw'})
    sub_id = admin('POST', '/admin/subscriptions', 201, json={'topic': kept, 'kind': 'pull', 'security': reader})[
        'subscription']['id']
    # NUL characters: PostgreSQL refuses them, so they must never reach a query.
    for method, path in (('GET', '/admin/security/a%00b'), ('GET', f'/admin/queues/{sub_id}/messages/a%00b'),
                         ('DELETE', '/admin/channels/a%00b'), ('GET', '/admin/subscriptions?topic=a%00b')):
        assert 'NUL' in admin(method, path, 400)['details']
    for path, body in (('/admin/topics', {'name': 'a\x00b'}), ('/admin/topics', {'name': 'x', 'hook_service': 'a\x00'}),
                       (f'/admin/queues/{sub_id}/redrive', {'msg_ids': ['a\x00b']}),
                       ('/admin/publish', {'topic': kept, 'data': 'a\x00b'}),
                       ('/admin/publish', {'topic': kept, 'data': {'x': '\ud800'}}),
                       ('/admin/security', {'name': 's', 'username': 'u', 'password': '\ud800'}),
                       ('/admin/channels', {'name': 'c', 'service': 's', 'url_path': '/a', 'methods': 'BREW'}),
                       ('/admin/topics', {'name': 'big', 'max_depth_gd': 2 ** 40}),
                       ('/admin/subscriptions', {'topic': kept, 'kind': 'pull', 'security': reader,
                                                 'options': {'max_attempts': 'many'}}),
                       ('/admin/subscriptions', {'topic': kept, 'kind': 'rest_push', 'push_url': 'ftp://x'})):
        r = server.request('POST', path, data=json.dumps(body), auth=server.admin,
                           headers={'Content-Type': 'application/json'})
        assert r.status_code == 400, f'{path} {body!r}: {r.status_code} {r.text}'
    # Every missing field is named at once, not one per attempt.
    for path, body, named in (('/admin/channels', {'name': 'c'}, "input fields 'service', 'url_path' are required"),
                              ('/admin/security', {}, "input fields 'name', 'username', 'password' are required"),
                              ('/admin/subscriptions', {}, "input fields 'topic', 'kind' are required")):
        assert named in admin('POST', path, 400, json=body)['details']
    for raw in (b'{"name": ', b'[1, 2]', b'"just a string"', b'\xff\xfe'):
        assert server.request('POST', '/admin/topics', data=raw, auth=server.admin).status_code == 400
    assert server.request('POST', '/admin/topics', data=b'{}' + b' ' * 6_000_000, auth=server.admin).status_code == 413
    admin('GET', '/admin/queues/abc', 404)  # not an id
    admin('GET', '/admin/queues/99999999999999999999999', 404)
    assert [t['name'] for t in admin('GET', '/admin/topics')['topics'] if t['name'] == kept] == [kept]
    assert admin('GET', '/health')['is_ok'] is True


def test_topics_crud_and_runtime_details(shared: tuple[LiveServer, Path], tag: str) -> None:
    server, _out = shared
    admin = Admin(server)
    orders, lonely, customer, puller = f'orders_{tag}.created', f'lonely.{tag}', f'/customer_{tag}/new', f'puller-{tag}'
    created = admin('POST', '/admin/topics', 201, json={'name': orders, 'max_depth_gd': 500})['topic']
    assert created['max_depth_gd'] == 500 and created['origin'] == 'api'
    assert 'already exists' in admin('POST', '/admin/topics', 409, json={'name': f'ORDERS_{tag}.created'})['details']
    assert 'topic name' in admin('POST', '/admin/topics', 400, json={'name': ' bad'})['details']
    assert 'depth_check_freq' in admin('POST', '/admin/topics', 400, json={'name': 'a', 'depth_check_freq': 5})[
        'details']
    assert "'colour'" in admin('POST', '/admin/topics', 400, json={'name': 'a', 'colour': 'red'})['details']
    admin('POST', '/admin/topics', 201, json={'name': customer})
    assert admin('GET', f'/admin/topics/{customer}')['topic']['name'] == customer
    admin('GET', '/admin/topics/no.such.topic', 404)

    admin('POST', '/admin/security', 201, json={'name': puller, 'username': puller, 'password': 'pw-1'})
    admin('PUT', f'/admin/security/{puller}/permissions', json={'sub': [f'orders_{tag}.**']})
    pull = admin('POST', '/admin/subscriptions', 201, json={'topic': f'orders_{tag}.*', 'kind': 'pull',
                                                           'security': puller})
    assert pull['sub_key'].startswith('sk.')
    pull_id = pull['subscription']['id']
    paused = admin('POST', '/admin/subscriptions', 201, json={'topic': orders, 'kind': 'service',
                                                             'service': 'test.echo', 'is_active': False})
    assert paused['subscription']['is_active'] is False
    msg_ids = [admin('POST', '/admin/publish', json={'topic': orders, 'data': {'n': n}})['msg_id']
               for n in range(3)]

    details = admin('GET', f'/admin/topics/{orders}?last=2')
    assert details['depth'] == {'gd': 0, 'non_gd': 0}
    assert [p['msg_id'] for p in details['last_publications']] == msg_ids[::-1][:2]
    assert details['last_pub_time_iso'] == details['last_publications'][0]['pub_time_iso']
    queues = {s['id']: s for s in details['subscriptions']}
    assert set(queues) == {pull_id, paused['subscription']['id']}
    assert queues[pull_id]['queue_depth'] == 3
    assert queues[pull_id]['oldest_message']['msg_id'] == msg_ids[0]
    assert 'sub_key' not in json.dumps(details) and pull['sub_key'] not in json.dumps(details)
    listed = {t['name']: t for t in admin('GET', '/admin/topics')['topics']}
    assert listed[orders]['subscriptions'] == 2

    # A topic with no subscribers keeps what is published (depth), until one subscribes.
    admin('POST', '/admin/topics', 201, json={'name': lonely})
    admin('POST', '/admin/publish', json={'topic': lonely, 'data': 'hi'})
    assert admin('GET', f'/admin/topics/{lonely}')['depth'] == {'gd': 1, 'non_gd': 0}

    assert admin('PATCH', f'/admin/topics/{orders}', json={'is_active': False})['topic']['is_active'] is False
    admin('POST', '/admin/publish', 403, json={'topic': orders, 'data': 1})
    admin('PATCH', f'/admin/topics/{orders}', json={'is_active': True})
    admin('PATCH', f'/admin/topics/{orders}', 400, json={'name': 'renamed'})

    deleted = admin('DELETE', f'/admin/topics/{orders}')
    assert deleted['subscriptions_deleted'] == 1  # the exact one; the orders_<tag>.* pattern stays
    admin('GET', f'/admin/topics/{orders}', 404)
    assert admin('GET', f'/admin/subscriptions/{pull_id}')['subscription']['queue_depth'] == 3


def test_pause_and_resume_delivery(shared: tuple[LiveServer, Path], tag: str) -> None:
    server, out = shared
    admin = Admin(server)
    jobs = f'jobs.{tag}'
    admin('POST', '/admin/topics', 201, json={'name': jobs})
    sub = admin('POST', '/admin/subscriptions', 201, json={'topic': jobs, 'kind': 'service',
                                                          'service': 'test.picky'})['subscription']
    admin('POST', '/admin/publish', json={'topic': jobs, 'data': {'ok': True, 'n': 1}})
    poll(lambda: len(_records(out, jobs)) == 1, message='first delivery')

    paused = admin('POST', f'/admin/subscriptions/{sub["id"]}/pause')['subscription']
    assert paused['is_active'] is False
    admin('POST', '/admin/publish', json={'topic': jobs, 'data': {'ok': True, 'n': 2}})
    poll(lambda: admin('GET', f'/admin/queues/{sub["id"]}')['queue']['queue_depth'] == 1, message='queued')
    time.sleep(0.5)
    assert len(_records(out, jobs)) == 1, 'a paused subscription got a message'

    assert admin('POST', f'/admin/subscriptions/{sub["id"]}/resume')['subscription']['is_active'] is True
    poll(lambda: len(_records(out, jobs)) == 2, message='delivery after resume')
    assert _records(out, jobs)[1]['data'] == {'ok': True, 'n': 2}
    admin('POST', '/admin/subscriptions/999999/pause', 404)


def test_queue_browse_and_edits_in_place_are_seen_by_the_next_delivery(shared: tuple[LiveServer, Path],
                                                                        tag: str) -> None:
    server, out = shared
    admin = Admin(server)
    invoices, reader = f'invoices.{tag}', f'reader-{tag}'
    admin('POST', '/admin/topics', 201, json={'name': invoices})
    sub = admin('POST', '/admin/subscriptions', 201, json={
        'topic': invoices, 'kind': 'service', 'service': 'test.picky',
        'options': {'max_attempts': 1000, 'wait_non_sock_err': 0.3}})['subscription']
    queue = f'/admin/queues/{sub["id"]}'
    msg_id = admin('POST', '/admin/publish', json={'topic': invoices, 'data': {'ok': False, 'amount': 10}})['msg_id']
    poll(lambda: _records(out, invoices), message='a failed first attempt')
    # The service ran; its failure is stored a moment later, when the delivery loop settles the attempt.
    def stored_failure() -> dict[str, Any] | None:
        message = admin('GET', f'{queue}/messages/{msg_id}')['message']
        return message if message['last_error'] else None

    message = poll(stored_failure, message='the failure stored')
    assert message['data'] == {'ok': False, 'amount': 10} and message['delivery_count'] >= 1
    assert 'not ok' in message['last_error']
    assert message['last_traceback'].startswith('Traceback (most recent call last):')
    edited = admin('PATCH', f'{queue}/messages/{msg_id}', json={'data': {'ok': True, 'amount': 11}, 'priority': 8})
    assert edited['message']['data'] == {'ok': True, 'amount': 11} and edited['message']['priority'] == 8
    assert edited['held_by'] == 1
    poll(lambda: any(r['data'] == {'ok': True, 'amount': 11} for r in _records(out, invoices)),
         message='edited delivery')
    last = _records(out, invoices)[-1]
    assert last['msg_id'] == msg_id and last['data'] == {'ok': True, 'amount': 11}
    poll(lambda: admin('GET', queue)['queue']['queue_depth'] == 0, message='queue drained')
    admin('GET', f'{queue}/messages/{msg_id}', 404)

    # Browsing a pull queue: delivery order, paging, edits, deletes, purge.
    admin('POST', '/admin/security', 201, json={'name': reader, 'username': reader, 'password': 'pw'})
    admin('PUT', f'/admin/security/{reader}/permissions', json={'sub': [invoices]})
    pull = admin('POST', '/admin/subscriptions', 201, json={'topic': invoices, 'kind': 'pull',
                                                           'security': reader})['subscription']
    queue = f'/admin/queues/{pull["id"]}'
    ids = [admin('POST', '/admin/publish', json={'topic': invoices, 'data': {'n': n, 'ok': True},
                                                 'priority': p})['msg_id']
           for n, p in enumerate([5, 9, 5, 1, 5])]
    page = admin('GET', f'{queue}/messages?limit=2')
    assert page['depth'] == 5 and page['next_offset'] == 2
    assert [m['msg_id'] for m in page['messages']] == [ids[1], ids[0]]
    assert 'data' not in page['messages'][0] and page['messages'][0]['data_preview'].startswith('{')
    rest = admin('GET', f'{queue}/messages?limit=10&offset=2')
    assert [m['msg_id'] for m in rest['messages']] == [ids[2], ids[4], ids[3]] and rest['next_offset'] is None
    admin('PATCH', f'{queue}/messages/{ids[3]}', json={'priority': 9, 'expiration': 3600})
    order = [m['msg_id'] for m in admin('GET', f'{queue}/messages')['messages']]
    assert order[:2] == [ids[1], ids[3]]
    admin('PATCH', f'{queue}/messages/{ids[3]}', 400, json={'priority': 10})
    admin('PATCH', f'{queue}/messages/{ids[3]}', 400, json={})
    admin('PATCH', f'{queue}/messages/{ids[3]}', 400, json={'data': None})
    admin('PATCH', f'{queue}/messages/{ids[3]}', 400, json={'colour': 'red'})
    admin('PATCH', f'{queue}/messages/msg.nope', 404, json={'priority': 1})
    assert admin('DELETE', f'{queue}/messages/{ids[0]}')['deleted'] == ids[0]
    admin('DELETE', f'{queue}/messages/{ids[0]}', 404)
    assert admin('GET', queue)['queue']['queue_depth'] == 4
    assert admin('DELETE', f'{queue}/messages')['deleted'] == 4
    assert admin('GET', f'{queue}/messages')['messages'] == []


def test_dead_letters_are_edited_and_redriven_back_to_delivery(shared: tuple[LiveServer, Path], tag: str) -> None:
    server, out = shared
    admin = Admin(server)
    payments = f'payments.{tag}'
    admin('POST', '/admin/topics', 201, json={'name': payments})
    sub = admin('POST', '/admin/subscriptions', 201, json={
        'topic': payments, 'kind': 'service', 'service': 'test.picky',
        'options': {'max_attempts': 1, 'err_should_block': False}})['subscription']
    queue = f'/admin/queues/{sub["id"]}'
    ids = [admin('POST', '/admin/publish', json={'topic': payments, 'data': {'ok': False, 'n': n}})['msg_id']
           for n in range(3)]
    poll(lambda: admin('GET', queue)['queue']['dead_letters'] == 3, message='three dead letters')
    page = admin('GET', f'{queue}/dead-letters?limit=2')
    assert page['count'] == 3 and page['next_offset'] == 2
    assert [d['msg_id'] for d in page['dead_letters']] == ids[:2]
    dead = admin('GET', f'{queue}/dead-letters/{ids[0]}')['dead_letter']
    assert dead['reason'] == 'max_attempts' and 'not ok' in dead['last_error'] and dead['delivery_count'] == 1

    edited = admin('PATCH', f'{queue}/dead-letters/{ids[0]}', json={'data': {'ok': True, 'n': 0, 'fixed': True}})
    assert edited['dead_letter']['data']['fixed'] is True
    assert admin('POST', f'{queue}/redrive', json={'msg_ids': [ids[0]]})['redriven'] == [ids[0]]
    poll(lambda: any(r['data'].get('fixed') for r in _records(out, payments)), message='the re-driven letter delivered')
    redelivered = [r for r in _records(out, payments) if r['data'].get('fixed')][0]
    assert redelivered['msg_id'] == ids[0] and redelivered['count'] == 1  # the delivery count was reset
    admin('GET', f'{queue}/dead-letters/{ids[0]}', 404)

    admin('POST', f'{queue}/redrive', 400)  # neither msg_ids nor all
    admin('POST', f'{queue}/redrive', 404, json={'msg_ids': ['msg.nope']})
    assert admin('POST', f'{queue}/redrive', json={'all': True})['count'] == 2
    # Still failing: back in the dead-letter queue after their one attempt.
    poll(lambda: admin('GET', queue)['queue']['dead_letters'] == 2, message='failing again')
    assert admin('DELETE', f'{queue}/dead-letters/{ids[1]}')['deleted'] == ids[1]
    assert admin('DELETE', f'{queue}/dead-letters')['deleted'] == 1
    assert admin('GET', queue)['queue']['dead_letters'] == 0


# On a server of its own, with two workers: each change must reach both. The shared server keeps the
# one worker the other tests were written for: with two, which worker delivers, and when it learns of
# a pause, would become part of what they check.


def test_security_definitions_password_change_and_channels_without_restart(server_factory, tmp_path) -> None:
    server, admin, _out = _start(server_factory, tmp_path, workers=2)
    created = admin('POST', '/admin/security', 201, json={'name': 'crm', 'username': 'crm-user',
                                                          'password': 'first-secret-pw', 'realm': 'CRM'})
    assert created['security'] == {'name': 'crm', 'type': 'basic_auth', 'username': 'crm-user', 'realm': 'CRM',
                                   'is_active': True, 'origin': 'api'}
    admin('POST', '/admin/security', 409, json={'name': 'crm', 'username': 'other', 'password': 'x'})
    admin('POST', '/admin/security', 409, json={'name': 'crm2', 'username': 'crm-user', 'password': 'x'})
    admin('POST', '/admin/security', 400, json={'name': 'no-pw', 'username': 'u'})
    admin('POST', '/admin/security', 400, json={'name': 'colon', 'username': 'a:b', 'password': 'x'})

    channel = admin('POST', '/admin/channels', 201, json={'name': 'echo', 'service': 'test.echo',
                                                         'url_path': '/api/echo/{id}', 'methods': ['POST'],
                                                         'security': 'crm'})['channel']
    assert channel['methods'] == ['POST'] and channel['security'] == 'crm'
    admin('POST', '/admin/channels', 409, json={'name': 'echo', 'service': 'test.echo', 'url_path': '/api/x'})
    admin('POST', '/admin/channels', 400, json={'name': 'bad', 'service': 'x', 'url_path': '/admin/x'})
    admin('POST', '/admin/channels', 400, json={'name': 'bad', 'service': 'x', 'url_path': '/x', 'security': 'nope'})

    def status_with(password: str) -> set[int]:
        # New connections each time, so that both workers answer sooner or later.
        return {requests.post(f'{server.url}/api/echo/7', json={'a': 1}, auth=('crm-user', password),
                              timeout=10).status_code for _ in range(8)}

    poll(lambda: status_with('first-secret-pw') == {200}, message='channel live on every worker')
    r = requests.post(f'{server.url}/api/echo/7', json={'a': 1}, auth=('crm-user', 'first-secret-pw'), timeout=10)
    assert r.json() == {'echo': {'a': 1}}

    changed = admin('POST', '/admin/security/crm/password', json={'password': 'second-secret-pw'})
    assert changed['security']['name'] == 'crm'
    poll(lambda: status_with('first-secret-pw') == {401} and status_with('second-secret-pw') == {200},
         message='new password in force on every worker')
    admin('POST', '/admin/security/crm/password', 400, json={'password': ''})
    admin('POST', '/admin/security/nope/password', 404, json={'password': 'x'})

    assert admin('PATCH', '/admin/security/crm', json={'realm': 'CRM 2'})['security']['realm'] == 'CRM 2'
    admin('PATCH', '/admin/security/crm', 400, json={'password': 'sneaky'})
    assert 'channel' in admin('DELETE', '/admin/security/crm', 409)['details']
    assert admin('PATCH', '/admin/channels/echo', json={'security': '', 'methods': 'POST,GET'})['channel'][
        'methods'] == ['GET', 'POST']
    poll(lambda: {requests.get(f'{server.url}/api/echo/1', timeout=10).status_code for _ in range(6)} == {200},
         message='channel without security on every worker')
    admin('DELETE', '/admin/channels/echo')
    admin('DELETE', '/admin/channels/echo', 404)
    poll(lambda: {requests.get(f'{server.url}/api/echo/1', timeout=10).status_code for _ in range(6)} == {404},
         message='channel gone on every worker')
    admin('GET', '/admin/security/crm')
    assert [s['name'] for s in admin('GET', '/admin/security')['security']] == ['crm']
    admin('DELETE', '/admin/security/crm')
    admin('GET', '/admin/security/crm', 404)

    # No answer ever carried a password or a hash, and the log holds neither.
    everything = '\n'.join(admin.answers)
    for secret in ('first-secret-pw', 'second-secret-pw', 'scrypt$', 'password_hash'):
        assert secret not in everything, secret
        assert secret not in server.log(), secret


def test_publish_on_behalf_of_an_endpoint(shared: tuple[LiveServer, Path], tag: str) -> None:
    server, out = shared
    admin = Admin(server)
    erp, events = f'erp-{tag}', f'erp_{tag}.events'
    admin('POST', '/admin/security', 201, json={'name': erp, 'username': erp, 'password': 'pw'})
    admin('POST', '/admin/topics', 201, json={'name': events})
    admin('POST', '/admin/subscriptions', 201, json={'topic': events, 'kind': 'service',
                                                    'service': 'test.picky'})
    sent = admin('POST', '/admin/publish', json={'topic': events, 'data': {'ok': True}, 'security': erp,
                                                 'correl_id': 'c-1'})
    assert sent['topic_name'] == events
    poll(lambda: _records(out, events), message='delivery')
    assert _records(out, events)[0] == {'topic': events, 'data': {'ok': True}, 'msg_id': sent['msg_id'], 'count': 1,
                                        'publisher': f'security:{erp}'}
    # To a service: through its implicit topic.
    to_service = admin('POST', '/admin/publish', json={'topic': 'test.picky', 'data': {'ok': True, 'direct': tag},
                                                       'service': 'test.echo'})
    assert to_service['topic_name'] == '/zato/s/to/test_picky'
    direct = poll(lambda: [r for r in _records(out, '/zato/s/to/test_picky') if r['msg_id'] == to_service['msg_id']],
                  message='delivery to the service')
    assert direct[-1]['data'] == {'ok': True, 'direct': tag} and direct[-1]['publisher'] == 'service:test.echo'

    admin('POST', '/admin/publish', 400, json={'topic': events, 'data': 1, 'security': 'nope'})
    admin('POST', '/admin/publish', 400, json={'topic': events, 'data': 1, 'security': erp,
                                               'service': 'test.echo'})
    admin('POST', '/admin/publish', 400, json={'topic': events})
    admin('POST', '/admin/publish', 400, json={'topic': events, 'data': 1, 'priority': 11})
    admin('POST', '/admin/publish', 404, json={'topic': 'no.such', 'data': 1})
    admin('POST', '/admin/publish', 400, data=b'{not json', headers={'Content-Type': 'application/json'})
