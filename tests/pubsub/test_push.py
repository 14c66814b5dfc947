"""REST push subscribers: messages POSTed to a real HTTP receiver, on SQLite and PostgreSQL.

By default each message is one request with Zato 4.1's flat body; ``push_batch`` and
``push_format: envelope`` give batches of ``{data, meta}`` items.

The receiver is a gevent WSGI server in the test process, on a free loopback port; it is "down"
until started (connections refused), and answers every request with its current ``status``.
Delivery attempts are recorded by a DeliveryHook (``Attempts``), so that the spacing of attempts
is measured whether or not the receiver saw them. Waits are tenths of seconds: the spacing checks
allow for the ±20 % jitter of ``runtime.pubsub.retry`` and only bound the waits from above where
that tells a socket-level wait from a non-socket one.
"""

from __future__ import annotations

import base64
import errno
import itertools
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import gevent
import pytest
import requests
import urllib3.exceptions
from gevent.pywsgi import WSGIServer
from sqlalchemy import func, select

from runtime.config import Settings
from runtime.db.models import Message, Subscription
from runtime.errors import ConfigError, PushFailed, PushUnreachable
from runtime.pubsub.broker import lease_name
from runtime.pubsub.delivery import DeliveryLoop
from runtime.pubsub.hooks import DeliveryHook
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.retry import JITTER, is_socket_error
from runtime.pubsub.statements import Delivery
from runtime.pubsub.subscribers.rest_push import RestPushOptions
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.live_server import free_port

#: Broker settings of every runtime here: quick lease renewal and polling; waits set per test.
FAST = {'wait_non_sock_err': 0.05, 'wait_sock_err': 0.05, 'max_wait_secs': 10.0, 'lease_renew_secs': 0.1,
        'poll_interval_secs': 0.02}

TIMEOUT = 30  # how long a condition may take under load; met conditions return at once

#: Scheduling slack allowed on top of a wait (loop wake-up, database round trips, HTTP).
SLACK_SECS = 0.35

PASSWORD = 'pw-9f1c0e7d-never-logged'


# The receiver


@dataclass
class Received:
    """One request the receiver got, and the status it answered."""

    at: float
    method: str
    path: str
    authorization: str | None
    body: Any
    status: int
    content_type: str | None = None


class Receiver:
    """A real HTTP endpoint on a free loopback port: down until started, then answering with status."""

    def __init__(self) -> None:
        self.port = free_port()
        self.status = 200
        self.delay_secs = 0.0
        self.requests: list[Received] = []
        self._server: WSGIServer | None = None

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.port}/hook'

    def start(self, status: int = 200) -> None:
        self.status = status
        if self._server is None:
            self._server = WSGIServer(('127.0.0.1', self.port), self._app, log=None, error_log=None)
            self._server.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(timeout=0.5)
            self._server = None

    def bodies(self, status: int = 200) -> list[Any]:
        return [r.body for r in self.requests if r.status == status]

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        body = environ['wsgi.input'].read()
        status = self.status
        self.requests.append(Received(time.monotonic(), environ['REQUEST_METHOD'], environ['PATH_INFO'],
                                      environ.get('HTTP_AUTHORIZATION'), json.loads(body), status,
                                      environ.get('CONTENT_TYPE')))
        if self.delay_secs:
            gevent.sleep(self.delay_secs)
        start_response(f'{status} {HTTPStatus(status).phrase}', [('Content-Type', 'application/json')])
        return [b'{}']


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


# Recording attempts


@dataclass
class Attempt:
    at: float
    msg_id: str
    ok: bool
    error: BaseException | None


class Attempts(DeliveryHook):
    """Every delivery attempt the broker makes, with its outcome."""

    def __init__(self) -> None:
        self.seen: list[Attempt] = []

    def after_deliver(self, sub: SubInfo, delivery: Delivery, ok: bool, error: BaseException | None,
                      duration_secs: float) -> None:
        self.seen.append(Attempt(time.monotonic(), delivery.msg_id, ok, error))


# Runtimes


@pytest.fixture
def settings_factory(db_url: str, tmp_path: Path) -> Callable[..., Settings]:
    """Settings on the database under test, each runtime with a base directory of its own."""
    counter = itertools.count()

    def make(**pubsub: Any) -> Settings:
        base = tmp_path / f'rt{next(counter)}'
        base.mkdir()
        settings = make_settings(base, db_url)
        for key, value in {**FAST, **pubsub}.items():
            assert hasattr(settings.pubsub, key), key
            setattr(settings.pubsub, key, value)
        return settings

    return make


@pytest.fixture
def make_rt(settings_factory: Callable[..., Settings],
            runtime_factory: Callable[..., TestRuntime]) -> Callable[..., TestRuntime]:
    """A started runtime (pubsub settings as keyword arguments); the database outlives it."""

    def make(*services: type[Service], settings: Settings | None = None, **pubsub: Any) -> TestRuntime:
        return runtime_factory(*services, settings=settings or settings_factory(**pubsub))

    return make


def push_subscription(rt: TestRuntime, topic: str, url: str, paused: bool = False, **options: Any) -> SubInfo:
    """A new topic with a REST push subscriber."""
    rt.catalog.create_topic(topic)
    sub = rt.catalog.subscribe(topic, 'rest_push', push_url=url, options=options or None)
    if paused:
        rt.catalog.set_active(sub.sub_key, False)
    return sub


def gaps(attempts: list[Attempt]) -> list[float]:
    return [b.at - a.at for a, b in itertools.pairwise(attempts)]


# Retries and the end of them


def test_down_then_500_then_back_delivers_once(make_rt: Callable[..., TestRuntime], receiver: Receiver) -> None:
    sock, non_sock = 0.4, 0.1
    rt = make_rt(wait_sock_err=sock, wait_non_sock_err=non_sock)
    attempts = Attempts()
    rt.broker.hooks.add(attempts)
    sub = push_subscription(rt, 'push.orders', receiver.url)
    msg_id = rt.broker.publish('push.orders', {'order': 1})

    # Down: connection refused, a socket-level error.
    wait_until(lambda: len(attempts.seen) >= 2, TIMEOUT, message='two attempts while down')
    receiver.start(status=500)
    wait_until(lambda: sum(isinstance(a.error, PushFailed) and not isinstance(a.error, PushUnreachable)
                           for a in attempts.seen) >= 2, TIMEOUT, message='two attempts answered 500')
    receiver.status = 200
    wait_until(lambda: any(a.ok for a in attempts.seen), TIMEOUT, message='delivery')

    *failed, delivered = attempts.seen
    refused = [a for a in failed if isinstance(a.error, PushUnreachable)]
    rejected = [a for a in failed if a not in refused]
    assert failed == refused + rejected and len(refused) >= 2 and len(rejected) >= 2 and delivered.ok
    for a in refused:
        assert is_socket_error(a.error) and 'Connection refused' in str(a.error) and receiver.url in str(a.error)
    for a in rejected:
        assert not is_socket_error(a.error)  # type: ignore[arg-type]
        assert str(a.error) == f'POST {receiver.url}: answered 500 Internal Server Error'
    # Attempt k failed → attempt k+1 waits base * 2**(k-1), ±20 %, base by the kind of error.
    g = gaps(attempts.seen)
    for k, (a, gap) in enumerate(zip(failed, g, strict=True), start=1):
        if a in refused:
            assert gap >= sock * 2 ** (k - 1) * (1 - JITTER), (k, g)
        else:  # far shorter than a socket wait would be at that attempt
            expected = non_sock * 2 ** (k - 1)
            assert expected * (1 - JITTER) <= gap <= expected * (1 + JITTER) + SLACK_SECS, (k, g)
            assert gap + SLACK_SECS < sock * 2 ** (k - 1) * (1 - JITTER), (k, g)
    assert g[1] > g[0] and g[-1] > g[-2]  # growing, while down and while answered 500

    # Delivered exactly once, the queue is empty, and a 2xx is final.
    statuses = [500] * len(rejected) + [200]
    assert [r.status for r in receiver.requests] == statuses
    [body] = receiver.bodies(200)
    assert body['data'] == {'order': 1}
    assert body['msg_id'] == msg_id
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')
    count = len(attempts.seen)
    gevent.sleep(1.0)
    assert [r.status for r in receiver.requests] == statuses
    assert len(attempts.seen) == count
    assert rt.catalog.queue_depth(sub.sub_key) == 0
    assert rt.catalog.dead_letters(sub.sub_key) == []


def test_no_answer_in_time_is_a_socket_level_error(make_rt: Callable[..., TestRuntime],
                                                    receiver: Receiver) -> None:
    sock = 0.4
    rt = make_rt(wait_sock_err=sock, wait_non_sock_err=0.02)
    attempts = Attempts()
    rt.broker.hooks.add(attempts)
    receiver.start()
    receiver.delay_secs = 1.0
    sub = push_subscription(rt, 'push.slow', receiver.url, push_timeout_secs=0.2)
    rt.broker.publish('push.slow', 'late')
    wait_until(lambda: len(attempts.seen) >= 2, TIMEOUT, message='two timed-out attempts')
    receiver.delay_secs = 0.0
    wait_until(lambda: any(a.ok for a in attempts.seen), TIMEOUT, message='delivery')
    for a in attempts.seen[:2]:
        assert isinstance(a.error, PushUnreachable) and is_socket_error(a.error)
        assert 'within 0.2 s' in str(a.error)
    assert gaps(attempts.seen)[0] >= sock * (1 - JITTER)
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')


def test_dead_letter_after_max_attempts_names_the_status_and_never_a_credential(
        make_rt: Callable[..., TestRuntime], receiver: Receiver, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv('CONDUIT_SECRET_PUSH_TEST', PASSWORD)
    rt = make_rt(wait_non_sock_err=0.02)
    receiver.start(status=503)
    url = receiver.url + '?token=q-secret-77'
    sub = push_subscription(rt, 'push.poison', url, max_attempts=3, push_username='conduit',
                            push_password='${CONDUIT_SECRET_PUSH_TEST}')
    msg_id = rt.broker.publish('push.poison', {'bad': True})
    wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='dead letter')

    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert (dead['msg_id'], dead['reason'], dead['delivery_count']) == (msg_id, 'max_attempts', 3)
    assert dead['last_error'] == f'PushFailed: POST {receiver.url}?...: answered 503 Service Unavailable'
    assert len(receiver.requests) == 3
    assert rt.catalog.queue_depth(sub.sub_key) == 0
    token = base64.b64encode(f'conduit:{PASSWORD}'.encode()).decode()
    assert receiver.requests[0].authorization == f'Basic {token}'
    for secret in (PASSWORD, token):
        assert secret not in caplog.text
        assert secret not in dead['last_error']
    assert 'q-secret-77' not in dead['last_error']
    gevent.sleep(0.3)
    assert len(receiver.requests) == 3


# Batches


def test_by_default_each_message_is_one_post_with_zatos_flat_body(make_rt: Callable[..., TestRuntime],
                                                                   receiver: Receiver) -> None:
    rt = make_rt()
    receiver.start()
    sub = push_subscription(rt, 'push.zato', receiver.url, paused=True)
    ids = [rt.broker.publish('push.zato', {'n': 0}, publisher='crm', correl_id='c0', in_reply_to='zpsm-prev',
                             ext_client_id='crm-1', ext_pub_time='2026-01-02T03:04:05.678+01:00'),
           rt.broker.publish('push.zato', 'text', priority=7, expiration=60)]
    ids += [rt.broker.publish('push.zato', {'n': n}) for n in range(2, 20)]
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(receiver.requests) == 20, TIMEOUT, message='twenty requests')
    gevent.sleep(0.2)

    # One message per POST, as a receiver written for Zato counts them; each body a JSON object.
    assert len(receiver.requests) == 20 and all(isinstance(r.body, dict) for r in receiver.requests)
    assert {(r.method, r.content_type) for r in receiver.requests} == {('POST', 'application/json')}
    first, second, *rest = (r.body for r in receiver.requests)
    assert [b['msg_id'] for b in [first, second, *rest]] == [ids[1], ids[0], *ids[2:]]  # priority 7 first
    assert all(i.startswith('zpsm') for i in ids)
    assert first == {
        'msg_id': ids[1], 'topic_name': 'push.zato', 'data': 'text', 'priority': 7, 'expiration': 60,
        'pub_time_iso': first['pub_time_iso'], 'recv_time_iso': first['recv_time_iso'],
        'expiration_time_iso': first['expiration_time_iso'], 'mime_type': 'text/plain'}
    assert set(second) == {'msg_id', 'topic_name', 'data', 'priority', 'expiration', 'pub_time_iso',
                           'recv_time_iso', 'expiration_time_iso', 'correl_id', 'in_reply_to', 'ext_client_id',
                           'publisher'}
    assert (second['data'], second['priority'], second['expiration'], second['correl_id'], second['in_reply_to'],
            second['ext_client_id'], second['publisher']) == ({'n': 0}, 5, 31536000, 'c0', 'zpsm-prev', 'crm-1',
                                                              'crm')
    assert second['pub_time_iso'] == '2026-01-02T03:04:05.678+01:00'  # the publisher's own, verbatim
    for body in (first, *rest):
        assert body['pub_time_iso'] <= body['recv_time_iso'] < body['expiration_time_iso']
    assert [b['data'] for b in rest] == [{'n': n} for n in range(2, 20)]
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')


def test_one_message_per_post_in_strict_order_tries_only_the_head_while_it_fails(
        make_rt: Callable[..., TestRuntime], receiver: Receiver) -> None:
    rt = make_rt(wait_non_sock_err=0.05)
    attempts = Attempts()
    rt.broker.hooks.add(attempts)
    receiver.start(status=500)
    sub = push_subscription(rt, 'push.head', receiver.url, paused=True, delivery_batch_size=10)
    ids = [rt.broker.publish('push.head', n) for n in range(3)]
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(receiver.requests) >= 3, TIMEOUT, message='three failed requests')
    receiver.status = 200
    wait_until(lambda: sum(a.ok for a in attempts.seen) == 3, TIMEOUT, message='all delivered')
    failed = [r for r in receiver.requests if r.status == 500]
    assert {r.body['data'] for r in failed} == {0}  # nothing behind the failing head was sent
    assert [b['data'] for b in receiver.bodies(200)] == [0, 1, 2]
    # Messages behind the head had no attempt counted while they waited.
    assert [a.msg_id for a in attempts.seen if a.msg_id != ids[0]] == ids[1:]
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')


def test_batches_respect_the_batch_size_and_a_single_message_is_not_wrapped(
        make_rt: Callable[..., TestRuntime], receiver: Receiver) -> None:
    rt = make_rt()
    receiver.start()
    sub = push_subscription(rt, 'push.batch', receiver.url, paused=True, delivery_batch_size=2, push_batch=True,
                            push_format='envelope')
    ids = [rt.broker.publish('push.batch', {'n': n}, correl_id=f'c{n}') for n in range(5)]
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(receiver.requests) == 3, TIMEOUT, message='three requests')

    first, second, last = (r.body for r in receiver.requests)
    assert [[m['data'] for m in b] for b in (first, second)] == [[{'n': 0}, {'n': 1}], [{'n': 2}, {'n': 3}]]
    assert isinstance(last, dict) and last['data'] == {'n': 4}  # a batch of one, not wrapped
    metas = [m['meta'] for m in first + second] + [last['meta']]
    assert [m['msg_id'] for m in metas] == ids
    assert [m['correl_id'] for m in metas] == [f'c{n}' for n in range(5)]
    for meta in metas:
        assert meta['topic_name'] == 'push.batch'
        assert meta['sub_key'] == sub.sub_key
        assert meta['delivery_count'] == 1
        assert {'pub_time_iso', 'recv_time_iso', 'expiration_time_iso', 'priority', 'size'} <= meta.keys()
    assert {r.method for r in receiver.requests} == {'POST'}
    assert {r.authorization for r in receiver.requests} == {None}
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')


def test_wrap_one_message_in_list_and_method(make_rt: Callable[..., TestRuntime], receiver: Receiver) -> None:
    rt = make_rt()
    receiver.start()
    push_subscription(rt, 'push.wrapped', receiver.url, wrap_one_msg_in_list=True, push_method='put')
    rt.broker.publish('push.wrapped', 'only one')
    wait_until(lambda: receiver.requests, TIMEOUT, message='a request')
    [request] = receiver.requests
    assert request.method == 'PUT'
    assert isinstance(request.body, list) and [m['data'] for m in request.body] == ['only one']


def test_a_failed_batch_counts_an_attempt_for_each_message_and_is_retried_whole(
        make_rt: Callable[..., TestRuntime], receiver: Receiver) -> None:
    rt = make_rt(wait_non_sock_err=0.1)
    receiver.start(status=500)
    sub = push_subscription(rt, 'push.whole', receiver.url, paused=True, delivery_batch_size=10, push_batch=True,
                            push_format='envelope')
    for n in range(3):
        rt.broker.publish('push.whole', n)
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(receiver.requests) >= 2, TIMEOUT, message='two failed requests')
    receiver.status = 200
    wait_until(lambda: receiver.bodies(200), TIMEOUT, message='delivery')
    gevent.sleep(0.3)
    *failed, delivered = receiver.requests
    assert len(failed) >= 2 and {r.status for r in failed} == {500} and delivered.status == 200
    assert [[m['data'] for m in r.body] for r in receiver.requests] == [[0, 1, 2]] * (len(failed) + 1)
    counts = [[m['meta']['delivery_count'] for m in r.body] for r in receiver.requests]
    assert counts == [[n] * 3 for n in range(1, len(failed) + 2)]
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')


def test_strict_order_holds_later_messages_back(make_rt: Callable[..., TestRuntime], receiver: Receiver) -> None:
    rt = make_rt(wait_non_sock_err=0.05)
    receiver.start(status=500)
    sub = push_subscription(rt, 'push.strict', receiver.url, delivery_batch_size=1)
    rt.broker.publish('push.strict', 'first')
    wait_until(lambda: receiver.requests, TIMEOUT, message='a failed request')
    rt.broker.publish('push.strict', 'second')
    wait_until(lambda: len(receiver.requests) >= 3, TIMEOUT, message='more failed requests')
    assert {r.body['data'] for r in receiver.requests} == {'first'}
    receiver.status = 200
    wait_until(lambda: len(receiver.bodies(200)) == 2, TIMEOUT, message='both delivered')
    assert [b['data'] for b in receiver.bodies(200)] == ['first', 'second']
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')


class PushHook(Service):
    """A topic hook: deletes messages whose data says so, enriches the others."""

    name = 'push.hook'

    def handle(self) -> None:
        data = self.request.payload['data']
        if data.get('hook') == 'delete':
            self.response.payload = {'action': 'delete'}
        else:
            self.response.payload = {'action': 'deliver', 'data': {**data, 'enriched': True}}


def test_hook_services_and_non_gd_messages(make_rt: Callable[..., TestRuntime], receiver: Receiver) -> None:
    rt = make_rt(PushHook)
    receiver.start()
    rt.catalog.create_topic('push.hooked', hook_service='push.hook', has_gd=False)
    sub = rt.catalog.subscribe('push.hooked', 'rest_push', push_url=receiver.url)
    wait_until(lambda: rt.broker.leases.owns(lease_name(sub.id)), TIMEOUT, message='the delivery lease')
    rt.broker.publish('push.hooked', {'hook': 'delete'})
    rt.broker.publish('push.hooked', {'n': 1})
    wait_until(lambda: receiver.requests, TIMEOUT, message='a request')
    gevent.sleep(0.2)
    assert [r.body['data'] for r in receiver.requests] == [{'n': 1, 'enriched': True}]
    with rt.engine.connect() as conn:  # non-GD: held in the delivering worker's memory, never stored
        assert conn.execute(select(func.count()).select_from(Message)).scalar_one() == 0
    assert rt.catalog.queue_depth(sub.sub_key) == 0


# Subscribing


def test_credentials_are_stored_only_as_references(make_rt: Callable[..., TestRuntime], receiver: Receiver,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv('CONDUIT_SECRET_PUSH_TEST', raising=False)
    rt = make_rt()
    rt.catalog.create_topic('push.auth')
    with pytest.raises(ConfigError) as e:
        rt.catalog.subscribe('push.auth', 'rest_push', push_url=receiver.url,
                            options={'push_username': 'u', 'push_password': PASSWORD})
    assert 'CONDUIT_SECRET_' in str(e.value) and PASSWORD not in str(e.value)
    with pytest.raises(ConfigError) as e:
        rt.catalog.subscribe('push.auth', 'rest_push', push_url=f'http://u:{PASSWORD}@127.0.0.1:1/hook')
    assert PASSWORD not in str(e.value)
    for bad in ('', 'ftp://127.0.0.1/x', '/relative'):
        with pytest.raises(ConfigError):
            rt.catalog.subscribe('push.auth', 'rest_push', push_url=bad)

    # Missing variable: each attempt fails (not socket-level) until it is set.
    receiver.start()
    attempts = Attempts()
    rt.broker.hooks.add(attempts)
    sub = rt.catalog.subscribe('push.auth', 'rest_push', push_url=receiver.url,
                              options={'push_username': 'u', 'push_password': '${CONDUIT_SECRET_PUSH_TEST}'})
    rt.broker.publish('push.auth', 'x')
    wait_until(lambda: attempts.seen, TIMEOUT, message='an attempt')
    assert 'CONDUIT_SECRET_PUSH_TEST' in str(attempts.seen[0].error) and not is_socket_error(attempts.seen[0].error)
    assert receiver.requests == []
    monkeypatch.setenv('CONDUIT_SECRET_PUSH_TEST', PASSWORD)
    wait_until(lambda: receiver.requests, TIMEOUT, message='a request')
    assert receiver.requests[0].authorization == 'Basic ' + base64.b64encode(f'u:{PASSWORD}'.encode()).decode()
    with rt.engine.connect() as conn:
        stored = conn.execute(select(Subscription.options, Subscription.push_url)
                              .where(Subscription.id == sub.id)).one()
    assert '${CONDUIT_SECRET_PUSH_TEST}' in stored.options and PASSWORD not in stored.options + stored.push_url


OBJECTS = '''
pubsub_topic:
  - name: cfg.push
outgoing_rest:
  - name: crm.hook
    host: http://127.0.0.1:{port}
    url_path: /hook
    data_format: json
    timeout: 5
    username: conduit
    password: ${{CONDUIT_SECRET_PUSH_TEST}}
  - name: not.used
    host: http://example.invalid
    security: some.basic.auth
pubsub_subscription:
  - name: crm-orders
    delivery_type: push
    push_rest_endpoint: crm.hook
    topic_list: [cfg.push]
    delivery_batch_size: 2
    wrap_one_msg_in_list: true
    max_attempts: 4
'''


def test_config_objects_outgoing_rest_and_push_rest_endpoint(
        make_rt: Callable[..., TestRuntime], settings_factory: Callable[..., Settings], receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('CONDUIT_SECRET_PUSH_TEST', PASSWORD)
    settings = settings_factory()
    objects_dir = settings.path(settings.objects.dir)
    objects_dir.mkdir(parents=True)
    path = objects_dir / 'push.yaml'
    path.write_text(OBJECTS.format(port=receiver.port), encoding='utf-8')
    rt = make_rt(settings=settings)
    receiver.start()

    [sub] = rt.broker.registry.all_subscribers('cfg.push')
    assert (sub.kind, sub.push_url) == ('rest_push', receiver.url)
    opts, push = sub.options, sub.options.of(RestPushOptions)
    assert (push.push_rest_endpoint, push.push_timeout_secs, push.push_username, push.push_password) == (
        'crm.hook', 5, 'conduit', '${CONDUIT_SECRET_PUSH_TEST}')
    assert (opts.delivery_batch_size, push.wrap_one_msg_in_list, opts.max_attempts) == (2, True, 4)
    rt.broker.publish('cfg.push', {'n': 1})
    wait_until(lambda: receiver.requests, TIMEOUT, message='a request')
    [request] = receiver.requests
    assert [m['data'] for m in request.body] == [{'n': 1}]
    assert request.authorization == 'Basic ' + base64.b64encode(f'conduit:{PASSWORD}'.encode()).decode()

    # The endpoint moves: the same subscription (and queue) follows it.
    other = Receiver()
    try:
        other.start()
        path.write_text(OBJECTS.format(port=other.port), encoding='utf-8')
        assert 'pubsub' in rt.objects.apply()
        rt.synchronizer.poll()
        [moved] = rt.broker.registry.all_subscribers('cfg.push')
        assert (moved.sub_key, moved.push_url) == (sub.sub_key, other.url)
        rt.broker.publish('cfg.push', {'n': 2})
        wait_until(lambda: other.requests, TIMEOUT, message='a request to the new endpoint')
    finally:
        other.stop()

    # A literal password is refused, and the error does not quote it.
    literal = OBJECTS.format(port=receiver.port).replace('${CONDUIT_SECRET_PUSH_TEST}', PASSWORD)
    path.write_text(literal, encoding='utf-8')
    with pytest.raises(ConfigError) as e:
        rt.objects.apply()
    assert "'crm.hook'" in str(e.value) and 'CONDUIT_SECRET_' in str(e.value) and PASSWORD not in str(e.value)

    path.write_text(OBJECTS.format(port=receiver.port).replace('push_rest_endpoint: crm.hook',
                                                              'push_rest_endpoint: missing'), encoding='utf-8')
    with pytest.raises(ConfigError, match="'missing' is not an outgoing_rest"):
        rt.objects.apply()

    path.write_text(OBJECTS.split('outgoing_rest:')[0], encoding='utf-8')
    rt.objects.apply()
    rt.synchronizer.poll()
    assert rt.broker.registry.all_subscribers('cfg.push') == []


# Units: the loop's contract and the socket-error classification


def test_a_loop_takes_exactly_one_kind_of_deliverer() -> None:
    sub = SubInfo(1, 'sk', 't', 'rest_push', options=DeliveryOptions())
    with pytest.raises(TypeError):
        DeliveryLoop(sub, None, None, lambda: True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        DeliveryLoop(sub, None, lambda s, d: None, lambda: True,  # type: ignore[arg-type]
                     deliver_batch=lambda s, b: None)


@pytest.mark.parametrize('exc', [
    requests.ConnectionError('refused'),
    requests.ConnectTimeout('connect timed out'),
    requests.ReadTimeout('read timed out'),
    requests.Timeout('timed out'),
    requests.exceptions.ChunkedEncodingError('connection broken'),
    urllib3.exceptions.ProtocolError('Connection aborted.'),
    urllib3.exceptions.ReadTimeoutError(None, '/hook', 'read timed out'),  # type: ignore[arg-type]
    PushUnreachable('POST', 'http://h/x', 'cannot connect: Connection refused'),
], ids=lambda e: type(e).__name__)
def test_http_client_socket_errors_are_recognised(exc: BaseException) -> None:
    assert is_socket_error(exc)


@pytest.mark.parametrize('exc', [
    requests.HTTPError('500 Server Error'),
    requests.exceptions.InvalidURL('bad'),
    PushFailed('POST', 'http://h/x', 'answered 500 Internal Server Error', 500),
    OSError(errno.ENOENT, 'No such file or directory'),
], ids=lambda e: type(e).__name__)
def test_http_errors_are_not_socket_errors(exc: BaseException) -> None:
    assert not is_socket_error(exc)


def test_delivery_loop_imports_no_http_or_sql() -> None:
    import ast

    import runtime.pubsub.delivery as module
    tree = ast.parse(Path(module.__file__).read_text(encoding='utf-8'))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not {m for m in imported if m.split('.')[0] in ('requests', 'urllib3', 'sqlalchemy', 'falcon')}
