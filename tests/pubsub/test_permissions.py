"""Pub/sub permissions: the pub=/sub= matrix, filtering of REST subscribers, the
``pubsub_permission`` object section, the admin API, and secrets kept out of logs and error bodies.

Everything but the last test runs in-process (a runtime per test on the database under test, the
falcon app through falcon's TestClient); the last one greps a real server's log.
"""

from __future__ import annotations

import base64
import itertools
import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
import requests
from sqlalchemy import select

from runtime.db.engine import make_engine
from runtime.db.models import BasicAuthDef, Subscription
from runtime.errors import ConfigError, InvalidPermission
from runtime.http.admin.permissions import PermissionsResource
from runtime.pubsub.permissions import PUB, SUB, Grant, Permissions, Rules, parse_grant, parse_lines
from runtime.pubsub.registry import SubInfo, TopicInfo
from runtime.pubsub.subscribers import KIND_PULL, pull
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.live_server import LiveServer
from tests.recorder import Recorder as Recording

# The matrix

#: (pub list, sub list, action, topic, the entry that allows it or None)
MATRIX = [
    (['orders.new'], [], PUB, 'orders.new', 'orders.new'),
    (['orders.new'], [], PUB, 'ORDERS.New', 'orders.new'),              # names compare case-insensitively
    (['orders.new'], [], SUB, 'orders.new', None),                      # pub gives no sub
    ([], ['orders.new'], PUB, 'orders.new', None),                      # and sub no pub
    (['orders.new'], [], PUB, 'orders.newer', None),                    # exact is exact
    ([], ['orders.*'], SUB, 'orders.new', 'orders.*'),
    ([], ['orders.*'], SUB, 'orders.new.emea', None),                   # * is one segment
    ([], ['orders.*'], SUB, 'orders', None),
    ([], ['orders.**'], SUB, 'orders', 'orders.**'),                    # ** is any depth, none included
    ([], ['orders.**'], SUB, 'orders.emea.new.urgent', 'orders.**'),
    ([], ['**'], SUB, '/zato/s/to/crm_x', '**'),
    (['inv*'], [], PUB, 'invoice', 'inv*'),                             # * inside a segment
    (['inv*'], [], PUB, 'inv.oice', None),
    (['/customer/*'], [], PUB, '/customer/new', '/customer/*'),
    (['/customer/*'], [], PUB, 'customer/new', None),                   # a /-rooted name is its own namespace
    (['a/b'], [], PUB, 'a.b', 'a/b'),                                   # . and / are the same separator
    (['**', 'orders.*', 'orders.new'], [], PUB, 'orders.new', 'orders.new'),  # exact names first
    (['orders.**', 'orders.*'], [], PUB, 'orders.new', 'orders.**'),   # then patterns in the order given
    (['orders.*', 'orders.**'], [], PUB, 'orders.new', 'orders.*'),
    ([], [], PUB, 'anything', None),                                    # no permissions: nothing
]


@pytest.mark.parametrize('pub, sub, action, topic, expected', MATRIX)
def test_permission_matrix(pub: list[str], sub: list[str], action: str, topic: str, expected: str | None) -> None:
    perms = Permissions()
    perms.replace_all([Grant('client', Rules(pub), Rules(sub))])
    assert perms.match('client', action, topic) == expected
    assert (perms.can_pub if action == PUB else perms.can_sub)('client', topic) is (expected is not None)
    assert perms.match('someone.else', action, topic) is None  # a definition without permissions


def test_services_bypass_permissions_and_rest_subscribers_need_sub() -> None:
    perms = Permissions()
    perms.replace_all([Grant('client', Rules([]), Rules(['orders.*']))])
    topic = TopicInfo(1, 'orders.new')
    secret = TopicInfo(2, 'payroll.run')
    service_sub = SubInfo(1, 'sk.1', 'payroll.**', 'service', service='payroll.handler')
    rest_sub = SubInfo(2, 'sk.2', '**', KIND_PULL, security='client')
    assert perms.sub_allowed(service_sub, secret)
    assert perms.sub_allowed(rest_sub, topic)
    assert not perms.sub_allowed(rest_sub, secret)


def test_zato_lines_and_lists_are_parsed_and_validated() -> None:
    assert parse_lines('pub=orders.*\n\n  sub = /customer/** \nSUB=a.b') == {PUB: ['orders.*'],
                                                                           SUB: ['/customer/**', 'a.b']}
    assert parse_grant({'pub': 'a.*\nb', 'sub': ['c'], 'patterns': 'sub=d'}) == (['a.*', 'b'], ['c', 'd'])
    for bad, named in ((lambda: parse_lines('publish=a'), 'line 1'), (lambda: parse_grant({'pub': 'a#b'}), "'a#b'"),
                       (lambda: parse_grant({'sub': [' x']}), 'whitespace'), (lambda: parse_grant({'pub': 5}), 'pub'),
                       (lambda: parse_grant({'sub': ['a**']}), "'**'"), (lambda: parse_grant({'patterns': 1}),
                                                                          'patterns')):
        with pytest.raises(InvalidPermission, match=re.escape(named)):
            bad()


# In-process runtimes

OBJECTS = '''
security:
  - name: erp.client
    username: erp
    password: erp-password-1
  - name: crm.client
    username: crm
    password: crm-password-2

pubsub_topic:
  - name: orders.public.new
  - name: orders.secret.new
  - name: orders.public.old

pubsub_permission:
  - security: erp.client
    pub: ['orders.**']
    sub: [orders.public.*]
  - security: crm.client
    patterns: |
      pub=crm.*
      sub=orders.secret.new
'''

SUBSCRIPTION = '''
pubsub_subscription:
  - security: erp.client
    delivery_type: pull
    topic_list: ['orders.**']
  - push_service: test.recorder
    topic_list: ['orders.**']
'''

class Recorder(Service):
    """Records every message it receives (on 'received' of the recorder make_rt binds it to)."""

    name = 'test.recorder'
    recorder: Recording

    def handle(self) -> None:
        self.recorder.add('received', self.request.payload)


@pytest.fixture
def make_rt(db_url: str, runtime_factory: Callable[..., TestRuntime], tmp_path: Path,
            recorder: Recording) -> Iterator[Callable[..., TestRuntime]]:
    """A started runtime whose object files hold text (db_url first: the database outlives the runtime)."""
    counter = itertools.count()

    def make(text: str) -> TestRuntime:
        base = tmp_path / f'rt-{next(counter)}'
        base.mkdir()
        settings = make_settings(base, db_url)
        settings.pubsub.poll_interval_secs = 0.02
        settings.pubsub.lease_renew_secs = 0.1
        objects = Path(settings.objects.dir)
        objects.mkdir(parents=True)
        (objects / 'objects.yaml').write_text(text)
        return runtime_factory(recorder.bind(Recorder), settings=settings)

    yield make


def reapply(rt: TestRuntime, text: str) -> None:
    """Rewrite the runtime's object file and apply it as the watcher does."""
    (Path(rt.settings.objects.dir) / 'objects.yaml').write_text(text)
    for key in set(rt.objects.apply()):
        rt.synchronizer.changed(key)


def sub_of(rt: TestRuntime, security: str) -> SubInfo:
    return next(s for s in rt.broker.registry.subs.values() if s.security == security)


def take(rt: TestRuntime, sub: SubInfo) -> list[str]:
    """Topics of what a pull hands over (auto ack)."""
    got = pull.take(rt.broker, [sub], 100, 10_000, None, rt.permissions.may_read)
    return [p.delivery.topic_name for p in got]


def test_a_pattern_subscription_gets_only_topics_its_definition_may_read(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(OBJECTS + SUBSCRIPTION)
    sub = sub_of(rt, 'erp.client')
    for topic in ('orders.public.new', 'orders.secret.new', 'orders.public.old'):
        rt.broker.publish(topic, {'topic': topic})
    # Filtered at publication: the forbidden topic's message never reached the queue.
    assert rt.catalog.queue_depth(sub.sub_key) == 2
    assert take(rt, sub) == ['orders.public.new', 'orders.public.old']
    # The service subscribed to the same pattern has no permissions at all and gets everything.
    wait_until(lambda: recorder.count('received') == 3, message='three deliveries to the service')
    assert sorted(r['topic'] for r in recorder['received']) == [
        'orders.public.new', 'orders.public.old', 'orders.secret.new']


def test_a_backlog_handed_to_a_pattern_subscription_is_filtered_when_pulled(
        make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(OBJECTS)
    for topic in ('orders.secret.new', 'orders.public.new'):
        rt.broker.publish(topic, {'topic': topic})  # no subscriber yet: the topics keep them
    sub = rt.catalog.subscribe('orders.**', KIND_PULL, security='erp.client')
    assert rt.catalog.queue_depth(sub.sub_key) == 2  # the hand-over knows no permissions ...
    assert take(rt, sub) == ['orders.public.new']  # ... the pull does
    dead = rt.catalog.dead_letters(sub.sub_key)
    assert [(d['reason'], json.loads(d['data'])) for d in dead] == [('no_permission', {'topic': 'orders.secret.new'})]
    assert rt.catalog.queue_depth(sub.sub_key) == 0


def test_permission_changes_in_the_files_take_effect_and_withdrawn_ones_stop_delivery(
        make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(OBJECTS + SUBSCRIPTION)
    sub = sub_of(rt, 'erp.client')
    assert rt.permissions.match('crm.client', SUB, 'orders.secret.new') == 'orders.secret.new'
    rt.broker.publish('orders.public.new', 1)
    assert not rt.permissions.can_sub('erp.client', 'orders.secret.new')

    # sub widened to orders.**, and the other definition's permissions removed from the file.
    reapply(rt, OBJECTS.replace('sub: [orders.public.*]', "sub: ['orders.**']").split('  - security: crm.client')[0]
            + SUBSCRIPTION)
    assert rt.permissions.can_sub('erp.client', 'orders.secret.new')
    assert rt.permissions.get('crm.client') is None
    rt.broker.publish('orders.secret.new', 2)
    assert rt.catalog.queue_depth(sub.sub_key) == 2

    # Withdrawn again: what was queued meanwhile is not handed over.
    reapply(rt, OBJECTS + SUBSCRIPTION)
    assert take(rt, sub) == ['orders.public.new']
    assert [d['reason'] for d in rt.catalog.dead_letters(sub.sub_key)] == ['no_permission']


@pytest.mark.parametrize('section, named', [
    ("  - security: nobody.here\n    pub: [a]\n", "'nobody.here' does not exist"),
    ("  - security: other\n    pub: ['a#b']\n", "contains '#'"),
    ("  - security: erp.client\n    sub: [a]\n", 'declared twice'),
    ("  - security: other\n    publish: [a]\n", "unknown key(s): publish"),
    ("  - pub: [a]\n", "'security' is required"),
])
def test_a_broken_permission_section_is_rejected_naming_the_problem(
        make_rt: Callable[..., TestRuntime], section: str, named: str) -> None:
    rt = make_rt(OBJECTS)
    with pytest.raises(ConfigError, match=r'objects\.yaml \[pubsub_permission\]') as info:
        reapply(rt, OBJECTS + section)
    assert named in str(info.value)
    # The previous permissions stay in force.
    assert rt.permissions.can_pub('erp.client', 'orders.x')


# The admin API, in-process

ADMIN = {'Authorization': 'Basic ' + base64.b64encode(b'admin:test-admin-password').decode()}


def test_admin_api_reads_replaces_and_removes_permissions(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(OBJECTS)
    client = falcon.testing.TestClient(rt.make_app())
    path = '/admin/security/erp.client/permissions'

    got = client.simulate_get(path, headers=ADMIN)
    assert got.status_code == 200
    assert got.json['permissions'] == {'security': 'erp.client', 'pub': ['orders.**'], 'sub': ['orders.public.*'],
                                       'origin': 'config'}

    # Declared in an object file: refused unless detached from it.
    refused = client.simulate_put(path, headers=ADMIN, json={'pub': ['billing.*']})
    assert refused.status_code == 409 and 'objects.yaml' in refused.json['details']
    put = client.simulate_put(path, headers=ADMIN, params={'detach': 'true'},
                              json={'pub': ['billing.*'], 'patterns': 'sub=billing.**'})
    assert put.status_code == 200, put.text
    assert put.json['permissions'] == {'security': 'erp.client', 'pub': ['billing.*'], 'sub': ['billing.**'],
                                       'origin': 'api'}
    assert rt.permissions.can_pub('erp.client', 'billing.x') and not rt.permissions.can_pub('erp.client', 'orders.x')

    assert client.simulate_delete(path, headers=ADMIN).json == {'is_ok': True, 'deleted': 'erp.client'}
    assert rt.permissions.get('erp.client') is None
    assert client.simulate_get(path, headers=ADMIN).json['permissions'] == {
        'security': 'erp.client', 'pub': [], 'sub': [], 'origin': None}
    assert client.simulate_delete(path, headers=ADMIN).status_code == 404

    bad = client.simulate_put(path, headers=ADMIN, json={'pub': ['fine', ' not fine']})
    assert bad.status_code == 400 and 'whitespace' in bad.json['details']
    assert client.simulate_put(path, headers=ADMIN, json={'push': []}).status_code == 400
    assert client.simulate_put(path, headers=ADMIN, json=['pub']).status_code == 400
    missing = client.simulate_get('/admin/security/nobody/permissions', headers=ADMIN)
    assert missing.status_code == 404 and 'nobody' in missing.json['details']
    assert client.simulate_put('/admin/security/nobody/permissions', headers=ADMIN, json={}).status_code == 404
    assert client.simulate_get('/admin/security/no%00body/permissions', headers=ADMIN).status_code == 400
    assert client.simulate_get(path).status_code == 401
    for method in ('get', 'put', 'delete'):
        operation = PermissionsResource.openapi[method]
        assert operation['summary'] and operation['responses']['200']


# Secrets, in a real server's log

SECRET_OBJECTS = '''
security:
  - name: alice.def
    username: alice
    password: alice-Secret-Pw-91
  - name: bob.def
    username: bob
    password: bob-Secret-Pw-92

pubsub_topic:
  - name: secret.news

pubsub_permission:
  - security: alice.def
    pub: [secret.news]
    sub: [secret.news]
  - security: bob.def
    pub: [secret.news]
    sub: [secret.news]
'''


def test_no_password_hash_or_sub_key_appears_in_a_log_line_or_another_callers_answer(
        server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(extra_config='[logging]\nlevel = "DEBUG"\n')
    server.write_objects('objects.yaml', SECRET_OBJECTS)
    server.start()
    alice, bob = ('alice', 'alice-Secret-Pw-91'), ('bob', 'bob-Secret-Pw-92')
    bodies: list[str] = []

    def call(path: str, body: Any = None, auth: Any = alice, raw: str | None = None) -> requests.Response:
        r = server.request('POST', path, data=raw if raw is not None else json.dumps(body), auth=auth,
                           headers={'Content-Type': 'application/json'})
        bodies.append(r.text)
        return r

    alice_key = call('/pubsub/subscribe/topic/secret.news').json()['sub_key']
    bob_key = call('/pubsub/subscribe/topic/secret.news', auth=bob).json()['sub_key']
    assert call('/pubsub/topic/secret.news', {'data': 'hello'}, auth=bob).status_code == 200
    # Bob tries Alice's sub_key everywhere: answered like a key that does not exist, never echoed.
    bob_bodies_from = len(bodies)
    assert call('/pubsub/messages/get', {'sub_key': alice_key}, auth=bob).status_code == 404
    assert call('/pubsub/messages/ack', {'sub_key': alice_key, 'ack_ids': ['ack.x']}, auth=bob).status_code == 404
    assert call('/pubsub/unsubscribe/topic/secret.news', {'sub_key': alice_key}, auth=bob).status_code == 404
    assert call('/pubsub/messages/get', raw='{"sub_key": "' + alice_key + '", broken', auth=bob).status_code == 400
    assert call('/pubsub/topic/secret.news', raw='{"data": "' + alice_key + '"', auth=bob).status_code == 400
    bob_bodies = bodies[bob_bodies_from:]
    # Wrong passwords (one of them another user's), and a storage error's answer.
    assert call('/pubsub/topic/secret.news', {'data': 1}, auth=('alice', 'bob-Secret-Pw-92')).status_code == 401
    assert call('/pubsub/topic/secret.news', {'data': 1}, auth=('mallory', 'alice-Secret-Pw-91')).status_code == 401
    assert call('/pubsub/messages/get', {'sub_key': alice_key}).json()['message_count'] == 1
    assert call('/pubsub/messages/get', {'ack': 'manual'}, auth=bob).json()['message_count'] == 1

    engine = make_engine(server.db_url, pool_size=1)
    try:
        with engine.connect() as conn:
            hashes = conn.execute(select(BasicAuthDef.password_hash)).scalars().all()
            sub_keys = conn.execute(select(Subscription.sub_key)).scalars().all()
    finally:
        engine.dispose()
    assert set(sub_keys) >= {alice_key, bob_key}
    server.stop()
    log = server.log()
    assert 'pubsub' in log or 'runtime started' in log  # the log is not empty
    secrets = ['alice-Secret-Pw-91', 'bob-Secret-Pw-92', *sub_keys, *hashes,
               base64.b64encode(b'alice:alice-Secret-Pw-91').decode()]
    secrets += [part for h in hashes for part in h.split('$') if len(part) >= 16]  # salts and digests alone
    for secret in secrets:
        assert secret not in log, 'a secret is in the server log'
        assert not any(secret in b for b in bodies if secret not in (alice_key, bob_key)), 'a secret in an answer'
    assert not any(alice_key in b for b in bob_bodies), "Alice's sub_key in an answer to Bob"


def test_pushed_backlog_is_filtered_by_sub_permission(runtime_factory):
    """A backlog handed over to a REST subscriber is checked again before it is delivered."""
    from runtime.pubsub.message import Delivery
    from runtime.pubsub.subscribers import Context
    from runtime.pubsub.subscribers.service import prepare

    rt = runtime_factory()
    topic = rt.catalog.create_topic('perm.backlog')
    sub = rt.catalog.subscribe('perm.**', 'pull', service='x')
    d = Delivery(entry_id=1, sub_id=sub.id, delivery_count=1, next_attempt_at=0.0, last_error='', recv_time=0.0,
                 message_id=1, msg_id='m', topic_name=topic.name, data='"x"', mime_type='application/json',
                 priority=5, pub_time=0.0, expiration_time=9e9, publisher='', correl_id=None, in_reply_to=None,
                 ext_client_id=None, has_gd=True, size=3)
    def run_service(name: str, data: object, channel: str, raw_request: object) -> object:
        raise AssertionError('no hook service to run')

    denied = Context(rt.broker.registry.topic, lambda s, t: False)
    assert prepare(denied, sub, d, run_service) is None
    allowed = Context(rt.broker.registry.topic, lambda s, t: True)
    assert prepare(allowed, sub, d, run_service)['data'] == 'x'
