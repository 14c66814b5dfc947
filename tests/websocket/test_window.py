"""A WebSocket client's window over a delivery loop: what the client holds keeps its attempt counted.

The real ``SendWindow`` of a ``WebSocketSession`` whose connection records what it sends, delivered by a real
``DeliveryLoop`` over ``MemoryQueueBackend``. A message the client holds stays in the queue with one
attempt counted however often the loop takes the head of the queue again (woken by new messages, or
by a poll that finds entries already there), and keeps it when the subscription leaves the
connection between two takes: the client that resumes it gets it with its attempt counted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import gevent
import pytest

from runtime.http.websocket.session import SendWindow, WebSocketSession
from runtime.pubsub.delivery import DeliveryLoop, Outcome
from runtime.pubsub.observers import Observers, PubSubObserver
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.statements import Delivery
from runtime.pubsub.subscribers.base import Context
from runtime.pubsub.subscribers.websocket import KIND_WEBSOCKET, Attachments, WebSocketSubscriber
from runtime.testing import wait_until
from runtime.testing.memory import MemoryQueueBackend
from runtime.util.json_limits import DEFAULT_LIMITS

pytestmark = pytest.mark.unit


class _Conn:
    """A connection that records the frames sent to the client."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def send_text(self, text: str | bytes) -> None:
        self.frames.append(json.loads(text))

    def send_texts(self, texts: list[bytes]) -> None:
        for text in texts:
            self.send_text(text)

    def messages(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f.get('action') == 'message']


def _channel(sub: SubInfo) -> tuple[SendWindow, _Conn]:
    conn = _Conn()
    parts = SimpleNamespace(settings=SimpleNamespace(ack_deadline_secs=60.0), json_limits=DEFAULT_LIMITS,
                            hub=None, counters=None, rest=None)
    session = WebSocketSession(conn, parts, None, '127.0.0.1:50000', None)  # type: ignore[arg-type]
    channel = SendWindow(session, sub)
    channel.open()
    return channel, conn


def _sub() -> SubInfo:
    return SubInfo(1, 'sk.1', 'orders.*', KIND_WEBSOCKET, security='subscriber',
                   options=DeliveryOptions(delivery_batch_size=10))


class _Attempts(PubSubObserver):
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def after_deliver(self, sub: SubInfo, d: Delivery, ok: bool, error: BaseException | None,
                      duration: float) -> None:
        self.seen.append((d.msg_id, ok))


def test_a_held_message_keeps_its_attempt_when_the_subscription_leaves_between_two_takes() -> None:
    backend, sub = MemoryQueueBackend(), _sub()
    backend.put(sub, 'a')
    channel, conn = _channel(sub)
    owner = True
    answers: list[list[Outcome]] = []

    def deliver_batch(s: SubInfo, batch: list[Delivery]) -> list[Outcome]:
        nonlocal owner
        answer = channel.deliver_batch(s, batch)
        answers.append(answer)
        if len(answers) == 1:
            # Resumed on another connection right after the loop got its turn back, before it took the
            # queue's head again: this connection is told, and this worker no longer delivers it.
            owner = False
            channel.taken_over(s.id)
        return answer

    loop = DeliveryLoop(sub, backend, None, lambda: owner, deliver_batch=deliver_batch, on_wake=channel.wake)
    g = gevent.spawn(loop.run)
    try:
        wait_until(lambda: conn.messages(), timeout=5.0, message='the message sent')
        assert conn.messages()[0]['meta']['delivery_count'] == 1
        loop.wake()  # a poll found the queue's entries: the loop gets its turn back while the client holds it
        g.join(timeout=5.0)
        assert g.dead
    finally:
        g.kill()
    (entry,) = backend.queue(sub.id)
    # Sent once: the next client gets it as its second attempt (before: 0, as if never sent).
    assert entry.delivery_count == 1
    assert [o.held for o in answers[0]] == [True]


def test_a_held_message_is_counted_once_across_takes_and_acked_once() -> None:
    observers = Observers()
    attempts = _Attempts()
    observers.add(attempts)
    backend, sub = MemoryQueueBackend(observers=observers), _sub()
    first = backend.put(sub, 'a')
    channel, conn = _channel(sub)
    loop = DeliveryLoop(sub, backend, None, lambda: True, observers, deliver_batch=channel.deliver_batch,
                        on_wake=channel.wake)
    g = gevent.spawn(loop.run)
    try:
        wait_until(lambda: conn.messages(), timeout=5.0, message='the first message sent')
        for n in range(3):  # new messages: the loop takes the head again each time, the first still held
            backend.put(sub, f'b{n}')
            loop.wake()
            wait_until(lambda n=n: len(conn.messages()) == n + 2, timeout=5.0, message=f'message b{n} sent')
        counts = {e.msg_id: e.delivery_count for e in backend.queue(sub.id)}
        assert counts[first.msg_id] == 1 and list(counts.values()) == [1, 1, 1, 1]
        assert [m['meta']['delivery_count'] for m in conn.messages()] == [1, 1, 1, 1]
        assert channel.acked(conn.messages()[0]['ack_id'])
        wait_until(lambda: first.msg_id not in {e.msg_id for e in backend.queue(sub.id)}, timeout=5.0,
                   message='the acknowledged message removed')
    finally:
        g.kill()
    # One attempt reported, its success: holding a message is no attempt of its own.
    assert [seen for seen in attempts.seen if seen[0] == first.msg_id] == [(first.msg_id, True)]
    assert [e.delivery_count for e in backend.queue(sub.id)] == [1, 1, 1]


def _resumed_between_two_takes(second: SendWindow | None,
                               then: Callable[[int], Any]) -> tuple[SendWindow, _Conn, list[Any]]:
    """A loop of this worker delivers one message to a first channel; the client still holds it when
    the loop gets its turn back, and the subscription moves to ``second`` (None: it leaves this worker's
    connections) before the loop takes the queue's head again; then(turns) tells when the loop has gone
    far enough. Returns the first channel, its connection, and the queue's entries afterwards."""
    backend, sub = MemoryQueueBackend(), _sub()
    backend.put(sub, 'a')
    first, conn = _channel(sub)
    attachments = Attachments()
    attachments.attach(sub.id, first)
    subscriber = WebSocketSubscriber(lambda *_args: None, attachments)
    deliverer = subscriber.deliverer(Context(topic=lambda name: None), sub)
    turns = 0

    def deliver_batch(s: SubInfo, batch: list[Delivery]) -> list[Outcome]:
        nonlocal turns
        answer = deliverer.deliver_batch(s, batch)  # type: ignore[misc]
        turns += 1
        if turns == 1:
            first.taken_over(s.id)
            attachments.detach(s.id, first)
            if second is not None:
                attachments.attach(s.id, second)
        return answer

    loop = DeliveryLoop(sub, backend, None, lambda: True, deliver_batch=deliver_batch, on_wake=first.wake)
    g = gevent.spawn(loop.run)
    try:
        wait_until(lambda: conn.messages(), timeout=5.0, message='the message sent on the first connection')
        loop.wake()  # the loop gets its turn back while the client holds the message
        wait_until(lambda: then(turns), timeout=5.0, message='the loop went on')
    finally:
        g.kill()
    return first, conn, backend.queue(sub.id)


def test_a_message_held_on_a_connection_counts_when_the_subscription_resumes_on_another_of_this_worker() -> None:
    # The resume lands between two takes of the same loop (the narrow window left by the held-attempt fix):
    # the new connection must get the message as its second attempt, not its first.
    second, conn2 = _channel(_sub())
    first, conn, _queue = _resumed_between_two_takes(second, lambda turns: conn2.messages())
    (sent,) = conn.messages()
    assert sent['meta']['delivery_count'] == 1
    # The first connection's ack comes too late: that attempt is over (before: answered acked).
    assert first._session._ack({'ack_ids': [sent['ack_id']]})[1] == {'acked': 0, 'not_found': [sent['ack_id']]}
    assert [m['meta']['delivery_count'] for m in conn2.messages()] == [2]


def test_a_message_held_on_a_connection_that_left_counts_its_attempt() -> None:
    # The client left (nothing attached here now) between two takes: its attempt is counted, not taken back.
    _first, _conn, queue = _resumed_between_two_takes(None, lambda turns: turns >= 2)
    (entry,) = queue
    assert entry.delivery_count == 1
