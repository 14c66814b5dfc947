"""Every dead letter reaches the observers (metrics, archive, users' observers), whatever made it.

A message is dead-lettered by the delivery loop, by the sweeper (it expired in a queue nobody
delivers now: a paused subscription, a pull queue nobody pulls), by a service's own pull and by a
REST client's pull (both dead-letter what expired, and what cannot be rendered). Each of them is
counted on /metrics, archived and announced to observers, once.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import gevent
import pytest
from sqlalchemy import create_engine, update

from runtime import Service
from runtime.db.blocking import run_transaction
from runtime.db.models import Message
from runtime.pubsub import statements
from runtime.pubsub.observers import PubSubObserver
from runtime.pubsub.subscribers.pull import get_messages
from runtime.testing import make_settings
from tests.live_server import poll
from tests.observability.test_metrics import _samples, _value

TIMEOUT = 30.0  # how long a condition may take under load; met conditions return at once


class Puller(Service):
    """Takes messages from the pull queue named in the request, as a service does."""

    name = 'dl.puller'

    def handle(self):
        self.response.payload = self.pubsub.get_messages(self.request.payload['sub_key'])


class Idle(Service):
    """A subscriber that is never reached in these tests (its subscription is paused)."""

    name = 'dl.idle'

    def handle(self):
        pass


class DeadLetterRecorder(PubSubObserver):
    """Records each dead letter it hears of."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def after_dead_letter(self, sub, delivery, reason, error):  # type: ignore[no-untyped-def]
        self.seen.append((sub.sub_key, delivery.msg_id, reason))


def _archived(rt: Any) -> list[dict[str, Any]]:
    rt.archive.flush()
    archive = Path(rt.settings.path(rt.settings.archive.dir))
    return [json.loads(line) for path in sorted(archive.rglob('*.jsonl'))
            for line in path.read_text(encoding='utf-8').splitlines() if '"dead_letter"' in line]


def _counted(rt: Any, sub_id: int, reason: str) -> int:
    return sum(n for (_topic, sub, _subscriber, r), n in rt.metrics.pubsub.dead_lettered.items()
               if sub == str(sub_id) and r == reason)


def _runtime(runtime_factory, tmp_path, db_url):  # type: ignore[no-untyped-def]
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt', db_url)
    settings.archive.flush_interval_secs = 60  # flushed by the test
    rt = runtime_factory(Puller, Idle, settings=settings)
    observer = DeadLetterRecorder()
    rt.broker.observers.add(observer)
    return rt, observer


def _seen_everywhere(rt: Any, observer: DeadLetterRecorder, sub: Any, msg_id: str, reason: str) -> None:
    assert observer.seen.count((sub.sub_key, msg_id, reason)) == 1, observer.seen
    assert _counted(rt, sub.id, reason) == 1, rt.metrics.pubsub.dead_lettered
    records = [(r['msg_id'], r['sub_id'], r['reason']) for r in _archived(rt)]
    assert records == [(msg_id, sub.id, reason)], records


def test_the_sweeper_announces_what_expired_in_a_paused_queue(runtime_factory, tmp_path, db_url) -> None:
    rt, observer = _runtime(runtime_factory, tmp_path, db_url)
    rt.catalog.create_topic('dl.sweep')
    sub = rt.catalog.subscribe('dl.sweep', service='dl.idle')
    rt.catalog.set_active(sub.sub_key, False)
    msg_id = rt.broker.publish('dl.sweep', {'n': 1}, expiration=0.2)
    gevent.sleep(0.3)
    assert rt.broker.sweeper.sweep()['expired_in_queues'] == 1
    assert [d['msg_id'] for d in rt.catalog.dead_letters(sub.sub_key)] == [msg_id]
    _seen_everywhere(rt, observer, sub, msg_id, 'expired')


def test_a_services_pull_announces_expired_messages(runtime_factory, tmp_path, db_url) -> None:
    rt, observer = _runtime(runtime_factory, tmp_path, db_url)
    rt.catalog.create_topic('dl.pull')
    sub_key = rt.catalog.subscribe('dl.pull', 'pull', service='dl.puller').sub_key
    sub = rt.broker.registry.subs_by_key[sub_key]
    msg_id = rt.broker.publish('dl.pull', {'n': 1}, expiration=0.2)
    gevent.sleep(0.3)
    assert rt.invoke('dl.puller', {'sub_key': sub_key}) == []
    assert [d['msg_id'] for d in rt.catalog.dead_letters(sub_key)] == [msg_id]
    _seen_everywhere(rt, observer, sub, msg_id, 'expired')


def test_a_services_pull_announces_unrenderable_messages(runtime_factory, tmp_path, db_url) -> None:
    rt, observer = _runtime(runtime_factory, tmp_path, db_url)
    rt.catalog.create_topic('dl.bad')
    sub_key = rt.catalog.subscribe('dl.bad', 'pull', service='dl.puller').sub_key
    sub = rt.broker.registry.subs_by_key[sub_key]
    msg_id = rt.broker.publish('dl.bad', {'n': 1})
    run_transaction(rt.engine, lambda c: c.execute(update(Message).where(Message.msg_id == msg_id)
                                                   .values(data='{"n": NaN')))
    assert rt.invoke('dl.puller', {'sub_key': sub_key}) == []
    _seen_everywhere(rt, observer, sub, msg_id, 'unrenderable')


def test_a_dead_letter_rolled_back_is_never_announced(runtime_factory, tmp_path, db_url, monkeypatch) -> None:
    rt, observer = _runtime(runtime_factory, tmp_path, db_url)
    rt.catalog.create_topic('dl.rollback')
    sub_key = rt.catalog.subscribe('dl.rollback', 'pull', service='dl.puller').sub_key
    msg_id = rt.broker.publish('dl.rollback', {'n': 1}, expiration=0.2)
    gevent.sleep(0.3)

    def failing_ack(conn, entry_ids):  # type: ignore[no-untyped-def]
        raise RuntimeError('the transaction fails after the dead letter was written')

    with monkeypatch.context() as patched:
        patched.setattr(statements, 'ack', failing_ack)
        with pytest.raises(RuntimeError):
            get_messages(rt.broker, sub_key)
    assert rt.catalog.dead_letters(sub_key) == [] and observer.seen == [] and not rt.metrics.pubsub.dead_lettered
    assert get_messages(rt.broker, sub_key) == []
    assert [x[1] for x in observer.seen] == [msg_id]


FAST = '''
[pubsub]
sweep_interval_secs = 0.1
poll_interval_secs = 0.05
[archive]
flush_interval_secs = 0.1
'''


def test_dead_letters_of_the_sweeper_and_of_rest_pulls_are_counted_and_archived(server_factory) -> None:
    server = server_factory(extra_config=FAST)
    server.start()

    def call(method: str, path: str, expected: int = 200, **kwargs: Any) -> Any:
        r = server.request(method, path, auth=server.admin, **kwargs)
        assert r.status_code == expected, r.text
        return r.json()

    def pull() -> list[Any]:
        got = server.request('POST', '/pubsub/messages/get', auth=('c', 'dl-secret-pw'), json={})
        assert got.status_code == 200, got.text
        return got.json()['messages']

    call('POST', '/admin/topics', 201, json={'name': 'dl.t'})
    call('POST', '/admin/security', 201, json={'name': 'c', 'username': 'c', 'password': 'dl-secret-pw'})
    call('PUT', '/admin/security/c/permissions', json={'sub': ['dl.**']})
    sub_id = str(call('POST', '/admin/subscriptions', 201, json={'topic': 'dl.t', 'kind': 'pull',
                                                                'security': 'c'})['subscription']['id'])
    expired = call('POST', '/admin/publish', json={'topic': 'dl.t', 'data': {'n': 1}, 'expiration': 0.2})['msg_id']
    time.sleep(0.3)
    assert pull() == []  # a REST client's pull dead-letters what expired, as a service's pull does
    poll(lambda: call('GET', f'/admin/queues/{sub_id}')['queue']['dead_letters'] == 1, TIMEOUT,
         message='the expired message dead-lettered')

    bad = call('POST', '/admin/publish', json={'topic': 'dl.t', 'data': {'n': 2}})['msg_id']
    engine = create_engine(server.db_url)
    try:
        with engine.begin() as conn:
            conn.execute(update(Message).where(Message.msg_id == bad).values(data='{"n": NaN'))
    finally:
        engine.dispose()
    assert pull() == []

    samples = _samples(server)
    for reason in ('expired', 'unrenderable'):
        assert _value(samples, 'conduit_pubsub_dead_lettered_total', subscription=sub_id, reason=reason) == 1
    archive = server.base / 'var' / 'archive'

    def archived() -> list[tuple[str, str]]:
        return sorted((r['msg_id'], r['reason']) for path in archive.rglob('*.jsonl')
                      for r in map(json.loads, path.read_text(encoding='utf-8').splitlines())
                      if r['outcome'] == 'dead_letter')
    poll(lambda: len(archived()) == 2, TIMEOUT, message='both dead letters archived')
    assert archived() == sorted([(expired, 'expired'), (bad, 'unrenderable')])
