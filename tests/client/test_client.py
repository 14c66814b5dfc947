"""runtime.client against a fake of the WebSocket endpoint (tests/client/fake_ws_server.py) on loopback.

The fake speaks the wire protocol of docs/websockets.md with an in-memory broker, so these tests
prove the client's side of it: requests matched to answers by id, messages queued for the
iterator, errors as ClientError, both ways to authenticate, reconnecting and resuming by sub_key
after a drop (unacked messages dropped here, redelivered there), and that the password never
shows. They run with and without gevent's monkey-patching.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from runtime.client import (
    AnswerLost,
    Client,
    ClientError,
    Detached,
    Disconnected,
    Message,
    backoff_secs,
)
from tests.client.fake_ws_server import FakeServer

pytestmark = pytest.mark.unit

PASSWORD = 'alice-secret-pw'


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    """A fake endpoint with one user, alice."""
    srv = FakeServer({'alice': PASSWORD}).start()
    yield srv
    srv.close()


def _client(fake: FakeServer, **kwargs: object) -> Client:
    # Short waits: a reconnection in these tests takes a fraction of a second, not INITIAL_BACKOFF_SECS.
    kwargs.setdefault('max_backoff', 0.2)
    kwargs.setdefault('connect_timeout', 5)
    kwargs.setdefault('request_timeout', 5)
    return Client(fake.url, 'alice', PASSWORD, **kwargs)  # type: ignore[arg-type]


def _messages(client: Client, n: int, timeout: float = 5.0) -> list[Message]:
    got: list[Message] = []
    for item in client.messages(timeout=timeout):
        assert isinstance(item, Message), item
        got.append(item)
        if len(got) == n:
            break
    assert len(got) == n, f'{len(got)} message(s) within {timeout} s, expected {n}'
    return got


# Authentication


def test_hello_auth_sends_a_hello_frame_first_and_no_authorization_or_origin_header(fake: FakeServer) -> None:
    with _client(fake) as client:
        client.ping()
    conn = fake.connections[0]
    assert conn.frames[0] == {'action': 'hello', 'username': 'alice', 'password': PASSWORD, 'id': conn.frames[0]['id']}
    assert 'authorization' not in conn.headers
    assert 'origin' not in conn.headers  # the server refuses Basic Auth from browser origins; we are none
    assert [f['action'] for f in conn.frames] == ['hello', 'ping']


def test_basic_auth_sends_the_header_on_the_upgrade_and_no_hello(fake: FakeServer) -> None:
    with _client(fake, auth='basic') as client:
        client.ping()
    conn = fake.connections[0]
    token = base64.b64encode(f'alice:{PASSWORD}'.encode()).decode()
    assert conn.headers['authorization'] == f'Basic {token}'
    assert 'origin' not in conn.headers
    assert [f['action'] for f in conn.frames] == ['ping']


@pytest.mark.parametrize('auth', ['hello', 'basic'])
def test_wrong_password_is_a_client_error_401(fake: FakeServer, auth: str) -> None:
    client = Client(fake.url, 'alice', 'wrong', auth=auth, reconnect=True)  # type: ignore[arg-type]
    with pytest.raises(ClientError) as info:
        client.connect()
    assert info.value.status == 401
    assert info.value.details == 'Invalid credentials'
    assert not client.connected


def test_unreachable_server_is_disconnected(fake: FakeServer) -> None:
    url = fake.url
    fake.close()
    with pytest.raises(Disconnected, match='cannot connect'):
        Client(url, 'alice', PASSWORD, connect_timeout=2).connect()


def test_a_request_before_connect_says_so(fake: FakeServer) -> None:
    with pytest.raises(Disconnected, match=r'call connect\(\) first'):
        _client(fake).publish('orders', 1)


def test_bad_arguments_are_refused_before_anything_is_sent(fake: FakeServer) -> None:
    with pytest.raises(ValueError, match='credentials'):
        Client('ws://alice:pw@127.0.0.1:1/pubsub/ws', 'alice', PASSWORD)
    with pytest.raises(ValueError, match='ws://'):
        Client('ftp://127.0.0.1:1/', 'alice', PASSWORD)
    with pytest.raises(ValueError, match='auth'):
        Client(fake.url, 'alice', PASSWORD, auth='token')  # type: ignore[arg-type]
    assert Client('http://127.0.0.1:17010', 'a', 'b').url == 'ws://127.0.0.1:17010/pubsub/ws'
    with _client(fake) as client:
        with pytest.raises(TypeError, match='prio'):
            client.publish('orders', 1, prio=5)
        with pytest.raises(ValueError, match='exactly one'):
            client.subscribe('orders', pattern='orders.*')
        with pytest.raises(ValueError, match='window'):
            client.subscribe(sub_key='sk.1', window=3)
    assert [f['action'] for f in fake.connections[0].frames] == ['hello']


# The protocol


def test_publish_subscribe_ack_round_trip(fake: FakeServer) -> None:
    with _client(fake) as client:
        sub = client.subscribe('orders', window=10)
        assert sub.sub_key.startswith('sk.') and sub.queue_depth == 0 and sub.window == 10
        msg_id = client.publish('orders', {'id': 1}, priority=7, correl_id='abc')
        assert msg_id.startswith('zpsm')
        (message,) = _messages(client, 1)
        assert (message.sub_key, message.data) == (sub.sub_key, {'id': 1})
        assert message.meta['msg_id'] == msg_id and message.meta['delivery_count'] == 1
        assert message.ack() is True
        assert fake.subs[sub.sub_key].unacked == {}
        assert client.receive(timeout=0.2) is None  # nothing more: the ack removed it
    publish = next(f for f in fake.connections[0].frames if f['action'] == 'publish')
    assert publish == {'action': 'publish', 'topic': 'orders', 'data': {'id': 1}, 'priority': 7,
                       'correl_id': 'abc', 'id': publish['id']}
    ids = [f['id'] for f in fake.connections[0].frames]
    assert len(set(ids)) == len(ids)  # each request its own id


def test_window_and_batch_ack(fake: FakeServer) -> None:
    with _client(fake) as client:
        sub = client.subscribe('orders', window=2)
        for n in range(5):
            client.publish('orders', n)
        first = _messages(client, 2)
        assert client.receive(timeout=0.3) is None  # the window is full until something is acked
        assert client.ack(*first) == 2
        second = _messages(client, 2)
        assert client.ack(second[0].ack_id, second[1]) == 2  # ack_ids and messages alike
        (last,) = _messages(client, 1)
        assert [m.data for m in first + second + [last]] == [0, 1, 2, 3, 4]
        last.ack()
        assert client.ack('nonsense') == 0
        client.unsubscribe(sub)
        assert sub.sub_key not in fake.subs and client.subscriptions == []


def test_an_error_answer_is_a_client_error_and_the_connection_stays(fake: FakeServer) -> None:
    fake.forbidden.add('payroll')
    with _client(fake) as client:
        with pytest.raises(ClientError) as info:
            client.publish('payroll', {'amount': 1})
        assert (info.value.status, info.value.details) == (401, 'Permission denied')
        with pytest.raises(ClientError) as info:
            client.unsubscribe('sk.nobody')
        assert info.value.status == 404
        assert client.publish('orders', 1).startswith('zpsm')
    assert len(fake.connections) == 1


def test_an_error_no_request_waits_for_goes_to_on_error(fake: FakeServer) -> None:
    errors: list[Exception] = []
    with _client(fake, on_error=errors.append) as client:
        fake.connections[0].send_json({'action': 'error', 'id': None, 'status': 400, 'details': 'bad frame'})
        client.ping()
    assert [(e.status, e.details) for e in errors] == [(400, 'bad frame')]  # type: ignore[attr-defined]


def test_a_short_wait_for_messages_is_not_the_timeout_of_a_large_send(fake: FakeServer) -> None:
    with _client(fake) as client:
        assert client.receive(timeout=0.001) is None
        assert client.publish('orders', 'x' * 4_000_000).startswith('zpsm')
    assert len(fake.connections) == 1  # sent whole, over the first connection


def test_another_thread_may_publish_while_one_iterates(fake: FakeServer) -> None:
    with _client(fake) as client:
        client.subscribe('orders')
        got: list[object] = []
        reader = threading.Thread(target=lambda: got.extend(m.data for m in _messages(client, 20, timeout=10)))
        reader.start()
        msg_ids = [client.publish('orders', n) for n in range(20)]
        reader.join(15)
        assert got == list(range(20))
        assert len(set(msg_ids)) == 20


def test_close_from_another_thread_ends_the_iteration(fake: FakeServer) -> None:
    client = _client(fake)
    client.connect()
    ended = threading.Event()

    def iterate() -> None:
        for _ in client.messages():
            pass
        ended.set()

    threading.Thread(target=iterate, daemon=True).start()
    time.sleep(0.2)
    client.close()
    assert ended.wait(5)
    with pytest.raises(Disconnected):
        client.publish('orders', 1)


# Reconnecting and resuming


def test_reconnects_signs_in_again_and_resumes_by_sub_key(fake: FakeServer) -> None:
    with _client(fake) as client:
        sub = client.subscribe('orders', window=5)
        client.publish('orders', {'id': 1})
        (before,) = _messages(client, 1)  # received, not acked
        fake.connections[0].drop()
        (again,) = _messages(client, 1, timeout=10)  # the drop is noticed, the client reconnects and resumes
        second = fake.wait_connections(2)
        assert [f['action'] for f in second.frames[:2]] == ['hello', 'subscribe']
        assert second.frames[1] == {'action': 'subscribe', 'sub_key': sub.sub_key, 'id': second.frames[1]['id']}
        # Redelivered by the server, attempt counted; the copy from the lost connection cannot be acked.
        assert (again.data, again.meta['msg_id']) == ({'id': 1}, before.meta['msg_id'])
        assert again.meta['delivery_count'] == 2
        assert before.ack() is False
        assert again.ack() is True
        assert client.subscriptions[0].resumed
        assert client.publish('orders', 2).startswith('zpsm')


def test_basic_auth_is_sent_again_on_reconnection(fake: FakeServer) -> None:
    with _client(fake, auth='basic') as client:
        client.subscribe('orders')
        fake.connections[0].drop()
        assert client.receive(timeout=1) is None
        second = fake.wait_connections(2)
        assert second.headers['authorization'].startswith('Basic ')
        assert [f['action'] for f in second.frames] == ['subscribe']


def test_messages_queued_but_not_yet_read_are_dropped_at_the_drop(fake: FakeServer) -> None:
    with _client(fake) as client:
        client.subscribe('orders', window=3)
        for n in range(3):
            client.publish('orders', n)
        time.sleep(0.3)
        client.ping()  # reads the three messages into the client's queue without handing them out
        fake.connections[0].drop()
        fake.connections[0].ended.wait(5)
        # Whichever way the client notices the drop (reading the answer, or sending), it reconnects.
        try:
            client.ping()
        except AnswerLost:
            pass
        got = _messages(client, 3, timeout=10)
        assert [m.data for m in got] == [0, 1, 2]
        assert all(m.meta['delivery_count'] == 2 for m in got)  # none from the first connection was handed out
        assert client.ack(*got) == 3


def test_a_request_whose_answer_was_lost_raises_answer_lost_and_the_next_one_works(fake: FakeServer) -> None:
    fake.drop_on_publish.add('fragile')
    with _client(fake) as client:
        with pytest.raises(AnswerLost):
            client.publish('fragile', 1)
        assert client.publish('orders', 1).startswith('zpsm')
    assert len(fake.connections) == 2


def test_a_request_after_an_unnoticed_drop_waits_for_the_reconnection(fake: FakeServer) -> None:
    with _client(fake) as client:
        client.ping()
        fake.connections[0].drop()
        fake.connections[0].ended.wait(5)
        time.sleep(0.1)
        # The first send may still go into the dead socket (AnswerLost); one more always works.
        try:
            msg_id = client.publish('orders', 1)
        except AnswerLost:
            msg_id = client.publish('orders', 1)
        assert msg_id.startswith('zpsm')


def test_without_reconnect_a_drop_raises_disconnected(fake: FakeServer) -> None:
    with _client(fake, reconnect=False) as client:
        client.subscribe('orders')
        fake.connections[0].drop()
        with pytest.raises(Disconnected):
            client.receive(timeout=5)
        with pytest.raises(Disconnected):
            client.publish('orders', 1)
    assert len(fake.connections) == 1


def test_a_closing_frame_reports_its_code(fake: FakeServer) -> None:
    with _client(fake, reconnect=False) as client:
        fake.connections[0].close_with(1009, 'message too big')
        with pytest.raises(Disconnected) as info:
            client.receive(timeout=5)
        assert (info.value.code, info.value.reason) == (1009, 'message too big')


def test_a_silent_server_is_taken_for_lost(fake: FakeServer) -> None:
    with _client(fake, reconnect=False, heartbeat_secs=0.2) as client:
        fake.connections[0].mute = True
        started = time.monotonic()
        with pytest.raises(Disconnected, match='no frame from the server'):
            client.receive(timeout=10)
        assert time.monotonic() - started < 3


def test_a_detached_subscription_is_reported_and_not_resumed(fake: FakeServer) -> None:
    with _client(fake) as first, _client(fake) as second:
        sub = first.subscribe('orders')
        assert second.subscribe(sub_key=sub.sub_key).resumed
        item = first.receive(timeout=5)
        assert isinstance(item, Detached) and item.sub_key == sub.sub_key
        assert item.details == 'resumed on another connection'
        assert first.subscriptions == []
        fake.connections[0].drop()
        assert first.receive(timeout=1) is None  # the drop noticed, the client connected again
        first.ping()
        assert [f['action'] for f in fake.connections[2].frames] == ['hello', 'ping']  # no resume of it


def test_a_subscription_gone_while_away_becomes_a_detached_item(fake: FakeServer) -> None:
    with _client(fake) as client:
        sub = client.subscribe('orders')
        with fake.lock:
            del fake.subs[sub.sub_key]  # deleted meanwhile (limit_sub_inactivity)
        fake.connections[0].drop()
        item = client.receive(timeout=10)
        assert isinstance(item, Detached) and item.details == 'no such sub_key'
        assert client.subscriptions == []


def test_refused_credentials_end_the_reconnecting(fake: FakeServer) -> None:
    with _client(fake) as client:
        fake.users['alice'] = 'changed'
        fake.connections[0].drop()
        with pytest.raises(ClientError) as info:
            client.receive(timeout=10)
        assert info.value.status == 401
        with pytest.raises(Disconnected, match='refused'):
            client.ping()


def test_backoff_doubles_is_capped_and_jittered() -> None:
    low = [backoff_secs(n, 30, lambda a, b: a) for n in range(10)]
    high = [backoff_secs(n, 30, lambda a, b: b) for n in range(10)]
    assert high[:4] == [0.5, 1.0, 2.0, 4.0] and high[-1] == 30
    assert all(lo == hi / 2 for lo, hi in zip(low, high, strict=True))
    assert all(0.25 <= backoff_secs(n, 30) <= 30 for n in range(100))
    assert backoff_secs(10 ** 6, 30) <= 30  # no overflow however long the outage


# Secrets


def test_the_password_never_shows_in_repr_errors_or_logs(fake: FakeServer, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    errors: list[Exception] = []
    fake.forbidden.add('payroll')
    with _client(fake, on_error=errors.append) as client:
        sub = client.subscribe('orders')
        client.publish('orders', 1)
        (message,) = _messages(client, 1)
        with pytest.raises(ClientError) as refused:
            client.publish('payroll', 1)
        fake.users['alice'] = 'changed'  # the reconnection's sign-in fails
        fake.connections[0].drop()
        with pytest.raises(ClientError) as lost:
            client.receive(timeout=10)
        shown = [repr(client), str(client.__dict__.get('url')), repr(sub), repr(message), str(refused.value),
                 str(lost.value), *map(repr, errors), *map(str, errors)]
    for basic in ('basic', 'hello'):
        with pytest.raises(ClientError) as wrong:
            Client(fake.url, 'alice', 'wrong-password-x', auth=basic).connect()  # type: ignore[arg-type]
        shown.append(str(wrong.value))
    text = '\n'.join(shown + [r.getMessage() for r in caplog.records])
    for secret in (PASSWORD, 'wrong-password-x', base64.b64encode(f'alice:{PASSWORD}'.encode()).decode()):
        assert secret not in text
    assert sub.sub_key not in repr(sub)
    assert 'alice' in repr(client)
