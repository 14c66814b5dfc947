"""The delivery loop over ``MemoryQueueBackend``: acks, retries, dead letters, ordering, concurrency.

No database: the loop's storage is the in-memory twin, and retries are waited for on the
backend's clock, which ``drain`` advances instead of sleeping.
"""

from __future__ import annotations

import time

import gevent
import pytest

from runtime.pubsub.observers import Observers, PubSubObserver
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.statements import Delivery
from runtime.testing.memory import MSG_ID_PREFIX, DeliveryFailed, MemoryQueueBackend

pytestmark = pytest.mark.unit


def _sub(sub_id: int = 1, **options: object) -> SubInfo:
    return SubInfo(sub_id, f'sk.{sub_id}', 'orders.*', 'service', service='orders.handler',
                   options=DeliveryOptions(wait_non_sock_err=30.0, **options))  # type: ignore[arg-type]


class _Recorder:
    """A subscriber that records what it got and fails the payloads it is told to, a number of times."""

    def __init__(self, failures: dict[object, int] | None = None) -> None:
        self.got: list[tuple[object, int]] = []
        self.failures = {repr(k): n for k, n in (failures or {}).items()}

    def __call__(self, sub: SubInfo, d: Delivery) -> None:
        payload = d.payload()
        self.got.append((payload, d.delivery_count))
        key = repr(payload)
        if self.failures.get(key, 0) > 0:
            self.failures[key] -= 1
            raise ValueError(f'cannot take {payload}')


def test_a_delivered_message_is_acked() -> None:
    backend, sub, deliver = MemoryQueueBackend(), _sub(), _Recorder()
    put = backend.put(sub, {'order': 1})
    assert put.msg_id.startswith(MSG_ID_PREFIX) and len(put.msg_id) == len(MSG_ID_PREFIX) + 24
    backend.drain(backend.loop(sub, deliver))
    assert deliver.got == [({'order': 1}, 1)]
    assert backend.queue(sub.id) == []
    assert backend.dead_letters(sub.id) == []


def test_a_failed_message_is_retried_with_its_attempts_counted_without_waiting() -> None:
    backend, sub = MemoryQueueBackend(), _sub()
    deliver = _Recorder({'a': 2})
    backend.put(sub, 'a')
    started = time.monotonic()
    backend.drain(backend.loop(sub, deliver))
    assert deliver.got == [('a', 1), ('a', 2), ('a', 3)]
    assert time.monotonic() - started < 2.0, 'retries 30 s and 60 s away were waited for on the backend clock'
    assert backend.now() - time.time() > 30.0 * 0.8 + 60.0 * 0.8 - 1


def test_retry_keeps_the_error_and_due_time_until_the_next_attempt() -> None:
    backend, sub = MemoryQueueBackend(), _sub()
    backend.put(sub, 'a')
    loop = backend.loop(sub, _Recorder({'a': 1}))
    g = gevent.spawn(loop.run)
    try:
        for _ in range(200):
            gevent.sleep(0.005)
            (entry,) = backend.queue(sub.id)
            if entry.last_error:
                break
        assert entry.delivery_count == 1
        assert entry.last_error == 'ValueError: cannot take a'
        assert 'ValueError' in entry.last_traceback
        assert entry.next_attempt_at > backend.now() + 30.0 * 0.8 - 1
    finally:
        g.kill()


def test_a_message_failing_every_attempt_is_dead_lettered() -> None:
    dead: list[tuple[str, str]] = []

    class Watcher(PubSubObserver):
        def after_dead_letter(self, sub: SubInfo, delivery: Delivery, reason: str, error: str) -> None:
            dead.append((delivery.msg_id, reason))

    observers = Observers()
    observers.add(Watcher())
    backend, sub = MemoryQueueBackend(observers=observers), _sub(max_attempts=3)
    deliver = _Recorder({'bad': 99})
    put = backend.put(sub, 'bad')
    backend.drain(backend.loop(sub, deliver))
    assert [count for _, count in deliver.got] == [1, 2, 3]
    (letter,) = backend.dead_letters(sub.id)
    assert letter['reason'] == 'max_attempts'
    assert letter['delivery_count'] == 3
    assert letter['msg_id'] == put.msg_id
    assert letter['last_error'] == 'ValueError: cannot take bad'
    assert 'ValueError' in letter['last_traceback']
    assert dead == [(put.msg_id, 'max_attempts')]
    assert backend.queue(sub.id) == []


def test_drain_fails_fast_when_asked() -> None:
    backend, sub = MemoryQueueBackend(), _sub(max_attempts=2)
    backend.put(sub, 'bad')
    with pytest.raises(DeliveryFailed, match=r'dead-lettered after 2 attempt\(s\) \(max_attempts\): ValueError'):
        backend.drain(backend.loop(sub, _Recorder({'bad': 99})), fail_fast=True)


def test_err_should_block_holds_back_the_messages_behind_a_failed_one() -> None:
    backend, sub = MemoryQueueBackend(), _sub(err_should_block=True)
    deliver = _Recorder({'first': 1})
    for payload in ('first', 'second', 'third'):
        backend.put(sub, payload)
    backend.drain(backend.loop(sub, deliver))
    assert [p for p, _ in deliver.got] == ['first', 'first', 'second', 'third']


def test_without_err_should_block_later_messages_go_first() -> None:
    backend, sub = MemoryQueueBackend(), _sub(err_should_block=False)
    deliver = _Recorder({'first': 1})
    for payload in ('first', 'second', 'third'):
        backend.put(sub, payload)
    backend.drain(backend.loop(sub, deliver))
    assert [p for p, _ in deliver.got] == ['first', 'second', 'third', 'first']


def test_high_priority_first_then_publication_order() -> None:
    backend, sub, deliver = MemoryQueueBackend(), _sub(), _Recorder()
    for payload, priority in (('low-1', 1), ('mid-1', 5), ('high', 9), ('mid-2', 5), ('low-2', 1)):
        backend.put(sub, payload, priority=priority)
    assert backend.payloads(sub.id) == ['high', 'mid-1', 'mid-2', 'low-1', 'low-2']
    backend.drain(backend.loop(sub, deliver))
    assert [p for p, _ in deliver.got] == ['high', 'mid-1', 'mid-2', 'low-1', 'low-2']


def test_small_batches_keep_the_order_across_batches() -> None:
    backend, sub, deliver = MemoryQueueBackend(), _sub(delivery_batch_size=2), _Recorder()
    for n in range(7):
        backend.put(sub, n)
    backend.drain(backend.loop(sub, deliver))
    assert [p for p, _ in deliver.got] == list(range(7))


def test_max_in_flight_delivers_a_batch_concurrently() -> None:
    backend, sub = MemoryQueueBackend(), _sub(max_in_flight=4)
    running, most = 0, 0

    def deliver(sub: SubInfo, d: Delivery) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        gevent.sleep(0.02)
        running -= 1

    for n in range(8):
        backend.put(sub, n)
    backend.drain(backend.loop(sub, deliver))
    assert most == 4
    assert backend.queue(sub.id) == []


def test_an_expired_message_is_dead_lettered_without_delivery() -> None:
    backend, sub, deliver = MemoryQueueBackend(), _sub(), _Recorder()
    backend.put(sub, 'stale', expiration=10.0)
    backend.advance(11.0)
    backend.drain(backend.loop(sub, deliver))
    assert deliver.got == []
    (letter,) = backend.dead_letters(sub.id)
    assert letter['reason'] == 'expired'


def test_several_loops_drain_together() -> None:
    backend = MemoryQueueBackend()
    one, two = _sub(1), _sub(2)
    got_one, got_two = _Recorder({'x': 1}), _Recorder()
    backend.put(one, 'x')
    backend.put(two, 'y')
    backend.drain([backend.loop(one, got_one), backend.loop(two, got_two)])
    assert got_one.got == [('x', 1), ('x', 2)]
    assert got_two.got == [('y', 1)]


def test_drain_times_out_naming_the_queue() -> None:
    backend, sub = MemoryQueueBackend(), _sub()
    backend.put(sub, 'slow')

    def deliver(sub: SubInfo, d: Delivery) -> None:
        gevent.sleep(10)

    with pytest.raises(AssertionError, match=r'not drained within 0.2 s \(sub#1\(service:orders.handler'):
        backend.drain(backend.loop(sub, deliver), timeout=0.2)


def test_a_batch_deliverer_that_tries_nothing_makes_the_loop_wait_for_a_wake_up_not_spin() -> None:
    backend, sub = MemoryQueueBackend(), _sub()
    backend.put(sub, 'a')
    calls: list[int] = []

    def nobody_there(sub: SubInfo, batch: list[Delivery]) -> list:
        calls.append(len(batch))
        return []  # e.g. a WebSocket subscription whose client has just left: nothing sent

    loop = backend.loop(sub, deliver_batch=nobody_there)
    g = gevent.spawn(loop.run)
    try:
        gevent.sleep(0.3)
        assert calls == [1]
        loop.wake()
        gevent.sleep(0.05)
        assert calls == [1, 1]
        gevent.sleep(0.05)
        (entry,) = backend.queue(sub.id)
        assert entry.delivery_count == 0  # never tried: each attempt taken back
    finally:
        g.kill()
