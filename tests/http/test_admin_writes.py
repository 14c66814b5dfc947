"""No command destroys a running system's state, and every admin change is on record.

Against a real server: a second ``conduit start`` touches nothing; objects an object file declares
are refused to the admin API and the CLI unless detached; undeploying a service others use is
refused unless forced; channels and subscriptions must name what exists; every admin write lands in
the audit log with before and after, secrets masked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.live_server import LiveServer, poll

OBJECTS = '''
security:
  - name: shop.sec
    username: shop-user
    password: shop-password-1
channel_rest:
  - name: shop.ping
    service: conduit.ping
    url_path: /shop/ping
    method: GET
pubsub_topic:
  - name: shop.orders
pubsub_permission:
  - security: shop.sec
    sub: [shop.orders]
pubsub_subscription:
  - security: shop.sec
    delivery_type: pull
    topic_list: [shop.orders]
scheduler:
  - name: shop.nightly
    service: conduit.ping
    job_type: interval_based
    hours: 24
'''


def run_cli(server: LiveServer, *args: str, env: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m runtime.cli ARGS`` configured for this server, as a user runs it."""
    full_env = {**os.environ, 'CONDUIT_CONFIG': str(server.base / 'config' / 'server.toml'), **(env or {})}
    full_env.pop('CONDUIT_DATABASE_URL', None)
    return subprocess.run([sys.executable, '-m', 'runtime.cli', *args], cwd=server.base, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def admin(server: LiveServer, method: str, path: str, **kwargs: Any) -> Any:
    return server.request(method, path, auth=server.admin, **kwargs)


def state(server: LiveServer) -> dict[str, Any]:
    """Every object the admin API lists, and each queue's depth."""
    found: dict[str, Any] = {}
    for kind, path in (('security', '/admin/security'), ('channels', '/admin/channels'), ('topics', '/admin/topics'),
                       ('subscriptions', '/admin/subscriptions'), ('jobs', '/admin/jobs')):
        r = admin(server, 'GET', path)
        assert r.status_code == 200, r.text
        found[kind] = sorted(str(o.get('name', o.get('id'))) for o in r.json()[kind])
    found['depths'] = sorted((s['id'], s['queue_depth']) for s in admin(server, 'GET', '/admin/subscriptions')
                             .json()['subscriptions'])
    return found


@pytest.fixture
def shop(server_factory: Callable[..., LiveServer]) -> LiveServer:
    """A started server whose config/objects/shop.yaml declares one object of every kind."""
    server = server_factory()
    server.write_objects('shop.yaml', OBJECTS)
    return server.start()


@pytest.fixture(scope='module')
def shared_shop(module_server_factory: Callable[..., LiveServer]) -> LiveServer:
    """``shop`` for the whole module, for the tests that leave shop.yaml, its channel and its service as they were."""
    server = module_server_factory()
    server.write_objects('shop.yaml', OBJECTS)
    return server.start()


# The tests on ``shop`` get a server of their own: each rewrites shop.yaml, detaches or undeploys
# what the shared tests need as the file declares it, checks exact server-wide lists (every
# subscription's depth, the audit log), or starts a second server on the same configuration.


def test_a_second_start_touches_nothing_then_undeploying_a_service_in_use_needs_force(shop: LiveServer) -> None:
    for n in range(3):
        r = admin(shop, 'POST', '/admin/publish', json={'topic': 'shop.orders', 'data': {'n': n}})
        assert r.status_code == 200, r.text
    before = state(shop)
    assert 'shop.ping' in before['channels'] and [d for _, d in before['depths']] == [3]

    # The second start reads another objects directory (an empty one): had it applied it, every
    # object of shop.yaml, and the queue with them, would be gone.
    empty = shop.base / 'other-objects'
    empty.mkdir()
    second = run_cli(shop, 'start', env={'CONDUIT_OBJECTS_DIR': str(empty)})
    assert second.returncode != 0
    assert 'already running' in (second.stderr + second.stdout).lower()

    assert state(shop) == before
    assert shop.request('GET', '/shop/ping').status_code == 200

    # The server is as the fixture made it (and three messages queued): undeploying what its objects
    # use is refused unless forced. This shares the server above, to spare a start.
    r = admin(shop, 'DELETE', '/admin/services/conduit.ping')
    assert r.status_code == 409
    for user in ("channel 'shop.ping'", "job 'shop.nightly'"):
        assert user in r.json()['details']
    assert shop.invoke('conduit.ping') is not None

    cli = run_cli(shop, 'undeploy', 'conduit.ping')
    assert cli.returncode != 0 and "channel 'shop.ping'" in cli.stderr and '--force' in cli.stderr

    cli = run_cli(shop, 'undeploy', 'conduit.ping', '--force')
    assert cli.returncode == 0, cli.stderr
    assert "now pointing nowhere: channel 'shop.ping'" in cli.stderr
    assert admin(shop, 'GET', '/admin/services/conduit.ping').status_code == 404


def test_edits_of_file_objects_are_refused_naming_the_file_unless_detached(shop: LiveServer) -> None:
    owner = str((shop.objects / 'shop.yaml').resolve())
    sub_id = admin(shop, 'GET', '/admin/subscriptions').json()['subscriptions'][0]['id']
    refused = [('PATCH', '/admin/channels/shop.ping', {'url_path': '/elsewhere'}),
               ('DELETE', '/admin/channels/shop.ping', None),
               ('PATCH', '/admin/security/shop.sec', {'realm': 'x'}),
               ('POST', '/admin/security/shop.sec/password', {'password': 'another-one'}),
               ('PUT', '/admin/security/shop.sec/permissions', {'sub': []}),
               ('PATCH', '/admin/topics/SHOP.orders', {'has_gd': False}),
               ('DELETE', f'/admin/subscriptions/{sub_id}', None),
               ('POST', f'/admin/subscriptions/{sub_id}/pause', None),
               ('PATCH', '/admin/jobs/shop.nightly', {'hours': 1}),
               ('POST', '/admin/jobs/shop.nightly/pause', None)]
    before = state(shop)
    for method, path, body in refused:
        r = admin(shop, method, path, json=body)
        assert r.status_code == 409, (method, path, r.text)
        assert owner in r.json()['details'] and 'detach' in r.json()['details'], r.text
    assert state(shop) == before

    # Running a declared job now changes nothing the file declares: allowed.
    assert admin(shop, 'POST', '/admin/jobs/shop.nightly/run').status_code == 200

    cli = run_cli(shop, 'channel', 'edit', 'shop.ping', '--url-path', '/elsewhere')
    assert cli.returncode != 0 and owner in cli.stderr

    cli = run_cli(shop, 'channel', 'edit', 'shop.ping', '--url-path', '/elsewhere', '--detach')
    assert cli.returncode == 0, cli.stderr
    assert shop.request('GET', '/elsewhere').status_code == 200

    r = admin(shop, 'PATCH', '/admin/jobs/shop.nightly', params={'detach': 'true'}, json={'hours': 2})
    assert r.status_code == 200, r.text
    assert r.json()['job']['origin'] == 'api'

    # The file changes: the detached objects stay as the admin left them; the rest follows the file.
    shop.write_objects('shop.yaml', OBJECTS.replace('/shop/ping', '/shop/ping2').replace('hours: 24', 'hours: 3')
                       .replace('name: shop.orders', 'name: shop.orders\n    has_gd: false'))
    poll(lambda: admin(shop, 'GET', '/admin/topics/shop.orders').json()['topic']['has_gd'] is False,
         message='the file change applied')
    channel = admin(shop, 'GET', '/admin/channels/shop.ping').json()['channel']
    assert (channel['url_path'], channel['origin']) == ('/elsewhere', 'api')
    assert admin(shop, 'GET', '/admin/jobs/shop.nightly').json()['job']['hours'] == 2
    assert 'left alone' in shop.log()

    # Objects made through the API stay the API's: a file never deletes them.
    shop.write_objects('shop.yaml', '')
    poll(lambda: admin(shop, 'GET', '/admin/topics/shop.orders').status_code == 404, message='file emptied')
    assert admin(shop, 'GET', '/admin/channels/shop.ping').status_code == 200
    assert admin(shop, 'GET', '/admin/jobs/shop.nightly').status_code == 200


def test_every_admin_write_is_audited_with_before_and_after_and_no_secret(shop: LiveServer) -> None:
    assert admin(shop, 'POST', '/admin/security', json={'name': 'api.sec', 'username': 'api-user',
                                                        'password': 'first-secret'}).status_code == 201
    assert admin(shop, 'POST', '/admin/security/api.sec/password', json={'password': 'second-secret'}
                 ).status_code == 200
    assert admin(shop, 'POST', '/admin/channels', json={'name': 'api.ping', 'service': 'conduit.ping',
                                                        'url_path': '/api/ping'}).status_code == 201
    assert admin(shop, 'PATCH', '/admin/channels/api.ping', json={'name': 'api.pong', 'methods': ['GET']}
                 ).status_code == 200
    r = admin(shop, 'POST', '/admin/subscriptions', json={'topic': 'shop.orders', 'kind': 'pull',
                                                          'security': 'api.sec'})
    assert r.status_code == 201, r.text
    sub_key = r.json()['sub_key']
    assert admin(shop, 'DELETE', '/admin/channels/api.pong').status_code == 200
    assert admin(shop, 'PATCH', '/admin/channels/shop.ping?detach=true', json={'is_active': False}
                 ).status_code == 200
    assert admin(shop, 'PATCH', '/admin/channels/nope', json={'is_active': False}).status_code == 404

    entries = admin(shop, 'GET', '/admin/audit', params={'kind': 'channel', 'actor': 'admin'}).json()['entries']
    actions = [(e['action'], e['name']) for e in entries]
    assert actions == [('update', 'shop.ping'), ('detach', 'shop.ping'), ('delete', 'api.pong'),
                       ('update', 'api.ping'), ('create', 'api.ping')]
    rename = entries[3]
    assert rename['before']['name'] == 'api.ping' and rename['after']['name'] == 'api.pong'
    assert rename['actor'] == 'admin' and rename['method'] == 'PATCH' and rename['client'] == '127.0.0.1'
    assert entries[2]['after'] is None and entries[4]['before'] is None
    assert entries[1]['before']['owner'].endswith('shop.yaml') and entries[1]['after']['origin'] == 'api'

    everything = admin(shop, 'GET', '/admin/audit', params={'limit': 1000}).json()
    text = json.dumps(everything)
    for secret in ('first-secret', 'second-secret', sub_key, 'scrypt'):
        assert secret not in text
    password = [e for e in everything['entries'] if e['action'] == 'password']
    assert password[0]['before']['password_hash'] == '***' and password[0]['after']['password_hash'] == '***'

    page = admin(shop, 'GET', '/admin/audit', params={'limit': 2, 'offset': 1, 'kind': 'channel',
                                                      'actor': 'admin'}).json()
    assert page['total'] == 5 and [e['name'] for e in page['entries']] == ['shop.ping', 'api.pong']

    assert admin(shop, 'POST', '/admin/topics', json={'name': 'Api.Topic'}).status_code == 201
    assert admin(shop, 'DELETE', '/admin/topics/api.topic').status_code == 200
    assert admin(shop, 'POST', '/admin/publish', json={'topic': 'shop.orders', 'data': 1}).status_code == 200
    topics = admin(shop, 'GET', '/admin/audit', params={'kind': 'topic', 'actor': 'admin'}).json()['entries']
    assert [(e['action'], e['name'], e['after'] is None) for e in topics] == [
        ('delete', 'api.topic', True), ('create', 'Api.Topic', False)]
    published = admin(shop, 'GET', '/admin/audit', params={'action': 'publish'}).json()['entries']
    assert [(e['kind'], e['method'], e['path']) for e in published] == [('publish', 'POST', '/admin/publish')]

    # What the object files did is on record too.
    by_files = admin(shop, 'GET', '/admin/audit', params={'actor': 'object files', 'name': 'shop.ping'}).json()
    assert [(e['action'], e['method']) for e in by_files['entries']] == [('create', 'FILE')]
    assert by_files['entries'][0]['path'].endswith('shop.yaml')

    cli = run_cli(shop, 'audit', '--kind', 'security')
    assert cli.returncode == 0, cli.stderr
    assert 'password' in cli.stdout and 'create' in cli.stdout and 'api.sec' in cli.stdout
    assert 'second-secret' not in cli.stdout


def test_objects_apply_reaches_a_running_server_and_detach_works_on_every_kind(shop: LiveServer) -> None:
    extra = shop.base / 'extra.yaml'
    extra.write_text('channel_rest:\n  - {name: extra.ping, service: conduit.ping, url_path: /extra/ping}\n')
    dry = run_cli(shop, 'objects', 'apply', str(extra), '--dry-run')
    assert dry.returncode == 0 and 'extra.ping' in dry.stdout and '1 to create' in dry.stdout, dry.stderr
    assert shop.request('GET', '/extra/ping').status_code == 404

    applied = run_cli(shop, 'objects', 'apply', str(extra))
    assert applied.returncode == 0 and 'applied: 1 create' in applied.stdout, applied.stderr
    poll(lambda: shop.request('GET', '/extra/ping').status_code == 200, message='applied channel live')
    assert 'shop.ping' in state(shop)['channels']  # the server's own file is not part of that application

    sub_id = admin(shop, 'GET', '/admin/subscriptions').json()['subscriptions'][0]['id']
    for args in (('sub', 'pause', str(sub_id)), ('sec', 'edit', 'shop.sec', '--realm', 'Shop'),
                 ('topic', 'edit', 'shop.orders', '--set', 'has_gd=false'), ('job', 'pause', 'shop.nightly')):
        refused = run_cli(shop, *args)
        assert refused.returncode != 0 and 'shop.yaml' in refused.stderr, args
        done = run_cli(shop, *args, '--detach')
        assert done.returncode == 0, (args, done.stderr)
    assert admin(shop, 'GET', f'/admin/subscriptions/{sub_id}').json()['subscription']['is_active'] is False
    detached = admin(shop, 'GET', '/admin/audit', params={'action': 'detach'}).json()['entries']
    assert sorted(e['kind'] for e in detached) == ['job', 'security', 'subscription', 'topic']


# The tests on ``shared_shop`` leave shop.yaml's channel, its service and what they themselves
# check as they found them; what they make is named their own.


def test_channels_and_subscriptions_must_name_what_exists_and_not_clash(shared_shop: LiveServer) -> None:
    shop, tag = shared_shop, uuid.uuid4().hex[:8]
    c1, c2 = f'c1-{tag}', f'c2-{tag}'
    r = admin(shop, 'POST', '/admin/channels', json={'name': c1, 'service': 'no.such.service',
                                                     'url_path': f'/{c1}'})
    assert r.status_code == 400 and "'no.such.service'" in r.json()['details']

    r = admin(shop, 'POST', '/admin/channels', json={'name': c2, 'service': 'conduit.ping',
                                                     'url_path': '/shop/ping', 'methods': ['GET', 'POST']})
    assert r.status_code == 409
    assert "channel 'shop.ping' already answers GET /shop/ping" in r.json()['details']
    r = admin(shop, 'POST', '/admin/channels', json={'name': c2, 'service': 'conduit.ping',
                                                     'url_path': '/shop/{what}', 'methods': ['POST']})
    assert r.status_code == 201, r.text
    r = admin(shop, 'PATCH', f'/admin/channels/{c2}', json={'url_path': '/shop/ping', 'methods': []})
    assert r.status_code == 409 and "'shop.ping'" in r.json()['details']

    r = admin(shop, 'POST', '/admin/subscriptions', json={'topic': f'no.such.{tag}', 'kind': 'service',
                                                          'service': 'conduit.ping'})
    assert r.status_code == 400 and f"'no.such.{tag}'" in r.json()['details']
    r = admin(shop, 'POST', '/admin/subscriptions', json={'topic': f'no.such.{tag}.*', 'kind': 'service',
                                                          'service': 'conduit.ping'})
    assert r.status_code == 201, r.text


# Hostile input on the new routes (one server for all of them)


_SPELLINGS = ['/admin/audit', '//admin/audit', '/admin//audit', '/%61dmin/audit', '/admin/audit/', '/admin/detach',
              '/ADMIN/audit', '/admin/audit/../detach']
_BAD_QUERIES = [('limit=0', 'limit'), ('limit=abc', 'limit'), ('limit=1001', 'limit'), ('offset=-1', 'offset'),
                ('since=abc', 'since'), ('kind=' + 'x' * 401, 'kind'), ('name=a%01b', 'name'),
                ('until=1e400', 'until')]
_BAD_BODIES = [b'not json', b'[]', b'{"kind": "channel"}', b'{"kind": "bogus", "name": "x"}',
               b'{"kind": "subscription", "name": "abc"}', b'{"kind": "channel", "name": ""}',
               b'{"kind": "channel", "name": "x", "extra": 1}', b'{"kind": 5, "name": "x"}',
               b'{"kind": "subscription", "name": "99999999999"}', b'{"kind": "channel", "name": "a\\u0000b"}']


def test_audit_and_detach_refuse_hostile_input(shared_shop: LiveServer) -> None:
    shop = shared_shop
    for path in _SPELLINGS:
        for method in ('GET', 'POST'):
            r = shop.request(method, path, json={'kind': 'channel', 'name': 'shop.ping'})
            assert r.status_code in (400, 401, 404), (method, path, r.status_code)
            assert 'Traceback' not in r.text
    # None of them detached anything.
    assert admin(shop, 'PATCH', '/admin/channels/shop.ping', json={'is_active': False}).status_code == 409

    for query, field in _BAD_QUERIES:
        r = admin(shop, 'GET', f'/admin/audit?{query}')
        assert r.status_code == 400, (query, r.text)
        assert field in r.json()['details']

    for body in _BAD_BODIES:
        r = admin(shop, 'POST', '/admin/detach', data=body, headers={'Content-Type': 'application/json'})
        assert r.status_code == 400, (body, r.status_code, r.text)
        assert 'Traceback' not in r.text

    for method in ('DELETE', 'PATCH'):  # ids past the database's integer range (found by the fuzzer on PostgreSQL)
        for path in ('/admin/subscriptions/11366621930', '/admin/subscriptions/-11366621930'):
            r = admin(shop, method, path, json={'is_active': False})
            assert r.status_code in (400, 404), (method, path, r.status_code, r.text)

    r = admin(shop, 'DELETE', '/admin/services/conduit.ping?force=maybe')
    assert r.status_code == 400 and 'force' in r.json()['details']
    r = admin(shop, 'PATCH', '/admin/channels/shop.ping?detach=maybe', json={'is_active': False})
    assert r.status_code == 400 and 'detach' in r.json()['details']
    assert 'Traceback' not in shop.log()  # the whole shared log: the other tests on it must leave none either


# Detaches shop.yaml's topic and job, which no other test on the shared server checks.
def test_detach_of_unknown_or_unowned_objects(shared_shop: LiveServer) -> None:
    shop = shared_shop
    r = admin(shop, 'POST', '/admin/detach', json={'kind': 'channel', 'name': 'nope'})
    assert r.status_code == 404
    r = admin(shop, 'POST', '/admin/detach', json={'kind': 'topic', 'name': 'SHOP.ORDERS'})
    assert r.status_code == 200 and r.json()['detached'] is True
    r = admin(shop, 'POST', '/admin/detach', json={'kind': 'topic', 'name': 'shop.orders'})
    assert r.status_code == 200 and r.json()['detached'] is False
    cli = run_cli(shop, 'objects', 'detach', 'job', 'shop.nightly')
    assert cli.returncode == 0 and 'shop.yaml' in cli.stdout, cli.stderr
    assert admin(shop, 'PATCH', '/admin/jobs/shop.nightly', json={'hours': 1}).status_code == 200
