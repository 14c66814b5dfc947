"""WebSocket subscriptions on the pub/sub side, in-process, on SQLite and on PostgreSQL; no HTTP.

A ``FakeClient`` stands for a connection (``runtime.pubsub.subscribers.websocket.Attached``): it
records the batches it is handed and answers each message as the test says (acked, left, not
acked in time), or holds the batch until it is closed, as a connection waiting for acks does.
Leases are renewed every 0.1 s; background work is awaited with ``wait_until``.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest
from gevent.event import Event
from sqlalchemy import func, select, update

from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.db.models import Lease, QueueEntry, Subscription, WsClient
from runtime.errors import ConfigError, SubscriptionNotFound
from runtime.pubsub.broker import lease_name
from runtime.pubsub.delivery import Outcome
from runtime.pubsub.leases import LeaseManager
from runtime.pubsub.observers import PubSubObserver
from runtime.pubsub.registry import Registry, SubInfo, TopicInfo
from runtime.pubsub.subscribers.websocket import AckTimeout, ClientGone, clients
from runtime.pubsub.subscribers.websocket.clients import inactivity_limits
from runtime.testing import TestRuntime, make_settings, wait_until

#: Broker settings of every runtime here: short waits, quick lease renewal (and so a quick heartbeat).
FAST = {'wait_non_sock_err': 0.05, 'wait_sock_err': 0.05, 'max_wait_secs': 1.0, 'lease_renew_secs': 0.1,
        'poll_interval_secs': 0.02, 'sweep_interval_secs': 3600.0}

TIMEOUT = 30.0  # how long a condition may take under load; met conditions return at once

PEER = '127.0.0.1:50000'


class FakeClient:
    """A connection as the delivery loop sees it: records batches, answers as told."""

    def __init__(self, answer: str = 'ack') -> None:
        #: 'ack' (acknowledged), 'timeout' (AckTimeout), or 'hold' (wait until closed, then ClientGone).
        self.answer = answer
        self.batches: list[list[Any]] = []
        self.counts: list[list[int]] = []
        self.taken: list[int] = []
        self.closed = Event()
        self._held = 0

    @property
    def received(self) -> list[Any]:
        return [data for batch in self.batches for data in batch]

    def deliver_batch(self, sub: SubInfo, batch: list[Any]) -> list[Outcome]:
        self.batches.append([d.payload() for d in batch])
        self.counts.append([d.delivery_count for d in batch])
        if self.answer == 'ack':
            return [Outcome(d, True) for d in batch]
        if self.answer == 'timeout':
            return [Outcome(d, False, AckTimeout(0.05)) for d in batch]
        self._held = len(batch)
        self.closed.wait()
        self._held = 0
        return [Outcome(d, False, ClientGone()) for d in batch]

    @property
    def in_flight(self) -> int:
        return self._held

    def taken_over(self, sub_id: int) -> None:
        self.taken.append(sub_id)
        self.closed.set()

    def close(self) -> None:
        self.closed.set()


class ExpiryRecorder(PubSubObserver):
    def __init__(self) -> None:
        self.expired: list[SubInfo] = []

    def on_subscription_expired(self, sub: SubInfo) -> None:
        self.expired.append(sub)


@pytest.fixture
def make_rt(db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime]) -> Callable[..., TestRuntime]:
    """A started runtime on the database under test (db_url first: dropped after the runtimes stopped)."""
    counter = itertools.count()

    def make(**pubsub: Any) -> TestRuntime:
        n = next(counter)
        base = tmp_path / f'ws{n}'
        base.mkdir()
        settings = make_settings(base, db_url)
        for key, value in {**FAST, **pubsub}.items():
            assert hasattr(settings.pubsub, key), key
            setattr(settings.pubsub, key, value)
        rt = runtime_factory(settings=settings)
        if n == 0:  # the subscriber of these tests, allowed to read every topic (later runtimes load it at start)
            rt.security_admin.create({'name': 'alice', 'username': 'alice', 'realm': 'Conduit', 'is_active': True},
                                     'alice-password-1')
            rt.permission_admin.update('alice', [], ['**'])
        return rt

    return make


def lease_owner(rt: TestRuntime, sub_id: int) -> str | None:
    with rt.engine.connect() as conn:
        return conn.execute(select(Lease.owner).where(Lease.name == lease_name(sub_id))).scalar()


def entries(rt: TestRuntime, sub_id: int) -> list[Any]:
    with rt.engine.connect() as conn:
        return list(conn.execute(select(QueueEntry.delivery_count, QueueEntry.next_attempt_at)
                                 .where(QueueEntry.sub_id == sub_id).order_by(QueueEntry.message_id)).all())


def client_row(rt: TestRuntime, sub_id: int) -> dict[str, Any] | None:
    with rt.engine.connect() as conn:
        return next((c for c in clients.websocket_clients(conn) if c['sub_id'] == sub_id), None)


def set_activity(rt: TestRuntime, sub_id: int, last_active_at: float, owner: str | None = None) -> None:
    values: dict[str, Any] = {'last_active_at': last_active_at}
    if owner is not None:
        values['owner'] = owner
    with rt.engine.begin() as conn:
        conn.execute(update(WsClient).where(WsClient.sub_id == sub_id).values(**values))


def subscription_rows(rt: TestRuntime, sub_id: int) -> tuple[int, int, int]:
    """(subscription rows, ws_client rows, queue entries) of a subscription id."""
    with rt.engine.connect() as conn:
        return tuple(conn.execute(select(func.count()).select_from(model).where(column == sub_id)).scalar_one()
                     for model, column in ((Subscription, Subscription.id), (WsClient, WsClient.sub_id),
                                           (QueueEntry, QueueEntry.sub_id)))  # type: ignore[return-value]


# Subscribing


def test_a_subscription_gets_its_client_row_and_no_delivery_until_a_client_attaches(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.orders')
    sub = rt.ws_hub.subscribe('alice', 'ws.orders', 7)
    assert (sub.kind, sub.security, sub.options.delivery_batch_size) == ('websocket', 'alice', 7)
    rt.broker.publish('ws.orders', {'n': 1})
    row = client_row(rt, sub.id)
    assert row is not None and set(row) == {
        'sub_id', 'sub_key', 'security', 'pattern', 'is_active', 'window', 'owner', 'peer', 'connected',
        'connected_at', 'last_active_at', 'in_flight', 'queue_depth'}
    assert (row['sub_key'], row['security'], row['pattern'], row['is_active'], row['window']) == (
        sub.sub_key, 'alice', 'ws.orders', True, 7)
    assert (row['owner'], row['peer'], row['connected'], row['connected_at'], row['in_flight'],
            row['queue_depth']) == ('', '', False, None, 0, 1)
    gevent.sleep(0.5)  # several lease refreshes
    assert not rt.broker.delivering(sub.id) and lease_owner(rt, sub.id) is None
    assert rt.ws_hub.queue_depth(sub) == 1


def test_a_websocket_subscription_names_no_service_nor_url_and_a_bad_pattern_is_a_config_error(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.checked')
    with pytest.raises(ConfigError, match='no service'):
        rt.catalog.subscribe('ws.checked', 'websocket', service='some.service')
    with pytest.raises(ConfigError, match='no push_url'):
        rt.catalog.subscribe('ws.checked', 'websocket', push_url='http://127.0.0.1:9/x')
    with pytest.raises(ConfigError):
        rt.ws_hub.subscribe('alice', ' bad name', 10)


def test_find_returns_only_the_caller_s_own_websocket_subscription(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.found')
    sub = rt.ws_hub.subscribe('alice', 'ws.found', 10)
    pulled = rt.catalog.subscribe('ws.found', 'pull', security='alice')
    assert rt.ws_hub.find('alice', sub.sub_key) == sub
    for security, key in (('bob', sub.sub_key), ('alice', pulled.sub_key), ('alice', 'sk.' + '0' * 40)):
        with pytest.raises(SubscriptionNotFound):
            rt.ws_hub.find(security, key)


# Attaching and detaching


def test_a_message_of_a_topic_the_subscriber_may_no_longer_read_is_dropped_not_sent(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.secret')
    sub = rt.ws_hub.subscribe('alice', 'ws.secret', 10)
    rt.broker.publish('ws.secret', 'queued while allowed')
    rt.permission_admin.update('alice', [], ['ws.other'])
    client = FakeClient()
    assert rt.ws_hub.attach(sub, client, PEER) == 1
    wait_until(lambda: rt.ws_hub.queue_depth(sub) == 0, TIMEOUT, message='the message dropped')
    assert client.received == []


def test_attach_takes_the_lease_and_the_client_gets_the_messages_in_order(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.ordered')
    sub = rt.ws_hub.subscribe('alice', 'ws.ordered', 2)
    for n in range(5):
        rt.broker.publish('ws.ordered', {'n': n})
    client = FakeClient()
    assert rt.ws_hub.attach(sub, client, PEER) == 5
    wait_until(lambda: len(client.received) == 5, TIMEOUT, message='five messages delivered')
    assert client.received == [{'n': n} for n in range(5)]
    assert all(len(batch) <= 2 for batch in client.batches)  # the window is the batch size
    assert lease_owner(rt, sub.id) == rt.broker.leases.owner
    wait_until(lambda: rt.ws_hub.queue_depth(sub) == 0, TIMEOUT, message='acked messages leave the queue')
    row = client_row(rt, sub.id)
    assert row is not None
    assert (row['owner'], row['peer'], row['connected']) == (rt.broker.leases.owner, PEER, True)
    assert row['connected_at'] is not None
    rt.broker.publish('ws.ordered', {'n': 5})  # a publication reaches the attached client at once
    wait_until(lambda: len(client.received) == 6, TIMEOUT, message='a new publication delivered')


def test_detach_stops_delivery_at_once_and_the_unacked_messages_are_due_again_counted(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.left')
    sub = rt.ws_hub.subscribe('alice', 'ws.left', 10)
    for n in range(3):
        rt.broker.publish('ws.left', n)
    client = FakeClient('hold')
    rt.ws_hub.attach(sub, client, PEER)
    wait_until(lambda: client.batches, TIMEOUT, message='a batch handed to the client')
    wait_until(lambda: client_row(rt, sub.id)['in_flight'] == 3, TIMEOUT, message='in_flight written')
    # The connection closes: its pending batch answers ClientGone, then it detaches.
    client.close()
    rt.ws_hub.detach(sub.id, client)
    assert not rt.broker.delivering(sub.id)
    assert lease_owner(rt, sub.id) is None
    rows = entries(rt, sub.id)
    assert [r.delivery_count for r in rows] == [1, 1, 1]
    assert all(r.next_attempt_at <= time.time() for r in rows)
    row = client_row(rt, sub.id)
    assert (row['owner'], row['connected'], row['connected_at'], row['in_flight']) == ('', False, None, 0)
    gevent.sleep(0.5)  # the lease is not taken again while no client is attached
    assert lease_owner(rt, sub.id) is None and not rt.broker.delivering(sub.id)
    # Resumed later: the same messages, with their attempt counted.
    again = FakeClient()
    assert rt.ws_hub.attach(rt.ws_hub.find('alice', sub.sub_key), again, PEER) == 3
    wait_until(lambda: len(again.received) == 3, TIMEOUT, message='redelivered on resume')
    assert again.received == [0, 1, 2] and again.counts[0] == [2, 2, 2]


def test_detaching_a_connection_that_no_longer_holds_the_subscription_changes_nothing(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.moved')
    sub = rt.ws_hub.subscribe('alice', 'ws.moved', 10)
    first, second = FakeClient('hold'), FakeClient()
    rt.ws_hub.attach(sub, first, PEER)
    rt.ws_hub.attach(sub, second, '127.0.0.1:50001')
    assert first.taken == [sub.id]  # resumed on another connection of this worker: told at once
    rt.ws_hub.detach(sub.id, first)  # the old connection closes afterwards
    wait_until(lambda: rt.broker.delivering(sub.id), TIMEOUT, message='still delivered to the second connection')
    rt.broker.publish('ws.moved', 'after')
    wait_until(lambda: second.received == ['after'], TIMEOUT, message='the second connection gets it')
    assert client_row(rt, sub.id)['peer'] == '127.0.0.1:50001'


def test_a_message_never_acked_is_dead_lettered_after_max_attempts(make_rt) -> None:
    rt = make_rt(max_attempts=3)
    rt.catalog.create_topic('ws.unacked')
    sub = rt.ws_hub.subscribe('alice', 'ws.unacked', 10)
    rt.broker.publish('ws.unacked', 'never acked')
    client = FakeClient('timeout')
    rt.ws_hub.attach(sub, client, PEER)
    dead = wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='a dead letter')
    assert [(d['reason'], d['delivery_count']) for d in dead] == [('max_attempts', 3)]
    assert 'AckTimeout' in dead[0]['last_error']
    assert client.received == ['never acked'] * 3
    assert rt.ws_hub.queue_depth(sub) == 0


def test_a_client_resuming_on_another_worker_takes_the_subscription_over(make_rt) -> None:
    rt1, rt2 = make_rt(), make_rt()
    rt1.catalog.create_topic('ws.takeover')
    sub = rt1.ws_hub.subscribe('alice', 'ws.takeover', 10)
    first = FakeClient('hold')
    rt1.ws_hub.attach(sub, first, PEER)
    rt1.broker.publish('ws.takeover', 'one')
    wait_until(lambda: first.batches, TIMEOUT, message='delivered on the first worker')
    second = FakeClient()
    rt2.ws_hub.attach(rt2.ws_hub.find('alice', sub.sub_key), second, '127.0.0.1:50002')
    # The first worker's heartbeat sees the row owned by the second: tells its connection, hands the lease back.
    wait_until(lambda: first.taken == [sub.id], TIMEOUT, message='the first connection told')
    wait_until(lambda: not rt1.broker.delivering(sub.id), TIMEOUT, message='the first worker stopped delivering')
    wait_until(lambda: lease_owner(rt2, sub.id) == rt2.broker.leases.owner, TIMEOUT, message='the lease moved')
    wait_until(lambda: second.received == ['one'], TIMEOUT, message='the unacked message, on the new connection')
    assert second.counts == [[2]]
    assert sub.id not in rt1.ws_attachments and sub.id in rt2.ws_attachments
    # The first connection closing afterwards changes nothing for the second.
    rt1.ws_hub.detach(sub.id, first)
    assert client_row(rt2, sub.id)['owner'] == rt2.broker.leases.owner


def test_unsubscribe_and_topic_deletion_remove_the_client_row_with_the_queue(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.gone')
    sub = rt.ws_hub.subscribe('alice', 'ws.gone', 10)
    rt.broker.publish('ws.gone', 'x')
    client = FakeClient('hold')
    rt.ws_hub.attach(sub, client, PEER)
    wait_until(lambda: client.batches, TIMEOUT, message='delivered')
    client.close()
    rt.ws_hub.unsubscribe(sub)
    assert subscription_rows(rt, sub.id) == (0, 0, 0)
    assert not rt.broker.delivering(sub.id) and sub.id not in rt.ws_attachments
    other = rt.ws_hub.subscribe('alice', 'ws.gone', 10)
    rt.topic_admin.delete(rt.topic_admin.get('ws.gone'))
    assert subscription_rows(rt, other.id) == (0, 0, 0)


# Inactivity


def test_inactive_subscriptions_are_deleted_with_their_queue_and_announced(make_rt, caplog) -> None:
    rt = make_rt()
    observer = ExpiryRecorder()
    rt.broker.observers.add(observer)
    rt.catalog.create_topic('ws.idle', limit_sub_inactivity=100)
    stale, fresh, attached, dead_owner, recent_owner = (rt.ws_hub.subscribe('alice', 'ws.idle', 10)
                                                         for _ in range(5))
    rt.broker.publish('ws.idle', 'queued')
    now = time.time()
    set_activity(rt, stale.id, now - 500)
    set_activity(rt, fresh.id, now - 50)
    client = FakeClient()
    rt.ws_hub.attach(attached, client, PEER)
    # A worker that died with its client attached: kept for max(limit, 3 lease TTLs) = 100 s here.
    set_activity(rt, dead_owner.id, now - 500, owner='host:1:dead')
    set_activity(rt, recent_owner.id, now - 50, owner='host:1:dead')
    with caplog.at_level(logging.WARNING, logger='runtime.pubsub.sweeper'):
        counts = rt.broker.sweeper.sweep()
    assert counts['inactive_subscriptions'] == 2
    assert subscription_rows(rt, stale.id) == (0, 0, 0) and subscription_rows(rt, dead_owner.id) == (0, 0, 0)
    assert {s.id for s in observer.expired} == {stale.id, dead_owner.id}
    for kept in (fresh, attached, recent_owner):
        assert subscription_rows(rt, kept.id)[:2] == (1, 1)
    assert stale.id not in rt.broker.registry.subs and fresh.id in rt.broker.registry.subs
    logged = [r.getMessage() for r in caplog.records if 'limit_sub_inactivity' in r.getMessage()]
    assert len(logged) == 2 and stale.label in '\n'.join(logged)
    assert not any(stale.sub_key in r.getMessage() or dead_owner.sub_key in r.getMessage() for r in caplog.records)
    assert rt.broker.sweeper.sweep()['inactive_subscriptions'] == 0


def test_a_limit_of_zero_never_expires_and_a_pattern_takes_the_largest_limit(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.forever', limit_sub_inactivity=0)
    rt.catalog.create_topic('ws.p.short', limit_sub_inactivity=100)
    rt.catalog.create_topic('ws.p.long', limit_sub_inactivity=1000)
    forever = rt.ws_hub.subscribe('alice', 'ws.forever', 10)
    pattern = rt.ws_hub.subscribe('alice', 'ws.p.*', 10)
    expiring = rt.ws_hub.subscribe('alice', 'ws.p.*', 10)
    unmatched = rt.ws_hub.subscribe('alice', 'ws.none.*', 10)
    now = time.time()
    set_activity(rt, forever.id, 0.0)
    set_activity(rt, pattern.id, now - 500)  # past ws.p.short's limit, within ws.p.long's
    set_activity(rt, expiring.id, now - 2000)
    set_activity(rt, unmatched.id, now - 2000)  # matches no topic: the default, a day
    assert rt.broker.sweeper.sweep()['inactive_subscriptions'] == 1
    assert subscription_rows(rt, expiring.id)[0] == 0
    assert all(subscription_rows(rt, s.id)[0] == 1 for s in (forever, pattern, unmatched))


def test_inactivity_limits_without_a_database() -> None:
    topics = [TopicInfo(1, 'a.one', limit_sub_inactivity=100), TopicInfo(2, 'a.two', limit_sub_inactivity=300),
              TopicInfo(3, 'b.one', limit_sub_inactivity=0), TopicInfo(4, 'b.two', limit_sub_inactivity=50)]
    subs = [SubInfo(1, 'k1', 'a.one', 'websocket'), SubInfo(2, 'k2', 'a.*', 'websocket'),
            SubInfo(3, 'k3', 'b.*', 'websocket'), SubInfo(4, 'k4', 'c.*', 'websocket'),
            SubInfo(5, 'k5', 'b.one', 'websocket')]
    assert inactivity_limits(Registry(topics, subs), subs) == {1: 100, 2: 300, 3: None, 4: 86400, 5: None}


def test_an_expired_message_of_a_subscription_with_no_client_is_dead_lettered_by_the_sweeper(make_rt) -> None:
    rt = make_rt()
    rt.catalog.create_topic('ws.expiring')
    sub = rt.ws_hub.subscribe('alice', 'ws.expiring', 10)
    rt.broker.publish('ws.expiring', 'short-lived', expiration=1)
    gevent.sleep(1.1)
    assert rt.broker.sweeper.sweep()['expired_in_queues'] == 1
    assert [d['reason'] for d in rt.catalog.dead_letters(sub.sub_key)] == ['expired']


# Storage


def test_migration_0009_gives_existing_topics_the_default_limit(empty_db_url: str) -> None:
    engine = make_engine(empty_db_url, pool_size=1)
    try:
        upgrade(engine, '0008')
        with engine.begin() as conn:
            conn.exec_driver_sql(
                "INSERT INTO conduit_topic (name, name_key, is_active, has_gd, is_api_sub_allowed, on_no_subs, "
                "max_depth_gd, max_depth_non_gd, on_max_depth, depth_check_freq, limit_retention, "
                "limit_message_expiry, hook_service, is_service_topic, origin, owner, created_at) VALUES "
                "('old', 'old', true, true, true, 'accept', 1, 1, 'overflow', 100, 1, 1, '', false, 'api', '', 0)")
        upgrade(engine)
        with engine.connect() as conn:
            assert conn.exec_driver_sql('SELECT limit_sub_inactivity FROM conduit_topic').scalar_one() == 86400
            assert conn.exec_driver_sql('SELECT count(*) FROM conduit_ws_client').scalar_one() == 0
    finally:
        engine.dispose()


def test_leases_kick_refreshes_at_once_and_release_hands_one_lease_back(db_url: str) -> None:
    engine = make_engine(db_url, pool_size=2)
    try:
        upgrade(engine)
        a, b = LeaseManager(engine, 10.0, 60.0), LeaseManager(engine, 10.0, 60.0)
        wanted = {'x'}
        changes: list[tuple[set[str], set[str]]] = []
        runner = gevent.spawn(a.run, lambda: set(wanted), lambda gained, lost: changes.append((gained, lost)))
        try:
            wait_until(lambda: changes == [({'x'}, set())], TIMEOUT, message='the first refresh')
            wanted.add('y')
            a.kick()  # the next renewal is a minute away
            wait_until(lambda: len(changes) == 2, TIMEOUT, message='a refresh on kick')
            assert changes[1] == ({'y'}, set()) and a.owns('y')
            assert b.refresh({'x', 'y'}) == (set(), set())  # both held by a
            wanted.discard('x')
            a.release('x')
            b.release('y')  # not b's: a keeps it
            assert not a.owns('x') and a.owns('y')
            assert b.refresh({'x', 'y'}) == ({'x'}, set())
        finally:
            runner.kill()
    finally:
        engine.dispose()
