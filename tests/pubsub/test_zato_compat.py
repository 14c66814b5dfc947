"""Drop-in for Zato users: Zato's enmasse files, REST pub/sub clients and service topic names work unchanged.

- An enmasse file with the keys Zato 4.1's importers accept loads, keys Conduit does not use listed
  in exactly one warning; a real typo is an error naming the file, the object and the key.
- The REST pub/sub API answers with Zato 4.1's status codes and texts by default, and with the
  stricter HTTP codes under ``pubsub.rest_status_codes = "http"`` (real servers: one per backend
  shared by the tests of the default, each with objects of its own; a fresh one for "http").
- A publisher's pub_time comes back verbatim, correl_id defaults to the request's cid, msg_ids start
  with ``zpsm``, and ``zato.s.to.<service>`` is the service's topic.
(One message per POST with the flat body, to a real receiver: tests/pubsub/test_push.py.)
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path
from typing import Any

import falcon.testing
import pytest
from sqlalchemy import select

from runtime.config import Settings, load_settings
from runtime.db.models import RestChannel
from runtime.errors import ConfigError
from runtime.objects import zato_keys
from runtime.pubsub.registry import TOPIC_ATTRIBUTES
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
from runtime.scheduler.jobs import JobDefinition
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.live_server import LiveServer
from tests.pubsub.test_rest_api import Client, Names, error, objects, ok, start_with_objects, take_names

# An enmasse file in Zato 4.1's keys (and a few of 3.x's exports), as a migrating user has it.
ENMASSE = '''
security:
  - name: crm.basic
    type: basic_auth
    username: crm
    password: crm-pw-5
    realm: CRM
    is_active: true
    description: The CRM's account
  - name: erp.basic
    type: basic_auth
    username: erp
    password: erp-pw-6

groups:
  - name: crm.group
    members: [crm.basic]

channel_rest:
  - name: crm.api
    service: test.inbox
    url_path: /api/crm
    method: POST
    data_format: json
    security: crm.basic
    content_type: application/json
    content_encoding: gzip
    timeout: 30
    groups: [crm.group]
    rate_limiting:
      - cidr_list: [10.0.0.0/8]
        time_range:
          - is_all_day: true
            rate: 100
            unit: minute

outgoing_rest:
  - name: erp.hook
    host: http://127.0.0.1:9
    url_path: /hook
    data_format: json
    timeout: 60
    ping_method: GET
    pool_size: 20
    tls_verify: true
    content_type: application/json

pubsub_topic:
  - name: orders.new
    description: New orders from the CRM
    is_audit_log_active: true
  - name: orders.paid
    description: Paid orders
    hook_service_name: test.inbox
    on_no_subs_pub: drop

pubsub_permission:
  - security: crm.basic
    pub: [orders.*]
    sub: [orders.new]
  - security: erp.basic
    sub: [orders.*]

pubsub_subscription:
  - security: erp.basic
    delivery_type: pull
    topic_list: [orders.new]
    is_delivery_active: true
    max_retry_time: 3600
  - security: erp.basic
    delivery_type: push
    push_type: rest
    rest_push_endpoint: erp.hook
    topic_list: [orders.paid]
    is_delivery_active: false
    max_retry_time: 60
  - security: crm.basic
    delivery_type: push
    push_type: service
    push_service_name: test.inbox
    topic_list: [orders.new]
    out_http_method: POST
    delivery_max_retry: 7

scheduler:
  - name: crm.sync
    service: test.inbox
    job_type: interval_based
    start_date: '2026-01-01 00:00:00'
    minutes: 10
    is_active: false
    extra: some text
'''

#: Every key the file above carries that Conduit has no use for, as the warning lists them.
IGNORED = ('[channel_rest] content_encoding, content_type, groups, rate_limiting, timeout; '
           '[outgoing_rest] content_type, ping_method, pool_size, tls_verify; '
           '[pubsub_subscription] max_retry_time; '
           '[pubsub_topic] description, is_audit_log_active; '
           '[security] description; sections groups')


class Inbox(Service):
    """Remembers what it gets (a service subscriber, a hook, a channel's and a job's target)."""

    name = 'test.inbox'
    received: list[dict[str, Any]] = []

    def handle(self) -> None:
        if self.channel == 'pubsub':
            Inbox.received.append(self.request.raw_request)
        self.response.payload = {'action': 'deliver'} if self.channel == 'pubsub-hook' else {'ok': True}


def _settings(tmp_path: Path, db_url: str, objects: str) -> Settings:
    settings = make_settings(tmp_path / 'rt', db_url)
    directory = settings.path(settings.objects.dir)
    directory.mkdir(parents=True)
    (directory / 'enmasse.yaml').write_text(objects, encoding='utf-8')
    return settings


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and 'Zato' in r.getMessage()]


# enmasse files


def test_a_zato_enmasse_file_loads_with_one_warning_listing_the_keys_conduit_ignores(
        tmp_path: Path, db_url: str, runtime_factory: Callable[..., TestRuntime],
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    Inbox.received.clear()
    rt = runtime_factory(Inbox, settings=_settings(tmp_path, db_url, ENMASSE))
    assert _warnings(caplog) == [f'ignored Zato keys: {IGNORED} (Conduit does not use them)']

    # Keys Conduit implements are honoured, under Zato's names too.
    registry = rt.broker.registry
    paid = registry.topic('orders.paid')
    assert paid is not None and (paid.hook_service, paid.on_no_subs) == ('test.inbox', 'drop')
    by_kind = {s.kind: s for s in registry.subs.values()}
    assert set(by_kind) == {'pull', 'rest_push', 'service'}
    assert by_kind['pull'].is_active and not by_kind['rest_push'].is_active  # is_delivery_active: false
    service = by_kind['service']
    assert (service.service, service.pattern, service.options.max_attempts) == ('test.inbox', 'orders.new', 7)
    assert by_kind['rest_push'].push_url == 'http://127.0.0.1:9/hook'
    with rt.engine.connect() as conn:
        assert conn.execute(select(RestChannel.is_active, RestChannel.security)).all() == [(True, 'crm.basic')]
    assert rt.job_admin.get('crm.sync')['is_active'] is False

    rt.broker.publish('orders.new', {'order': 1}, publisher='crm')
    wait_until(lambda: Inbox.received, 10, message='the service subscriber got the message')
    assert Inbox.received.pop()['data'] == {'order': 1}

    # Applying the same files again warns no more; a changed file is listed once again.
    assert rt.objects.apply() == []
    path = Path(rt.settings.path(rt.settings.objects.dir)) / 'enmasse.yaml'
    path.write_text(ENMASSE.replace('New orders from the CRM', 'New orders'), encoding='utf-8')
    rt.objects.apply()
    assert len(_warnings(caplog)) == 2


@pytest.mark.parametrize(('old', 'new', 'named'), [
    ('    is_audit_log_active: true', '    is_audit_log_activ: true', "[pubsub_topic] 'orders.new'"),
    ('    content_encoding: gzip', '    content_encodng: gzip', "[channel_rest] 'crm.api'"),
    ('    pool_size: 20', '    pool_sise: 20', "[outgoing_rest] 'erp.hook'"),
    ('    description: The CRM', '    descrption: The CRM', "[security] 'crm.basic'"),
    ('    max_retry_time: 3600', '    max_retry_tme: 3600', "[pubsub_subscription] 'erp.basic'"),
    ('    extra: some text', '    extras: some text', "[scheduler] 'crm.sync'"),
])
def test_a_key_neither_conduit_nor_zato_knows_is_an_error_naming_file_object_and_key(
        tmp_path: Path, db_url: str, runtime_factory: Callable[..., TestRuntime], old: str, new: str,
        named: str) -> None:
    rt = runtime_factory(Inbox, settings=_settings(tmp_path, db_url, ENMASSE))
    path = Path(rt.settings.path(rt.settings.objects.dir)) / 'enmasse.yaml'
    assert old in ENMASSE
    path.write_text(ENMASSE.replace(old, new, 1), encoding='utf-8')
    with pytest.raises(ConfigError) as e:
        rt.objects.apply()
    key = new.split(':')[0].strip()
    assert str(path) in str(e.value) and named in str(e.value) and repr(key) in str(e.value), str(e.value)


def test_a_channel_zato_protects_by_groups_alone_is_loaded_closed(
        tmp_path: Path, db_url: str, runtime_factory: Callable[..., TestRuntime],
        caplog: pytest.LogCaptureFixture) -> None:
    rt = runtime_factory(Inbox, settings=_settings(tmp_path, db_url, ENMASSE.replace(
        '    security: crm.basic\n    content_type', '    content_type')))
    with rt.engine.connect() as conn:
        assert conn.execute(select(RestChannel.is_active, RestChannel.security)).all() == [(False, '')]
    assert any("[channel_rest] 'crm.api': loaded inactive" in w for w in _warnings(caplog))
    client = falcon.testing.TestClient(rt.make_app())
    assert client.simulate_post('/api/crm', json={}).status_code != 200


def test_zato_names_of_a_key_and_conduits_together_are_refused(
        tmp_path: Path, db_url: str, runtime_factory: Callable[..., TestRuntime]) -> None:
    rt = runtime_factory(Inbox, settings=_settings(tmp_path, db_url, ENMASSE))
    path = Path(rt.settings.path(rt.settings.objects.dir)) / 'enmasse.yaml'
    for old, new, message in (
            ('    delivery_max_retry: 7', '    delivery_max_retry: 7\n    max_attempts: 7', "'max_attempts' or "),
            ('    push_type: service', '    push_type: rest', 'push_type is rest but rest_push_endpoint'),
            ('    push_type: rest', '    push_type: email', "push_type must be 'rest' or 'service'")):
        path.write_text(ENMASSE.replace(old, new, 1), encoding='utf-8')
        with pytest.raises(ConfigError, match=message):
            rt.objects.apply()


# REST status codes


@pytest.fixture(scope='module')
def zato_shared(module_server_factory: Callable[..., LiveServer],
                request: pytest.FixtureRequest) -> tuple[LiveServer, list[Names]]:
    """A server on the default (Zato) status codes shared by the module, and the objects no test has taken yet.

    The objects are those of tests/pubsub/test_rest_api.py, named for each test.
    """
    server = module_server_factory()
    return server, start_with_objects(server, request)


@pytest.fixture
def zato_api(zato_shared: tuple[LiveServer, list[Names]]) -> LiveServer:
    """The shared server."""
    return zato_shared[0]


@pytest.fixture
def names(zato_shared: tuple[LiveServer, list[Names]]) -> Names:
    """This test's objects, in force on the shared server."""
    return take_names(*zato_shared)


def test_zato_status_codes_and_texts_are_the_default(zato_api: LiveServer, names: Names) -> None:
    publisher, subscriber = Client(zato_api, names.publisher), Client(zato_api, names.subscriber)
    nobody = Client(zato_api, names.nobody)
    created, closed = names.topic('orders.created'), names.topic('orders.closed')

    # Credentials first: missing, then wrong.
    assert error(Client(zato_api, None).publish('%20bad', None), 401)['details'] == 'Authentication required'
    assert error(Client(zato_api, (names.publisher[0], 'nope')).publish('%20bad', None), 401)['details'] == \
        'Invalid credentials'
    # Then the topic name (400 with the reason), the permission (401), the topic's state (403), the data (400).
    error(nobody.publish('%20bad', None), 400, 'whitespace')
    for r in (nobody.publish(closed, None), nobody.publish(created, {'data': 1}),
              publisher.subscribe(created)):
        body = error(r, 401)
        assert body['details'] == 'Permission denied'
        assert r.headers['WWW-Authenticate'] == 'Basic realm="Conduit pub/sub"'
    assert error(publisher.publish(closed, None), 403)['details'] == f'Topic {closed} is inactive'
    error(publisher.publish(created, {'priority': 1}), 400, 'data')

    # Pulling (or acking) with no subscription at all; unsubscribing when not subscribed.
    assert error(subscriber.get(), 401)['details'] == 'No subscription found for user'
    assert error(subscriber.ack(['ack.1']), 401)['details'] == 'No subscription found for user'
    assert ok(subscriber.post(f'/pubsub/unsubscribe/topic/{created}'))['unsubscribed'] == 0
    error(subscriber.get(sub_key='sk.' + '0' * 40), 404, 'subscription not found')  # a sub_key of no one

    # A denied permission is no failed sign-in: many of them do not get the client throttled.
    for _ in range(15):
        error(nobody.publish(created, {'data': 1}), 401)
    assert ok(publisher.publish(created, {'data': 'still fine'}))
    assert f"security definition '{names.nobody_def}' has no 'pub' permission for topic '{created}'" in zato_api.log()


def test_http_status_codes_under_the_setting(server_factory: Callable[..., LiveServer]) -> None:
    # A fresh server: the status codes are its configuration, read at the start.
    server = server_factory(extra_config='[pubsub]\nrest_status_codes = "http"\n')
    names = Names()
    server.write_objects('objects.yaml', objects(names))
    server.start()
    publisher, subscriber = Client(server, names.publisher), Client(server, names.subscriber)
    nobody = Client(server, names.nobody)
    created, closed = names.topic('orders.created'), names.topic('orders.closed')
    error(nobody.publish(created, {'data': 1}), 403, f"'{names.nobody_def}'", "'pub' permission", f"'{created}'")
    error(publisher.subscribe(created), 403, "'sub' permission")
    error(publisher.publish(closed, {'data': 1}), 403, f"topic '{closed}' is inactive")
    error(subscriber.get(), 404, 'no subscription')
    error(subscriber.post(f'/pubsub/unsubscribe/topic/{created}'), 404, 'subscription not found')


def test_an_unknown_rest_status_codes_value_is_refused(tmp_path: Path) -> None:
    config = tmp_path / 'server.toml'
    config.write_text('[pubsub]\nrest_status_codes = "strict"\n', encoding='utf-8')
    with pytest.raises(ConfigError, match="rest_status_codes.*zato, http.*'strict'"):
        load_settings(config, env={})
    assert load_settings(config, env={'CONDUIT_PUBSUB_REST_STATUS_CODES': 'http'}).pubsub.rest_status_codes == 'http'


# Messages


def test_msg_ids_start_with_zpsm(zato_api: LiveServer, names: Names) -> None:
    publisher = Client(zato_api, names.publisher)
    sent = [ok(publisher.publish(names.topic('orders.created'), {'data': n})) for n in range(3)]
    assert all(s['msg_id'].startswith('zpsm') and len(s['msg_id']) == 28 for s in sent)
    assert len({s['msg_id'] for s in sent}) == 3


def test_pub_time_is_returned_verbatim_as_pub_time_iso(zato_api: LiveServer, names: Names) -> None:
    publisher, subscriber = Client(zato_api, names.publisher), Client(zato_api, names.subscriber)
    created = names.topic('orders.created')
    sub_key = ok(subscriber.subscribe(created))['sub_key']
    stamps = ['2026-01-01T10:00:00+00:00', '2025-12-31T23:59:59.123456Z', '2026-03-01 08:00:00']
    sent = [ok(publisher.publish(created, {'data': n, 'pub_time': stamp}))
            for n, stamp in enumerate(stamps)]
    sent.append(ok(publisher.publish(created, {'data': 3, 'pub_time': 1767261600})))
    sent.append(ok(publisher.publish(created, {'data': 4})))

    metas = [m['meta'] for m in ok(subscriber.get(sub_key=sub_key))['messages']]
    assert [m['msg_id'] for m in metas] == [s['msg_id'] for s in sent]  # publication order: the server's clock
    assert [m['pub_time_iso'] for m in metas[:3]] == stamps  # verbatim, as Zato returns it
    assert metas[3]['pub_time_iso'] == '2026-01-01T10:00:00+00:00'  # a Unix time, as ISO 8601
    assert metas[4]['pub_time_iso'] > '2026-'  # none sent: the server's time
    for meta in metas:
        assert meta['time_since_pub'].startswith('0:00:')  # the server's clock, not the publisher's
        assert meta['expiration'] == 31536000

    for bad, reason in (('yesterday', 'ISO 8601'), ('2026-01-01T10:00:00' + '0' * 60, 'at most 64'),
                        (True, 'ISO 8601'), ({'at': 1}, 'ISO 8601'), (1e300, 'Unix time')):
        error(publisher.publish(created, {'data': 1, 'pub_time': bad}), 400, 'pub_time', reason)


def test_correl_id_defaults_to_the_cid_of_the_publishing_request(zato_api: LiveServer, names: Names) -> None:
    publisher, subscriber = Client(zato_api, names.publisher), Client(zato_api, names.subscriber)
    created = names.topic('orders.created')
    sub_key = ok(subscriber.subscribe(created))['sub_key']
    sent = [ok(publisher.publish(created, {'data': 0})),
            ok(publisher.publish(created, {'data': 1, 'correl_id': 'mine'})),
            ok(publisher.publish(created, {'data': 2, 'correl_id': ''}))]
    metas = [m['meta'] for m in ok(subscriber.get(sub_key=sub_key))['messages']]
    assert [m['correl_id'] for m in metas] == [sent[0]['cid'], 'mine', sent[2]['cid']]
    assert len({s['cid'] for s in sent}) == 3


class Echo(Service):
    """A service whose topic is published to under both of its names."""

    name = 'test.echo.in'
    received: list[dict[str, Any]] = []

    def handle(self) -> None:
        Echo.received.append(self.request.raw_request)


ALIAS_OBJECTS = '''
security:
  - name: zato41.client
    username: z41
    password: z41-pw-7
  - name: zato3.client
    username: z3
    password: z3-pw-8
pubsub_permission:
  - security: zato41.client
    pub: ['zato.s.to.**']
  - security: zato3.client
    pub: ['/zato/s/to/*']
'''


def test_zato_41_service_topic_names_are_an_alias_of_the_service_topic(
        tmp_path: Path, db_url: str, runtime_factory: Callable[..., TestRuntime]) -> None:
    Echo.received.clear()
    rt = runtime_factory(Echo, settings=_settings(tmp_path, db_url, ALIAS_OBJECTS))
    client = falcon.testing.TestClient(rt.make_app())

    def publish(topic: str, data: Any, user: str, password: str) -> falcon.testing.Result:
        token = base64.b64encode(f'{user}:{password}'.encode()).decode()
        return client.simulate_post(f'/pubsub/topic/{topic}', json={'data': data},
                                    headers={'Authorization': f'Basic {token}'})

    # First use, by the 4.1 name: the service's topic is made and the service gets the message.
    r = publish('zato.s.to.test.echo.in', 'by 4.1 name', 'z41', 'z41-pw-7')
    assert r.status_code == 200, r.text
    names = [t.name for t in rt.broker.registry.topics.values()]
    assert '/zato/s/to/test_echo_in' in names and not [n for n in names if n.startswith('zato.')]
    r = publish('/zato/s/to/test_echo_in', 'by 3.x name', 'z3', 'z3-pw-8')
    assert r.status_code == 200, r.text
    rt.broker.publish('ZATO.S.TO.test.echo.in', 'in-process, by 4.1 name')
    wait_until(lambda: len(Echo.received) == 3, 10, message='three messages for the service')
    assert [(m['data'], m['topic_name']) for m in Echo.received] == [
        ('by 4.1 name', '/zato/s/to/test_echo_in'), ('by 3.x name', '/zato/s/to/test_echo_in'),
        ('in-process, by 4.1 name', '/zato/s/to/test_echo_in')]

    # A permission for either name grants the topic; nothing else is granted by it.
    assert publish('zato.s.to.test.echo.in', 'x', 'z3', 'z3-pw-8').status_code == 200
    assert publish('zato.s.to.no.such.service', 'x', 'z41', 'z41-pw-7').status_code == 404
    denied = publish('orders.created', 'x', 'z41', 'z41-pw-7')
    assert (denied.status_code, denied.json['details']) == (401, 'Permission denied')



def test_no_key_conduit_implements_is_in_the_ignored_lists() -> None:
    # An implemented key left in IGNORED_KEYS would be dropped before its handler saw it.
    implemented = {
        'pubsub_topic': set(TOPIC_ATTRIBUTES) | {'name'},
        'pubsub_subscription': set(SUBSCRIBER_KINDS.options.names()) | {
            'name', 'service', 'push_service', 'security', 'topic_list', 'delivery_type', 'is_active',
            'push_rest_endpoint', 'rest_push_endpoint'},
        'pubsub_permission': {'security', 'pub', 'sub', 'patterns'},
        'scheduler': {f.name for f in fields(JobDefinition)},
        **{section: set(keys) for section, keys in zato_keys.CONDUIT_KEYS.items()},
    }
    for section, ignored in zato_keys.IGNORED_KEYS.items():
        assert not ignored & implemented[section], section
    for section, renamed in zato_keys.RENAMED_KEYS.items():
        assert set(renamed.values()) <= implemented[section] and not set(renamed) & implemented[section]
