"""The broker's semantics, in-process, on SQLite and on PostgreSQL.

Services record what they receive in the test's recorder (``events``); background delivery
is awaited with ``wait_until``, never with timing assertions. Retry waits are 0.05 s and leases
are renewed every 0.1 s so that the whole file stays fast. Where a test needs several messages
in one queue before delivery starts, it pauses the subscription (``set_active(sub_key, False)``),
publishes, and resumes it.
"""

from __future__ import annotations

import itertools
import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gevent
import gevent.monkey
import pytest
from sqlalchemy import func, select, text

from runtime.config import Settings
from runtime.db.blocking import run_transaction
from runtime.db.engine import make_engine
from runtime.db.models import QueueEntry
from runtime.errors import (
    InvalidMessage,
    MessageTooLarge,
    SubscriptionNotFound,
    TopicFull,
    TopicInactive,
    TopicNotFound,
)
from runtime.pubsub import queue_statements
from runtime.pubsub.broker import lease_name
from runtime.pubsub.message import admin_view
from runtime.pubsub.subscribers.pull import get_messages
from runtime.pubsub.subscribers.service import CHANNEL_HOOK, CHANNEL_PUBSUB
from runtime.pubsub.topics import InvalidTopicName
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.recorder import Recorder as Recording

#: Broker settings of every runtime here: short waits, quick lease renewal.
FAST = {'wait_non_sock_err': 0.05, 'wait_sock_err': 0.05, 'max_wait_secs': 1.0, 'lease_renew_secs': 0.1,
        'poll_interval_secs': 0.02}

TIMEOUT = 30  # how long a condition may take under load; met conditions return at once


@dataclass
class Seen:
    """One invocation of a recording service."""

    service: str
    channel: str
    payload: Any
    meta: dict[str, Any]

    @property
    def count(self) -> int:
        return self.meta['delivery_count']


def seen(recorder: Recording, service: str) -> list[Seen]:
    """What one service received, in order."""
    return [e for e in recorder['events'] if e.service == service]


def payloads(recorder: Recording, service: str) -> list[Any]:
    return [e.payload for e in seen(recorder, service)]


# Services


class Recorder(Service):
    """Records every message it receives (on 'events' of the recorder make_rt binds it to)."""

    name = 'ps.recorder'
    recorder: Recording

    def handle(self) -> None:
        meta = dict(self.request.raw_request or {})
        self.recorder.add('events', Seen(self.name, self.channel, self.request.payload, meta))


class RecorderB(Recorder):
    name = 'ps.recorder.b'


class Flaky(Recorder):
    """Fails its first two invocations, then succeeds."""

    name = 'ps.flaky.target'

    def handle(self) -> None:
        super().handle()
        if len(seen(self.recorder, self.name)) < 3:
            raise ValueError(f'not yet (attempt {len(seen(self.recorder, self.name))})')


class Publisher(Service):
    """Publishes what it is told to."""

    name = 'ps.publisher'

    def handle(self) -> None:
        p = self.request.payload
        self.response.payload = self.publish(p['target'], p['data'], **p.get('kw', {}))


class Poisoned(Recorder):
    """Fails every time on the payload 'poison'."""

    name = 'ps.poisoned'

    def handle(self) -> None:
        super().handle()
        if self.request.payload == 'poison':
            raise ValueError('cannot digest this poison pill')


class AlwaysFails(Recorder):
    name = 'ps.always.fails'

    def handle(self) -> None:
        super().handle()
        raise RuntimeError('downstream rejected the order')


class InFlight(Recorder):
    """Takes 0.3 s; counts how many of its invocations run at once (on the class make_rt deploys)."""

    name = 'ps.in.flight'
    now = 0
    peak = 0

    def handle(self) -> None:
        cls = type(self)
        cls.now += 1
        cls.peak = max(cls.peak, cls.now)
        try:
            gevent.sleep(0.3)
            super().handle()
        finally:
            cls.now -= 1


class Stalling(Recorder):
    """Hangs on the first attempt (until its runtime is stopped), succeeds on later ones."""

    name = 'ps.stalling'

    def handle(self) -> None:
        super().handle()
        if self.request.raw_request['delivery_count'] == 1:
            gevent.sleep(60)


class Hook(Service):
    """A topic's hook: the 'hook' key of the data says what to do with the message."""

    name = 'ps.hook'
    recorder: Recording

    def handle(self) -> None:
        data, meta = self.request.payload['data'], self.request.payload['meta']
        self.recorder.add('events', Seen(self.name, self.channel, data, meta))
        action = data.get('hook')
        if action == 'delete':
            self.response.payload = {'action': 'delete'}
        elif action == 'skip' and meta['delivery_count'] < 2:
            self.response.payload = {'action': 'skip'}
        else:
            self.response.payload = {'action': 'deliver', 'data': {**data, 'enriched': True}}


class Puller(Service):
    """Subscribes itself (pull), reads and unsubscribes, as told."""

    name = 'ps.puller'

    def handle(self) -> None:
        p = self.request.payload
        if p['op'] == 'subscribe':
            self.response.payload = self.pubsub.subscribe(p['topic'])
        elif p['op'] == 'get':
            self.response.payload = self.pubsub.get_messages(p['sub_key'], p.get('max_messages', 50))
        elif p['op'] == 'unsubscribe':
            self.pubsub.unsubscribe(p['sub_key'])


# Fixtures


@pytest.fixture
def settings_factory(db_url: str, tmp_path: Path) -> Callable[..., Settings]:
    """Settings of a runtime on the database under test, each with a base directory of its own."""
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


def stop_runtime(rt: TestRuntime) -> None:
    """Stop a runtime (its delivery loops may be inside a transaction when they are killed)."""
    rt.stop()


@pytest.fixture
def make_rt(settings_factory: Callable[..., Settings], runtime_factory: Callable[..., TestRuntime],
            recorder: Recording) -> Iterator[Callable[..., TestRuntime]]:
    """A started runtime with the given services deployed (pubsub settings as keyword arguments).

    The services are bound to the test's recorder (``recorder.bind``), which they record to.

    settings_factory (and so the database) comes first: torn down last, after the runtimes stopped.
    """
    made: list[TestRuntime] = []

    def make(*services: type[Service], settings: Settings | None = None, **pubsub: Any) -> TestRuntime:
        rt = runtime_factory(*recorder.bind_all(services), settings=settings or settings_factory(**pubsub))
        made.append(rt)
        return rt

    yield make
    for rt in made:
        if rt.started:
            stop_runtime(rt)


def queued_rows(rt: TestRuntime, sub_id: int) -> int:
    """Queue entries of a subscription, straight from the database."""
    with rt.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(QueueEntry).where(QueueEntry.sub_id == sub_id)
                            ).scalar_one()


def paused_subscription(rt: TestRuntime, topic: str, service: str, **options: Any) -> Any:
    """A new topic with a service subscribed to it, delivery paused."""
    rt.catalog.create_topic(topic)
    sub = rt.catalog.subscribe(topic, 'service', service=service, options=options or None)
    rt.catalog.set_active(sub.sub_key, False)
    return sub


# Publishing to a service


def test_publish_to_service_retries_until_the_handler_succeeds(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Flaky, Publisher)
    msg_id = rt.invoke('ps.publisher', {'target': 'ps.flaky.target', 'data': {'order': 1},
                                        'kw': {'has_gd': False, 'correl_id': 'c-1'}})
    assert msg_id.startswith('zpsm')

    sub = rt.broker.registry.service_subscription('ps.flaky.target')
    assert sub is not None
    assert sub.pattern == '/zato/s/to/ps_flaky_target'
    assert rt.broker.registry.topic('/zato/s/to/ps_flaky_target').is_service_topic
    wait_until(lambda: len(seen(recorder, 'ps.flaky.target')) >= 3, TIMEOUT, message='three attempts')
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='empty queue')

    attempts = seen(recorder, 'ps.flaky.target')
    assert len(attempts) == 3
    assert [e.count for e in attempts] == [1, 2, 3]
    assert {e.channel for e in attempts} == {CHANNEL_PUBSUB}
    assert all(e.payload == {'order': 1} for e in attempts)
    meta = attempts[-1].meta
    assert meta['msg_id'] == msg_id
    assert meta['topic_name'] == '/zato/s/to/ps_flaky_target'
    assert meta['sub_key'] == sub.sub_key
    assert meta['priority'] == 5
    assert meta['correl_id'] == 'c-1'
    assert meta['publisher'] == 'service:ps.publisher'
    assert meta['has_gd'] is True  # always GD towards a service
    assert rt.catalog.dead_letters(sub.sub_key) == []


def test_a_crash_mid_delivery_means_redelivery_with_the_attempt_counted(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    first = make_rt(Stalling)
    first.broker.publish('ps.stalling', {'n': 1})
    wait_until(lambda: seen(recorder, 'ps.stalling'), TIMEOUT, message='first attempt started')
    stop_runtime(first)  # the handler is killed mid-delivery: nothing was acknowledged

    second = make_rt(Stalling)  # another server on the same database
    wait_until(lambda: len(seen(recorder, 'ps.stalling')) >= 2, TIMEOUT, message='redelivery')
    sub = second.broker.registry.service_subscription('ps.stalling')
    wait_until(lambda: second.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='empty queue')
    assert [(e.payload, e.count) for e in seen(recorder, 'ps.stalling')] == [({'n': 1}, 1), ({'n': 1}, 2)]


# Order, expiration, topic backlog and depth


def test_priority_first_then_publication_order(make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder)
    sub = paused_subscription(rt, 'ps.prio', 'ps.recorder')
    for i, priority in enumerate([1, 9, 5, 9]):
        rt.broker.publish('ps.prio', {'i': i}, priority=priority)
    assert rt.catalog.queue_depth(sub.sub_key) == 4  # queued while paused, not left in the topic
    rt.catalog.set_active(sub.sub_key, True)

    wait_until(lambda: len(seen(recorder, 'ps.recorder')) == 4, TIMEOUT, message='four deliveries')
    order = [(e.payload['i'], e.meta['priority']) for e in seen(recorder, 'ps.recorder')]
    assert order == [(1, 9), (3, 9), (2, 5), (0, 1)]


def test_a_lease_gained_for_a_paused_subscription_starts_no_delivery(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    # The lease refresher computes the leases it wants, then talks to the database: a pause that
    # lands meanwhile must not be overridden by the lease it then gains.
    rt = make_rt(Recorder)
    sub = paused_subscription(rt, 'ps.paused', 'ps.recorder')
    rt.broker.leases_changed({lease_name(sub.id)}, set())
    assert not rt.broker.delivering(sub.id)


def test_an_expired_message_is_never_delivered_and_is_dead_lettered(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder)
    sub = paused_subscription(rt, 'ps.expiring', 'ps.recorder')
    short = rt.broker.publish('ps.expiring', 'short-lived', expiration=0.3)
    rt.broker.publish('ps.expiring', 'long-lived')
    gevent.sleep(0.4)  # let the first one expire
    rt.catalog.set_active(sub.sub_key, True)

    wait_until(lambda: seen(recorder, 'ps.recorder'), TIMEOUT, message='the live message delivered')
    assert payloads(recorder, 'ps.recorder') == ['long-lived']
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='empty queue')
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert dead['msg_id'] == short
    assert dead['reason'] == 'expired'
    assert dead['delivery_count'] == 0


def test_a_message_expiring_between_retries_is_dead_lettered_with_its_last_error(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(AlwaysFails, wait_non_sock_err=0.4)
    msg_id = rt.broker.publish('ps.always.fails', {'order': 7}, expiration=1)
    sub = rt.broker.registry.service_subscription('ps.always.fails')
    wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='dead letter')
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert dead['msg_id'] == msg_id
    assert dead['reason'] == 'expired'
    assert 'RuntimeError: downstream rejected the order' in dead['last_error']
    assert "raise RuntimeError('downstream rejected the order')" in dead['last_traceback']
    assert dead['delivery_count'] == len(seen(recorder, 'ps.always.fails')) >= 1
    assert rt.catalog.queue_depth(sub.sub_key) == 0


def test_the_sweeper_dead_letters_expired_queue_entries_and_drops_expired_topic_messages(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder)
    sub = paused_subscription(rt, 'ps.sweep.queued', 'ps.recorder')
    queued = rt.broker.publish('ps.sweep.queued', 'in a queue', expiration=0.3)
    rt.catalog.create_topic('ps.sweep.waiting')
    rt.broker.publish('ps.sweep.waiting', 'in the topic', expiration=0.3)
    gevent.sleep(0.4)

    counts = rt.broker.sweeper.sweep()
    assert counts['expired_in_queues'] == 1
    assert counts['expired_in_topic'] == 1
    assert rt.catalog.queue_depth(sub.sub_key) == 0
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert (dead['msg_id'], dead['reason']) == (queued, 'expired')
    late = rt.catalog.subscribe('ps.sweep.waiting', 'pull', service='ps.puller')
    assert rt.catalog.queue_depth(late.sub_key) == 0  # nothing expired is handed over


def test_on_no_subs_accept_hands_the_backlog_to_the_first_subscription(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder, RecorderB)
    rt.catalog.create_topic('ps.accepting')  # on_no_subs='accept' is the default
    rt.catalog.create_topic('ps.dropping', on_no_subs='drop')
    kept = rt.broker.publish('ps.accepting', {'n': 1})
    rt.broker.publish('ps.dropping', {'n': 2})

    first = rt.catalog.subscribe('ps.accepting', 'service', service='ps.recorder')
    second = rt.catalog.subscribe('ps.accepting', 'pull', service='ps.puller')
    assert rt.catalog.queue_depth(second.sub_key) == 0  # the backlog went to the first one only
    rt.catalog.subscribe('ps.dropping', 'service', service='ps.recorder.b')
    rt.broker.publish('ps.dropping', {'n': 3})

    wait_until(lambda: seen(recorder, 'ps.recorder') and seen(recorder, 'ps.recorder.b'), TIMEOUT, message='deliveries')
    assert [(e.payload, e.meta['msg_id']) for e in seen(recorder, 'ps.recorder')] == [({'n': 1}, kept)]
    wait_until(lambda: rt.catalog.queue_depth(first.sub_key) == 0, TIMEOUT, message='empty queue')
    assert payloads(recorder, 'ps.recorder.b') == [{'n': 3}]  # {'n': 2} was dropped, so it came before nothing


def test_a_pattern_subscription_takes_the_backlog_of_every_matching_topic(
        make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    for name in ('Invoice.EMEA.received', 'invoice.apac.approved.urgent', 'invoices.other'):
        rt.catalog.create_topic(name)
    first = rt.broker.publish('invoice.emea.received', 1)  # names compare case-insensitively
    second = rt.broker.publish('invoice.apac.approved.urgent', 2)
    rt.broker.publish('invoices.other', 3)
    sub = rt.catalog.subscribe('INVOICE.**', 'pull', service='ps.puller')
    got = get_messages(rt.broker, sub.sub_key)
    assert [(m['msg_id'], m['topic_name']) for m in got] == [
        (first, 'Invoice.EMEA.received'), (second, 'invoice.apac.approved.urgent')]


def test_expiration_is_capped_by_the_topic_and_retention_wins(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ps.capped', limit_message_expiry=60)
    sub = rt.catalog.subscribe('ps.capped', 'pull', service='ps.puller')
    rt.broker.publish('ps.capped', 1, expiration=3600)
    rt.broker.publish('ps.capped', 2)
    assert [m['expiration'] for m in get_messages(rt.broker, sub.sub_key)] == [60, 60]

    rt.catalog.create_topic('ps.unretained', limit_retention=0)  # nothing waits in this topic
    rt.broker.publish('ps.unretained', 1)
    assert rt.broker.sweeper.sweep()['over_retention'] == 1
    late = rt.catalog.subscribe('ps.unretained', 'pull', service='ps.puller')
    assert get_messages(rt.broker, late.sub_key) == []


def test_past_max_depth_a_publication_goes_to_the_overflow_log(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ps.deep', max_depth_gd=2, depth_check_freq=100)
    ids = [rt.broker.publish('ps.deep', {'n': i}) for i in range(3)]
    assert [i.overflowed for i in ids] == [False, False, True]

    path = rt.settings.path(rt.settings.pubsub.overflow_dir) / 'ps.deep.jsonl'
    assert path.is_relative_to(rt.settings.base_dir)
    [line] = [json.loads(text) for text in path.read_text(encoding='utf-8').splitlines()]
    assert line['msg_id'] == ids[2]
    assert line['topic_name'] == 'ps.deep'
    assert json.loads(line['data']) == {'n': 2}

    # Only the two the topic kept are handed over: the overflow log is never re-read.
    sub = rt.catalog.subscribe('ps.deep', 'pull', service='ps.puller')
    assert [m['msg_id'] for m in get_messages(rt.broker, sub.sub_key)] == ids[:2]

    # Non-GD messages have a depth limit of their own.
    rt.catalog.create_topic('ps.deep.ram', has_gd=False, max_depth_non_gd=1)
    assert [rt.broker.publish('ps.deep.ram', i).overflowed for i in range(2)] == [False, True]


def test_on_max_depth_reject_raises_topic_full(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ps.full', max_depth_gd=2, on_max_depth='reject')
    rt.broker.publish('ps.full', 1)
    rt.broker.publish('ps.full', 2)
    with pytest.raises(TopicFull) as info:
        rt.broker.publish('ps.full', 3)
    assert info.value.http_status == 503
    assert info.value.name == 'ps.full'
    assert not (rt.settings.path(rt.settings.pubsub.overflow_dir) / 'ps.full.jsonl').exists()


def test_a_topic_emptied_by_a_hand_over_takes_publications_again(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ps.refill', max_depth_gd=2, on_max_depth='reject')
    rt.broker.publish('ps.refill', 1)
    rt.broker.publish('ps.refill', 2)
    sub = rt.catalog.subscribe('ps.refill', 'pull', service='ps.puller')  # takes both: the topic is empty
    rt.catalog.unsubscribe(sub.sub_key)
    first = rt.broker.publish('ps.refill', 3)  # waits in the topic again, well below its max depth
    second = rt.broker.publish('ps.refill', 4)
    assert not first.overflowed and not second.overflowed


# Failures


def test_a_poison_message_is_dead_lettered_while_later_ones_flow(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Poisoned)
    sub = paused_subscription(rt, 'ps.poison.flow', 'ps.poisoned', max_attempts=3, err_should_block=False,
                              wait_non_sock_err=0.05)
    poison = rt.broker.publish('ps.poison.flow', 'poison')
    rt.broker.publish('ps.poison.flow', 'a')
    rt.broker.publish('ps.poison.flow', 'b')
    rt.catalog.set_active(sub.sub_key, True)

    wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='dead letter')
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='empty queue')
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert dead['msg_id'] == poison
    assert dead['reason'] == 'max_attempts'
    assert dead['delivery_count'] == 3
    assert 'ValueError: cannot digest this poison pill' in dead['last_error']
    assert (dead['data'], dead['mime_type']) == ('poison', 'text/plain')

    order = [(e.payload, e.count) for e in seen(recorder, 'ps.poisoned')]
    assert sorted(order) == [('a', 1), ('b', 1), ('poison', 1), ('poison', 2), ('poison', 3)]
    assert order.index(('a', 1)) < order.index(('poison', 2))
    assert order.index(('b', 1)) < order.index(('poison', 2))


def test_a_failing_subscriber_s_traceback_is_logged_and_kept_with_the_dead_letter(
        make_rt: Callable[..., TestRuntime], caplog: pytest.LogCaptureFixture) -> None:
    rt = make_rt(Poisoned)
    sub = paused_subscription(rt, 'ps.poison.trace', 'ps.poisoned', max_attempts=3, wait_non_sock_err=0.05)
    poison = rt.broker.publish('ps.poison.trace', 'poison')
    with caplog.at_level(logging.INFO, logger='runtime.pubsub.delivery'):
        rt.catalog.set_active(sub.sub_key, True)
        wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='dead letter')

    [dead] = rt.catalog.dead_letters(sub.sub_key)
    # The file and line that raised, not only "ValueError: ...".
    assert dead['last_error'] == 'ValueError: cannot digest this poison pill'
    assert dead['last_traceback'].startswith('Traceback (most recent call last):')
    assert 'test_broker.py", line' in dead['last_traceback']
    assert "raise ValueError('cannot digest this poison pill')" in dead['last_traceback']

    lines = [r for r in caplog.records if r.name == 'runtime.pubsub.delivery' and poison in r.getMessage()]
    assert [(r.levelname, 'Traceback' in r.getMessage()) for r in lines] == [
        ('WARNING', True), ('INFO', False), ('ERROR', True)]
    assert all('test_broker.py' in r.getMessage() for r in (lines[0], lines[2]))


def test_a_waiting_retry_shows_its_traceback_in_the_queue_message_view(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(Poisoned, wait_non_sock_err=60, max_wait_secs=60)
    rt.catalog.create_topic('ps.poison.view')
    sub = rt.catalog.subscribe('ps.poison.view', 'service', service='ps.poisoned')
    msg_id = rt.broker.publish('ps.poison.view', 'poison')

    def view() -> dict[str, Any] | None:
        row = run_transaction(rt.engine, lambda c: queue_statements.queue_message(c, sub.id, msg_id), write=False)
        return admin_view(row) if row is not None and row.last_error else None

    shown = wait_until(view, TIMEOUT, message='first attempt stored')
    assert shown['last_error'] == 'ValueError: cannot digest this poison pill'
    assert "raise ValueError('cannot digest this poison pill')" in shown['last_traceback']
    # Lists stay small: only a message's own view carries the traceback.
    listed = run_transaction(rt.engine, lambda c: queue_statements.browse_queue(c, sub.id, 10, 0), write=False)
    assert [m['msg_id'] for m in listed] == [msg_id] and 'last_traceback' not in listed[0]


def test_a_poison_message_blocks_later_ones_until_dead_lettered(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Poisoned)
    sub = paused_subscription(rt, 'ps.poison.block', 'ps.poisoned', max_attempts=3, wait_non_sock_err=0.05)
    assert sub.options.err_should_block is True  # the default
    rt.broker.publish('ps.poison.block', 'poison')
    rt.broker.publish('ps.poison.block', 'a')
    rt.broker.publish('ps.poison.block', 'b')
    rt.catalog.set_active(sub.sub_key, True)

    wait_until(lambda: len(seen(recorder, 'ps.poisoned')) >= 5, TIMEOUT, message='five deliveries')
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='empty queue')
    assert [(e.payload, e.count) for e in seen(recorder, 'ps.poisoned')] == [
        ('poison', 1), ('poison', 2), ('poison', 3), ('a', 1), ('b', 1)]
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert (dead['reason'], dead['delivery_count']) == ('max_attempts', 3)


def test_max_in_flight_processes_messages_concurrently(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(InFlight)
    sub = paused_subscription(rt, 'ps.parallel', 'ps.in.flight', max_in_flight=3)
    for i in range(6):
        rt.broker.publish('ps.parallel', i)
    rt.catalog.set_active(sub.sub_key, True)

    wait_until(lambda: len(seen(recorder, 'ps.in.flight')) == 6, TIMEOUT, message='six deliveries')
    assert sorted(payloads(recorder, 'ps.in.flight')) == list(range(6))
    assert 2 <= recorder.bind(InFlight).peak <= 3
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='empty queue')


# Patterns and hooks


def test_a_pattern_subscription_receives_topics_created_later(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder, RecorderB)
    deep = rt.catalog.subscribe('orders.**', 'service', service='ps.recorder')
    one_level = rt.catalog.subscribe('orders.*', 'service', service='ps.recorder.b')
    rt.catalog.create_topic('orders.emea.created')
    rt.catalog.create_topic('orders.apac')

    rt.broker.publish('orders.emea.created', {'id': 1})
    assert rt.catalog.queue_depth(one_level.sub_key) == 0  # '*' is one segment only
    rt.broker.publish('orders.apac', {'id': 2})

    wait_until(lambda: len(seen(recorder, 'ps.recorder')) == 2 and seen(recorder, 'ps.recorder.b'), TIMEOUT,
               message='deliveries')
    assert [(e.payload, e.meta['topic_name']) for e in seen(recorder, 'ps.recorder')] == [
        ({'id': 1}, 'orders.emea.created'), ({'id': 2}, 'orders.apac')]
    assert [e.meta['sub_key'] for e in seen(recorder, 'ps.recorder')] == [deep.sub_key] * 2
    assert [(e.payload, e.meta['topic_name']) for e in seen(recorder, 'ps.recorder.b')] == [({'id': 2}, 'orders.apac')]


def test_a_topic_hook_transforms_deletes_and_skips(make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder, Hook)
    rt.catalog.create_topic('ps.hooked', hook_service='ps.hook')
    sub = rt.catalog.subscribe('ps.hooked', 'service', service='ps.recorder')
    rt.catalog.set_active(sub.sub_key, False)
    rt.broker.publish('ps.hooked', {'hook': 'delete', 'n': 1})
    rt.broker.publish('ps.hooked', {'hook': 'skip', 'n': 2})
    rt.broker.publish('ps.hooked', {'hook': 'deliver', 'n': 3})
    rt.catalog.set_active(sub.sub_key, True)

    wait_until(lambda: len(seen(recorder, 'ps.recorder')) == 2, TIMEOUT, message='two deliveries')
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='empty queue')
    assert [(e.payload, e.count) for e in seen(recorder, 'ps.recorder')] == [
        ({'hook': 'skip', 'n': 2, 'enriched': True}, 2),  # skipped once, delivered on the next attempt
        ({'hook': 'deliver', 'n': 3, 'enriched': True}, 1)]
    assert rt.catalog.dead_letters(sub.sub_key) == []
    hook_calls = seen(recorder, 'ps.hook')
    assert {e.channel for e in hook_calls} == {CHANNEL_HOOK}
    assert [e.payload['n'] for e in hook_calls] == [1, 2, 2, 3]


def test_a_subscription_hook_applies_to_its_own_queue_only(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder, RecorderB, Hook)
    rt.catalog.create_topic('ps.sub.hooked')
    rt.catalog.subscribe('ps.sub.hooked', 'service', service='ps.recorder', options={'hook_service': 'ps.hook'})
    rt.catalog.subscribe('ps.sub.hooked', 'service', service='ps.recorder.b')
    rt.broker.publish('ps.sub.hooked', {'hook': 'deliver', 'n': 1})
    wait_until(lambda: seen(recorder, 'ps.recorder') and seen(recorder, 'ps.recorder.b'), TIMEOUT, message='deliveries')
    assert payloads(recorder, 'ps.recorder') == [{'hook': 'deliver', 'n': 1, 'enriched': True}]
    assert payloads(recorder, 'ps.recorder.b') == [{'hook': 'deliver', 'n': 1}]


# Validation


def test_publications_are_validated(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(max_message_size=100)
    rt.catalog.create_topic('ps.valid')
    rt.catalog.create_topic('ps.off', is_active=False)
    sub = rt.catalog.subscribe('ps.**', 'pull', service='ps.puller')

    with pytest.raises(TopicNotFound):
        rt.broker.publish('ps.nowhere', 1)
    with pytest.raises(TopicInactive):
        rt.broker.publish('ps.off', 1)
    with pytest.raises(InvalidMessage) as info:
        rt.broker.publish('ps.valid', 1, priority=10)
    assert info.value.field == 'priority' and 'priority' in str(info.value)
    with pytest.raises(InvalidMessage) as info:
        rt.broker.publish('ps.valid', None)
    assert info.value.field == 'data' and 'data' in str(info.value)
    with pytest.raises(MessageTooLarge) as too_large:
        rt.broker.publish('ps.valid', 'x' * 101)
    assert too_large.value.http_status == 413
    for name in ('#', 'ps#valid', ' ps.valid', 'ps.valid ', 'x' * 201, 'ps.*'):
        with pytest.raises(InvalidTopicName):
            rt.broker.publish(name, 1)
        with pytest.raises(InvalidTopicName):
            rt.catalog.create_topic(name)
    assert rt.catalog.queue_depth(sub.sub_key) == 0  # nothing of it was stored

    rt.broker.publish('PS.VALID', 'x' * 100)  # names compare case-insensitively; 100 bytes is allowed
    assert [m['topic_name'] for m in get_messages(rt.broker, sub.sub_key)] == ['ps.valid']


def test_auto_create_topics(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(auto_create_topics=True)
    msg_id = rt.broker.publish('ps.made.on.the.fly', {'n': 1})
    assert rt.broker.registry.topic('ps.made.on.the.fly') is not None
    sub = rt.catalog.subscribe('ps.made.on.the.fly', 'pull', service='ps.puller')
    assert [m['msg_id'] for m in get_messages(rt.broker, sub.sub_key)] == [msg_id]


# Pull subscriptions of a service


def test_a_service_pulls_its_own_subscription(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(Puller)
    rt.catalog.create_topic('ps.pull')
    sub_key = rt.invoke('ps.puller', {'op': 'subscribe', 'topic': 'ps.pull'})
    sub = rt.broker.registry.subs_by_key[sub_key]
    assert (sub.kind, sub.service) == ('pull', 'ps.puller')

    ids = [rt.broker.publish('ps.pull', {'n': n}, priority=p) for n, p in enumerate([5, 5, 9, 5])]
    got = rt.invoke('ps.puller', {'op': 'get', 'sub_key': sub_key, 'max_messages': 3})
    assert [m['data'] for m in got] == [{'n': 2}, {'n': 0}, {'n': 1}]
    assert [m['msg_id'] for m in got] == [ids[2], ids[0], ids[1]]
    assert {m['sub_key'] for m in got} == {sub_key}
    got = rt.invoke('ps.puller', {'op': 'get', 'sub_key': sub_key})
    assert [m['data'] for m in got] == [{'n': 3}]
    assert rt.invoke('ps.puller', {'op': 'get', 'sub_key': sub_key}) == []  # taken messages are gone

    rt.broker.publish('ps.pull', {'n': 4})
    assert rt.catalog.queue_depth(sub_key) == 1
    rt.invoke('ps.puller', {'op': 'unsubscribe', 'sub_key': sub_key})
    assert queued_rows(rt, sub.id) == 0
    with pytest.raises(SubscriptionNotFound):
        rt.catalog.queue_depth(sub_key)
    with pytest.raises(SubscriptionNotFound):
        rt.invoke('ps.puller', {'op': 'get', 'sub_key': sub_key})


def test_a_pull_of_an_expired_message_dead_letters_it(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ps.pull.expiring')
    sub = rt.catalog.subscribe('ps.pull.expiring', 'pull', service='ps.puller')
    short = rt.broker.publish('ps.pull.expiring', 'short-lived', expiration=0.3)
    rt.broker.publish('ps.pull.expiring', 'long-lived')
    gevent.sleep(0.4)
    assert [m['data'] for m in get_messages(rt.broker, sub.sub_key)] == ['long-lived']
    assert rt.catalog.queue_depth(sub.sub_key) == 0
    assert [(d['msg_id'], d['reason']) for d in rt.catalog.dead_letters(sub.sub_key)] == [(short, 'expired')]


# Config objects


OBJECTS = '''
pubsub_topic:
  - name: cfg.orders
    on_no_subs: drop
pubsub_subscription:
  - name: cfg-orders-to-recorder
    service: ps.recorder
    topic_list: [cfg.orders]
    delivery_type: push
    max_attempts: 7
    wait_non_sock_err: 0.05
'''


def test_config_objects_declare_topics_and_subscriptions(
        make_rt: Callable[..., TestRuntime], settings_factory: Callable[..., Settings], recorder: Recording) -> None:
    settings = settings_factory()
    objects_dir = settings.path(settings.objects.dir)
    assert objects_dir.is_relative_to(settings.base_dir)
    objects_dir.mkdir(parents=True)
    path = objects_dir / 'pubsub.yaml'
    path.write_text(OBJECTS, encoding='utf-8')
    rt = make_rt(Recorder, settings=settings)

    topic = rt.broker.registry.topic('cfg.orders')
    assert topic is not None and topic.on_no_subs == 'drop'
    [sub] = rt.broker.registry.all_subscribers('cfg.orders')
    assert (sub.kind, sub.service, sub.options.max_attempts) == ('service', 'ps.recorder', 7)
    assert sub.options.err_should_block is True
    rt.broker.publish('cfg.orders', {'n': 1})
    wait_until(lambda: payloads(recorder, 'ps.recorder') == [{'n': 1}], TIMEOUT, message='delivery')

    path.write_text(OBJECTS.replace('max_attempts: 7', 'max_attempts: 2\n    err_should_block: false'),
                    encoding='utf-8')
    assert 'pubsub' in rt.objects.apply()
    rt.synchronizer.poll()
    [updated] = rt.broker.registry.all_subscribers('cfg.orders')
    assert updated.sub_key == sub.sub_key  # updated in place: same queue
    assert (updated.options.max_attempts, updated.options.err_should_block) == (2, False)

    path.write_text(OBJECTS.split('pubsub_subscription:')[0], encoding='utf-8')
    rt.objects.apply()
    rt.synchronizer.poll()
    assert rt.broker.registry.all_subscribers('cfg.orders') == []
    assert sub.sub_key not in rt.broker.registry.subs_by_key
    assert rt.broker.registry.topic('cfg.orders') is not None

    path.write_text('{}\n', encoding='utf-8')
    rt.objects.apply()
    rt.synchronizer.poll()
    assert rt.broker.registry.topic('cfg.orders') is None


# Regressions


def test_a_greenlet_killed_mid_transaction_leaves_its_thread_the_connection(tmp_path: Path) -> None:
    # What set_active(False), unsubscribe, a lost lease and Runtime.stop() do to a delivery loop
    # that is inside a SQLite transaction.
    engine = make_engine(f'sqlite:///{tmp_path / "kill.db"}', pool_size=1)
    real_sleep = gevent.monkey.get_original('time', 'sleep')
    outcome: list[Any] = []

    def work(conn: Any) -> None:
        real_sleep(0.2)  # in the thread pool, inside the transaction
        try:
            outcome.append(conn.execute(text('SELECT 1')).scalar())
        except Exception as e:
            outcome.append(type(e).__name__)

    greenlet = gevent.spawn(run_transaction, engine, work)
    gevent.sleep(0.05)
    greenlet.kill()
    gevent.get_hub().threadpool.join()
    engine.dispose()
    assert outcome == [1]


def test_a_subscription_paused_and_resumed_at_once_delivers_again(
        make_rt: Callable[..., TestRuntime], recorder: Recording) -> None:
    rt = make_rt(Recorder, lease_renew_secs=2.0)  # both changes fall between two lease refreshes
    rt.catalog.create_topic('ps.resume')
    sub = rt.catalog.subscribe('ps.resume', 'service', service='ps.recorder')
    rt.broker.publish('ps.resume', {'i': 0})
    wait_until(lambda: len(seen(recorder, 'ps.recorder')) == 1, TIMEOUT, message='first delivery')
    rt.catalog.set_active(sub.sub_key, False)
    rt.catalog.set_active(sub.sub_key, True)
    rt.broker.publish('ps.resume', {'i': 1})
    wait_until(lambda: len(seen(recorder, 'ps.recorder')) == 2, TIMEOUT, message='delivery after the resume')
