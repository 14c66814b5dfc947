"""A poison message never costs another message: it goes to the dead-letter queue, the rest is delivered.

A poison message is one stored past the checks of publication (written straight into the database
here): JSON nested 950 deep, the text ``NaN`` or an integer of 5,000 digits under the mime type
application/json. Pulled through a real server (auto and manual ack, and Zato's single-message
answer), pushed to a REST endpoint, handed to a service or taken by a service's own pull, each
poison message is dead-lettered at once with reason ``unrenderable`` and an error naming why,
and every other message of the batch is delivered, in order, exactly once.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from gevent.pywsgi import WSGIServer
from sqlalchemy import Engine, select

from runtime.db.blocking import run_transaction
from runtime.db.engine import make_engine
from runtime.db.models import Subscription, Topic
from runtime.pubsub import statements
from runtime.pubsub.retry import REASON_UNRENDERABLE
from runtime.pubsub.statements import Publication
from runtime.pubsub.subscribers.pull import get_messages
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.live_server import LiveServer, free_port
from tests.security.conftest import PASSWORD, USER

AUTH = (USER, PASSWORD)

#: Poison messages by what they are: (stored JSON text, words the dead letter's error must contain).
POISONS = {
    'nested 950 deep': ('[' * 950 + ']' * 950, 'nested deeper than 64 levels'),
    'NaN': ('NaN', 'NaN'),
    'an integer of 5,000 digits': ('1' * 5000, 'more than 100 digits'),
}

TIMEOUT = 30  # how long a condition may take under load; met conditions return at once

_counter = itertools.count()


def insert_poison(engine: Engine, topic: str, sub_ids: list[int], text: str) -> str:
    """Store a message with this JSON text for these subscriptions, as no publisher could; returns its msg_id."""
    msg_id = 'msg.poison' + os.urandom(8).hex()

    def work(conn: Any) -> None:
        topic_id = conn.execute(select(Topic.id).where(Topic.name == topic)).scalar_one()
        now = time.time()
        statements.insert_publications(conn, [Publication(
            msg_id=msg_id, topic_id=topic_id, topic_name=topic, data=text, mime_type='application/json', priority=5,
            pub_time=now, expiration_time=now + 3600, publisher='test:poison', correl_id=None, in_reply_to=None,
            ext_client_id=None, has_gd=True, size=len(text), sub_ids=sub_ids)])
    run_transaction(engine, work)
    return msg_id


def interleaved(publish: Callable[[Any], str], poison: Callable[[str], str]) -> tuple[list[str], dict[str, str]]:
    """good, poison, good, poison, good, poison, good: the good msg_ids in order, and poison msg_id -> kind."""
    goods, poisons = [publish({'n': 0})], {}
    for i, (kind, (text, _words)) in enumerate(POISONS.items(), start=1):
        poisons[poison(text)] = kind
        goods.append(publish({'n': i}))
    return goods, poisons


def assert_dead_letters(rows: list[dict[str, Any]], poisons: dict[str, str]) -> None:
    """Exactly the poison messages are dead letters, each unrenderable, never tried, its error naming why."""
    by_msg_id = {r['msg_id']: r for r in rows}
    assert set(by_msg_id) == set(poisons), rows
    for msg_id, kind in poisons.items():
        row = by_msg_id[msg_id]
        assert row['reason'] == REASON_UNRENDERABLE, row
        assert POISONS[kind][1] in row['last_error'] and msg_id in row['last_error'], row
        assert row['delivery_count'] <= 1, row  # dead-lettered at once, not retried


# Pulling through a real server


class Api:
    """A topic of its own on the target, with the security definition's pull subscription to it."""

    def __init__(self, server: LiveServer) -> None:
        self.server = server
        self.topic = f'sec.poison.{next(_counter)}'
        r = server.request('POST', '/admin/topics', json={'name': self.topic}, auth=server.admin)
        assert r.status_code == 201, r.text
        r = server.request('POST', f'/pubsub/subscribe/topic/{self.topic}', auth=AUTH)
        assert r.status_code == 200, r.text
        self.sub_key = r.json()['sub_key']
        self.engine = make_engine(server.db_url)
        with self.engine.connect() as conn:
            self.sub_id = conn.execute(select(Subscription.id).where(Subscription.sub_key == self.sub_key)
                                       ).scalar_one()

    def publish(self, data: Any) -> str:
        r = self.server.request('POST', f'/pubsub/topic/{self.topic}', json={'data': data}, auth=AUTH)
        assert r.status_code == 200, r.text
        return r.json()['msg_id']

    def poison(self, text: str) -> str:
        return insert_poison(self.engine, self.topic, [self.sub_id], text)

    def pull(self, **body: Any) -> dict[str, Any]:
        r = self.server.request('POST', '/pubsub/messages/get', json={'sub_key': self.sub_key, **body}, auth=AUTH)
        assert r.status_code == 200, r.text
        assert r.headers['Content-Type'].startswith('application/json')
        return r.json()

    def dead_letters(self) -> list[dict[str, Any]]:
        r = self.server.request('GET', f'/admin/queues/{self.sub_id}/dead-letters', auth=self.server.admin)
        assert r.status_code == 200, r.text
        return r.json()['dead_letters']


@pytest.fixture
def api(target: LiveServer) -> Iterator[Api]:
    a = Api(target)
    yield a
    a.engine.dispose()


def test_an_auto_ack_pull_delivers_the_rest_of_the_batch_and_dead_letters_the_poison(api: Api) -> None:
    goods, poisons = interleaved(api.publish, api.poison)
    answer = api.pull(max_messages=50)
    assert answer['message_count'] == len(goods)
    assert [m['meta']['msg_id'] for m in answer['messages']] == goods
    assert [m['data'] for m in answer['messages']] == [{'n': i} for i in range(len(goods))]
    assert all(m['meta']['delivery_count'] == 1 for m in answer['messages'])
    assert_dead_letters(api.dead_letters(), poisons)
    assert api.pull()['message_count'] == 0  # nothing left, nothing lost
    for msg_id, kind in poisons.items():  # the admin's view of one shows what is stored, as text
        r = api.server.request('GET', f'/admin/queues/{api.sub_id}/dead-letters/{msg_id}', auth=api.server.admin)
        assert r.status_code == 200 and r.json()['dead_letter']['data'] == POISONS[kind][0], r.text[:300]


def test_a_manual_ack_pull_leases_the_rest_and_never_hands_over_the_poison(api: Api) -> None:
    goods, poisons = interleaved(api.publish, api.poison)
    answer = api.pull(max_messages=50, ack='manual', ack_deadline=60)
    assert [m['meta']['msg_id'] for m in answer['messages']] == goods
    ack_ids = [m['meta']['ack_id'] for m in answer['messages']]
    assert_dead_letters(api.dead_letters(), poisons)
    # The next pull does not answer 500 either: the leased ones are not due, and nothing else is queued.
    assert api.pull(ack='manual')['message_count'] == 0
    r = api.server.request('POST', '/pubsub/messages/ack', json={'sub_key': api.sub_key, 'ack_ids': ack_ids},
                           auth=AUTH)
    assert r.status_code == 200 and r.json()['acked'] == len(goods), r.text
    r = api.server.request('GET', f'/admin/queues/{api.sub_id}', auth=api.server.admin)
    assert r.json()['queue']['queue_depth'] == 0, r.text


def test_one_message_at_a_time_skips_the_poison_and_keeps_zatos_shape(api: Api) -> None:
    goods, poisons = interleaved(api.publish, api.poison)
    got = []
    for _ in goods:
        answer = api.pull(max_messages=1)
        assert answer['message_count'] == 1, answer
        # Zato 4.1: a single message is also the answer's own data and meta.
        assert answer['data'] == answer['messages'][0]['data'] and answer['meta'] == answer['messages'][0]['meta']
        got.append(answer['meta']['msg_id'])
    assert got == goods
    assert api.pull(max_messages=1)['message_count'] == 0
    assert_dead_letters(api.dead_letters(), poisons)


# In-process runtimes: REST push, services


FAST = {'wait_non_sock_err': 0.05, 'wait_sock_err': 0.05, 'max_wait_secs': 1.0, 'lease_renew_secs': 0.1,
        'poll_interval_secs': 0.02}


@pytest.fixture
def make_rt(db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime]) -> Callable[..., TestRuntime]:
    """A started runtime on the database under test, with quick retries and lease renewal."""

    def make(*services: type[Service]) -> TestRuntime:
        base = tmp_path / f'rt{next(_counter)}'
        base.mkdir()
        settings = make_settings(base, db_url)
        for key, value in FAST.items():
            setattr(settings.pubsub, key, value)
        return runtime_factory(*services, settings=settings)

    return make


def _refuse(token: str) -> Any:
    raise ValueError(f'{token} is not JSON')


class StrictReceiver:
    """A REST push endpoint that reads bodies as strict JSON (NaN and Infinity refused with 400)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.messages: list[dict[str, Any]] = []
        self.refused: list[bytes] = []
        self._server = WSGIServer(('127.0.0.1', self.port), self._app, log=None, error_log=None)
        self._server.start()

    @property
    def url(self) -> str:
        return f'http://127.0.0.1:{self.port}/hook'

    def _app(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        body = environ['wsgi.input'].read()
        try:
            value = json.loads(body, parse_constant=_refuse)
        except ValueError:
            self.refused.append(body[:200])
            start_response('400 Bad Request', [('Content-Type', 'application/json')])
            return [b'{}']
        self.messages.extend(value if isinstance(value, list) else [value])
        start_response('200 OK', [('Content-Type', 'application/json')])
        return [b'{}']

    def stop(self) -> None:
        self._server.stop(timeout=0.5)


@pytest.fixture
def receiver() -> Iterator[StrictReceiver]:
    r = StrictReceiver()
    yield r
    r.stop()


@pytest.mark.parametrize('err_should_block', [True, False])
def test_a_rest_push_sends_the_rest_of_the_batch_and_dead_letters_the_poison(
        make_rt: Callable[..., TestRuntime], receiver: StrictReceiver, err_should_block: bool) -> None:
    rt = make_rt()
    rt.catalog.create_topic('push.poison')
    sub = rt.catalog.subscribe('push.poison', 'rest_push', push_url=receiver.url,
                              options={'err_should_block': err_should_block, 'wrap_one_msg_in_list': True,
                                       'push_batch': True, 'push_format': 'envelope'})
    rt.catalog.set_active(sub.sub_key, False)  # the whole mix waits in the queue, then goes as one batch
    goods, poisons = interleaved(lambda data: rt.broker.publish('push.poison', data),
                                 lambda text: insert_poison(rt.engine, 'push.poison', [sub.id], text))
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(rt.catalog.dead_letters(sub.sub_key)) == len(poisons), TIMEOUT, message='dead letters')
    wait_until(lambda: len(receiver.messages) >= len(goods), TIMEOUT, message='the good messages pushed')
    assert [m['meta']['msg_id'] for m in receiver.messages] == goods
    assert [m['data'] for m in receiver.messages] == [{'n': i} for i in range(len(goods))]
    assert receiver.refused == []  # nothing that is not JSON ever went out
    assert_dead_letters(rt.catalog.dead_letters(sub.sub_key), poisons)
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='an empty queue')


#: Payloads the recording service got.
RECEIVED: list[Any] = []


class Recorder(Service):
    """Records the payload of every message it is given."""

    name = 'sec.poison.recorder'

    def handle(self) -> None:
        RECEIVED.append(self.request.payload)


def test_a_service_subscriber_gets_the_rest_and_the_poison_is_dead_lettered_at_once(
        make_rt: Callable[..., TestRuntime]) -> None:
    RECEIVED.clear()
    rt = make_rt(Recorder)
    rt.catalog.create_topic('svc.poison')
    sub = rt.catalog.subscribe('svc.poison', 'service', service=Recorder.name)
    rt.catalog.set_active(sub.sub_key, False)
    goods, poisons = interleaved(lambda data: rt.broker.publish('svc.poison', data),
                                 lambda text: insert_poison(rt.engine, 'svc.poison', [sub.id], text))
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(rt.catalog.dead_letters(sub.sub_key)) == len(poisons), TIMEOUT, message='dead letters')
    wait_until(lambda: len(RECEIVED) >= len(goods), TIMEOUT, message='the good messages delivered')
    assert RECEIVED == [{'n': i} for i in range(len(goods))]  # never a NaN, never a 950-deep list
    assert_dead_letters(rt.catalog.dead_letters(sub.sub_key), poisons)
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='an empty queue')


def test_a_services_own_pull_gets_the_rest_and_the_poison_is_dead_lettered(
        make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('own.poison')
    sub = rt.catalog.subscribe('own.poison', 'pull', service='sec.some.service')
    goods, poisons = interleaved(lambda data: rt.broker.publish('own.poison', data),
                                 lambda text: insert_poison(rt.engine, 'own.poison', [sub.id], text))
    got = get_messages(rt.broker, sub.sub_key, 50)
    assert [m['msg_id'] for m in got] == goods and [m['data'] for m in got] == [{'n': i} for i in range(len(goods))]
    assert_dead_letters(rt.catalog.dead_letters(sub.sub_key), poisons)
    assert rt.catalog.queue_depth(sub.sub_key) == 0
