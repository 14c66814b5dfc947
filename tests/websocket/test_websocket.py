"""WebSocket publishers and subscribers (GET /pubsub/ws) against a real server, over a real client library.

The client is websocket-client, as a Python user would take it, never the server's own classes: what
is tested is what goes over the wire (docs/websockets.md has the protocol). Security definitions,
permissions and topics are made through the admin API once the server runs. Every hostile frame is
followed by the check that matters most: /health still answers and a fresh connection still signs in
and is answered ("never a dead worker"). Every test runs on SQLite and on PostgreSQL.

The tests share one server per backend (starting one costs seconds of CPU), so none may see another's
traces. A topic nobody subscribes to keeps what is published for its next subscriber, so a test stores
messages only in topics of its own (orders.<tag>..., which the grants on orders.** cover) and
unsubscribes what it subscribed to on the shared topics; the test that fills a security definition up
to its subscription limit signs in with a definition of its own. The dead-peer test starts a server of
its own: it needs other ping settings.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
import requests
import websocket

from tests.live_server import LiveServer, poll
from tests.websocket_peer import (
    Database,
    Peer,
    PeerClosed,
    detached_subscription,
    provision,
    raw_upgrade,
    rest_publish,
    still_healthy,
)

PUBLISHER = ('ws-pub', 'ws-pub-pw-1')
SUBSCRIBER = ('ws-sub', 'ws-sub-pw-2')
OTHER = ('ws-other', 'ws-other-pw-3')
NOBODY = ('ws-nobody', 'ws-nobody-pw-4')

USERS = [('ws.publisher', *PUBLISHER), ('ws.subscriber', *SUBSCRIBER), ('ws.other', *OTHER), ('ws.nobody', *NOBODY)]
TOPICS = [{'name': 'orders'}, {'name': 'orders.created'}, {'name': 'orders.cancelled'},
          {'name': 'orders.emea.received'}, {'name': 'closed.topic', 'is_active': False},
          {'name': 'private.topic', 'is_api_sub_allowed': False}]
GRANTS = {
    'ws.publisher': {'pub': ['orders.**', 'closed.topic', 'ghost.topic'], 'sub': []},
    'ws.subscriber': {'pub': [], 'sub': ['orders.**', 'private.topic', 'ghost.topic']},
    'ws.other': {'pub': ['orders.**'], 'sub': ['orders.**']},
}

#: The browser origin allowed to use Basic Auth on the upgrade.
GOOD_ORIGIN = 'http://good.example'

#: A short hello wait (no test waits the default 5 s) and a small frame limit (cheap to exceed).
MAX_FRAME_BYTES = 65536
WS_CONFIG = f'''
[websocket]
hello_timeout_secs = 2
max_frame_bytes = {MAX_FRAME_BYTES}
allowed_origins = "{GOOD_ORIGIN}"
'''


@pytest.fixture(scope='module')
def ws_server(module_server_factory: Callable[..., LiveServer]) -> LiveServer:
    """The module's started server with the users, topics and permissions above, made through the admin API."""
    server = module_server_factory(extra_config=WS_CONFIG).start()
    provision(server, USERS, TOPICS, GRANTS)
    return server


@pytest.fixture
def tag() -> str:
    """A suffix that makes this test's topic and definition names its own on the shared server."""
    return uuid.uuid4().hex[:8]


@pytest.fixture
def own_topic(ws_server: LiveServer, tag: str) -> Callable[[str], str]:
    """Make a topic of this test alone: own_topic('created') is orders.<tag>.created, own_topic('') orders.<tag>."""
    def make(name: str) -> str:
        topic = '.'.join(part for part in ('orders', tag, name) if part)
        provision(ws_server, topics=[{'name': topic}])
        return topic
    return make


def rest_pull(server: LiveServer, auth: tuple[str, str], **body: Any) -> list[dict[str, Any]]:
    """POST /pubsub/messages/get; the messages."""
    r = requests.post(f'{server.url}/pubsub/messages/get', json=body, auth=auth, timeout=15)
    assert r.status_code == 200, f'{r.status_code} {r.text}'
    messages: list[dict[str, Any]] = r.json()['messages']
    return messages


# Signing in


def test_sign_in_by_basic_auth_header_or_hello_frame(ws_server: LiveServer, peers: Any) -> None:
    by_header = peers(ws_server, auth=SUBSCRIBER)
    assert by_header.ws.getstatus() == 101
    assert by_header.request('ping')['action'] == 'pong'
    # The client's id comes back as it was sent, a string or an integer; a frame without one gets null.
    by_header.send({'action': 'ping', 'id': 42})
    assert by_header.answer(42) == {'action': 'pong', 'id': 42}
    by_header.send({'action': 'ping'})
    assert by_header.wait(lambda f: f['action'] == 'pong')['id'] is None

    by_hello = peers(ws_server)
    by_hello.send({'action': 'hello', 'id': 'h1', 'username': SUBSCRIBER[0], 'password': SUBSCRIBER[1]})
    assert by_hello.answer('h1') == {'action': 'authenticated', 'id': 'h1', 'username': SUBSCRIBER[0]}
    sub_key = by_hello.ok('subscribe', 'subscribed', topic='orders.created')['sub_key']
    assert sub_key
    by_hello.ok('unsubscribe', 'unsubscribed', sub_key=sub_key)  # nothing left on the shared topic
    by_hello.error('hello', 400, username=SUBSCRIBER[0], password=SUBSCRIBER[1])  # once is enough

    # A browser page of an allowed origin may use the header; any page may use the hello frame.
    assert peers(ws_server, auth=SUBSCRIBER, origin=GOOD_ORIGIN).request('ping')['action'] == 'pong'
    assert peers(ws_server, hello=SUBSCRIBER, origin='http://evil.example').request('ping')['action'] == 'pong'


def test_sign_in_refusals_close_the_connection(ws_server: LiveServer, peers: Any) -> None:
    # A wrong Basic Auth header is refused before the upgrade, as over REST.
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        Peer.connect(ws_server, auth=(SUBSCRIBER[0], 'wrong'))
    assert refused.value.status_code == 401
    # Basic Auth from a browser page of another origin: cross-site WebSocket hijacking, refused.
    with pytest.raises(websocket.WebSocketBadStatusException) as hijack:
        Peer.connect(ws_server, auth=SUBSCRIBER, origin='http://evil.example')
    assert hijack.value.status_code == 403

    # A wrong password in the hello frame: error 401, then close 1008.
    wrong = peers(ws_server)
    wrong.send({'action': 'hello', 'id': 1, 'username': SUBSCRIBER[0], 'password': 'wrong'})
    assert wrong.answer(1) == {'action': 'error', 'id': 1, 'status': 401, 'details': 'Invalid credentials'}
    assert wrong.close_code() == 1008
    unknown = peers(ws_server)
    unknown.send({'action': 'hello', 'id': 2, 'username': 'nobody-at-all', 'password': 'x'})
    assert unknown.answer(2)['status'] == 401
    assert unknown.close_code() == 1008

    # No hello in time (hello_timeout_secs = 2), or any other frame first: close 1008.
    silent = peers(ws_server)
    assert silent.close_code() == 1008
    for first in ({'action': 'ping', 'id': 1}, {'action': 'publish', 'topic': 'orders.created', 'data': 1},
                  'not json', '[1, 2]', {'username': SUBSCRIBER[0], 'password': SUBSCRIBER[1]}):
        early = peers(ws_server)
        early.send(first)
        assert early.close_code() == 1008, first
        assert not [f for f in early.pending if f.get('action') in ('pong', 'published')], early.pending
    still_healthy(ws_server, SUBSCRIBER)


# Publishing and receiving


def test_publish_is_stored_and_received_with_rest_pulls_meta(ws_server: LiveServer, peers: Any,
                                                              own_topic: Callable[[str], str]) -> None:
    topic = own_topic('created')
    subscriber = peers(ws_server, hello=SUBSCRIBER)
    sub = subscriber.ok('subscribe', 'subscribed', topic=topic)
    assert sub['sub_key'].startswith('sk.') and sub['queue_depth'] == 0 and sub['window'] == 100
    assert 'resumed' not in sub
    r = requests.post(f'{ws_server.url}/pubsub/subscribe/topic/{topic}', auth=SUBSCRIBER, timeout=15)
    assert r.status_code == 200, r.text
    rest_sub_key = r.json()['sub_key']

    publisher = peers(ws_server, auth=PUBLISHER)
    fields = {'priority': 7, 'correl_id': 'corr-1', 'in_reply_to': 'msg-0', 'ext_client_id': 'crm-1',
              'expiration': 3600, 'pub_time': '2026-01-02T03:04:05.000000'}
    published = publisher.ok('publish', 'published', topic=topic, data={'order': 1, 'ü': 'ß'}, **fields)
    assert published['msg_id'].startswith('zpsm') and 'overflowed' not in published

    message = subscriber.messages(1)[0]
    assert message['sub_key'] == sub['sub_key'] and message['data'] == {'order': 1, 'ü': 'ß'}
    meta = message['meta']
    assert meta['msg_id'] == published['msg_id'] and meta['ack_id'] == message['ack_id']
    assert (meta['topic_name'], meta['priority'], meta['correl_id'], meta['in_reply_to'], meta['ext_client_id'],
            meta['delivery_count'], meta['sub_key'], meta['pub_time_iso']) == \
        (topic, 7, 'corr-1', 'msg-0', 'crm-1', 1, sub['sub_key'], '2026-01-02T03:04:05.000000')

    # The same publication pulled over REST (manual acks, so that it too carries an ack_id): the same meta.
    pulled = rest_pull(ws_server, SUBSCRIBER, sub_key=rest_sub_key, ack='manual')
    assert [m['data'] for m in pulled] == [{'order': 1, 'ü': 'ß'}]
    rest_meta = pulled[0]['meta']
    assert sorted(meta) == sorted(rest_meta), (sorted(meta), sorted(rest_meta))
    for key in ('msg_id', 'topic_name', 'priority', 'expiration', 'size', 'correl_id', 'in_reply_to',
                'ext_client_id', 'pub_time_iso', 'expiration_time_iso', 'delivery_count'):
        assert meta[key] == rest_meta[key], (key, meta[key], rest_meta[key])

    # Acknowledged once: it leaves the queue; a second ack finds nothing.
    acked = subscriber.request('ack', ack_ids=[message['ack_id']])
    assert (acked['action'], acked['acked'], acked['not_found']) == ('acked', 1, [])
    again = subscriber.request('ack', ack_ids=[message['ack_id'], 'no-such-ack-id'])
    assert (again['acked'], again['not_found']) == (0, [message['ack_id'], 'no-such-ack-id'])
    # Resuming a subscription this very connection holds answers its depth (the ack is stored just after).
    resumed = subscriber.ok('subscribe', 'subscribed', sub_key=sub['sub_key'])
    assert resumed['resumed'] is True and resumed['sub_key'] == sub['sub_key']
    poll(lambda: subscriber.ok('subscribe', 'subscribed', sub_key=sub['sub_key'])['queue_depth'] == 0,
         message='the queue emptied by the ack')

    # A publication over REST reaches the WebSocket subscriber too, and the subscriber may publish.
    msg_id = rest_publish(ws_server, PUBLISHER, topic, 'plain text')
    second = subscriber.messages(1)[0]
    assert (second['data'], second['meta']['msg_id']) == ('plain text', msg_id)
    assert subscriber.request('ack', ack_ids=[second['ack_id']])['acked'] == 1


def test_publish_refusals_have_rests_statuses(ws_server: LiveServer, peers: Any,
                                               own_topic: Callable[[str], str]) -> None:
    topic = own_topic('created')  # what it stores, and a refusal that was none, stays out of the shared topics
    publisher = peers(ws_server, auth=PUBLISHER)
    publisher.error('publish', 400, 'data', topic=topic)
    publisher.error('publish', 400, 'data', topic=topic, data=None)
    publisher.error('publish', 400, topic=f' {topic}', data=1)
    publisher.error('publish', 400, topic='orders#created', data=1)
    publisher.error('publish', 400, topic='x' * 201, data=1)
    publisher.error('publish', 400, 'expiration', topic=topic, data=1, expiration='soon')
    publisher.error('publish', 401, 'Permission denied', topic='private.topic', data=1)
    publisher.error('publish', 403, 'Topic closed.topic is inactive', topic='closed.topic', data=1)
    publisher.error('publish', 404, 'ghost.topic', topic='ghost.topic', data=1)
    # Checks in REST's order: a name without permission is refused before it is looked up.
    publisher.error('publish', 401, 'Permission denied', topic='unknown.elsewhere', data=1)
    nobody = peers(ws_server, hello=NOBODY)
    nobody.error('publish', 401, 'Permission denied', topic=topic, data=1)
    nobody.error('subscribe', 401, 'Permission denied', topic=topic)
    nobody.error('subscribe', 401, 'Permission denied', pattern='orders.**')
    # The connection outlives every refusal.
    assert publisher.ok('publish', 'published', topic=topic, data=0)['msg_id'].startswith('zpsm')


def test_subscribe_refusals(ws_server: LiveServer, peers: Any) -> None:
    subscriber = peers(ws_server, hello=SUBSCRIBER)
    subscriber.error('subscribe', 401, 'Permission denied', topic='closed.topic')
    subscriber.error('subscribe', 401, 'Permission denied', pattern='**')
    subscriber.error('subscribe', 403, 'is_api_sub_allowed', topic='private.topic')
    subscriber.error('subscribe', 404, 'ghost.topic', topic='ghost.topic')
    subscriber.error('subscribe', 404, 'subscription not found', sub_key='sk.' + 'x' * 40)
    subscriber.error('unsubscribe', 404, sub_key='sk.' + 'x' * 40)
    for window in (0, 1001, -1, 2.5, '10', True, None):
        subscriber.error('subscribe', 400, 'window', topic='orders.created', window=window)
    subscriber.error('subscribe', 400, topic='orders.created', pattern='orders.*')
    subscriber.error('subscribe', 400)
    subscriber.error('subscribe', 400, topic=5)
    subscriber.error('subscribe', 400, pattern=['orders.*'])
    widest = subscriber.ok('subscribe', 'subscribed', topic='orders.created', window=1000)
    assert widest['window'] == 1000
    narrowest = subscriber.ok('subscribe', 'subscribed', topic='orders.created', window=1)
    assert narrowest['window'] == 1
    for made in (widest, narrowest):  # nothing left on the shared topic
        subscriber.ok('unsubscribe', 'unsubscribed', sub_key=made['sub_key'])


def test_window_caps_unacked_messages(ws_server: LiveServer, peers: Any, module_db_url: str,
                                      own_topic: Callable[[str], str]) -> None:
    topic = own_topic('created')
    sub_key = detached_subscription(ws_server, module_db_url, SUBSCRIBER, 2, topic=topic)
    sent = [rest_publish(ws_server, PUBLISHER, topic, {'n': n}) for n in range(5)]
    subscriber = peers(ws_server, hello=SUBSCRIBER)
    assert subscriber.ok('subscribe', 'subscribed', sub_key=sub_key)['queue_depth'] == 5

    first = subscriber.messages(2)
    assert [m['data']['n'] for m in first] == [0, 1]
    # Only the window arrives while nothing is acknowledged (a bounded look for more: none may come).
    assert not [f for f in subscriber.quiet(1.5) if f['action'] == 'message']

    received: list[dict[str, Any]] = list(first)
    unacked = {m['ack_id'] for m in first}
    while len(received) < 5:
        # Acknowledge one at a time; whatever comes in between, the client never holds more than 2.
        ack_id = sorted(unacked)[0]
        assert subscriber.request('ack', ack_ids=[ack_id])['acked'] == 1
        unacked.discard(ack_id)
        if not unacked:
            got = subscriber.messages(1)
            got += [f for f in subscriber.quiet(0.5) if f['action'] == 'message']
        else:
            got = [f for f in subscriber.quiet(0.5) if f['action'] == 'message']
        received += got
        unacked |= {m['ack_id'] for m in got}
        assert len(unacked) <= 2, f'{len(unacked)} unacknowledged messages with window 2'
    assert [m['meta']['msg_id'] for m in received] == sent
    assert all(m['sub_key'] == sub_key and m['meta']['delivery_count'] == 1 for m in received)
    assert subscriber.request('ack', ack_ids=sorted(unacked))['acked'] == len(unacked)
    poll(lambda: subscriber.ok('subscribe', 'subscribed', sub_key=sub_key)['queue_depth'] == 0,
         message='the queue emptied by the acks')


def test_window_slides_as_acks_come(ws_server: LiveServer, peers: Any, own_topic: Callable[[str], str]) -> None:
    """A window of W lets W messages be unacknowledged at once, however they were published."""
    topic = own_topic('created')
    subscriber = peers(ws_server, hello=SUBSCRIBER)
    sub_key = subscriber.ok('subscribe', 'subscribed', topic=topic, window=3)['sub_key']
    # Published one by one, nothing acknowledged: the window still fills.
    held = []
    for n in range(3):
        rest_publish(ws_server, PUBLISHER, topic, n)
        held += subscriber.messages(1)
        assert (held[-1]['sub_key'], held[-1]['data']) == (sub_key, n), held[-1]
    # Full: one more waits; acknowledging one lets it through while the other two stay unacknowledged.
    rest_publish(ws_server, PUBLISHER, topic, 3)
    assert not [f for f in subscriber.quiet(1.0) if f['action'] == 'message']
    assert subscriber.request('ack', ack_ids=[held[0]['ack_id']])['acked'] == 1
    assert subscriber.messages(1)[0]['data'] == 3
    assert subscriber.request('ack', ack_ids=[m['ack_id'] for m in held[1:]])['acked'] == 2


def test_pattern_subscriptions_with_one_and_any_segments(ws_server: LiveServer, peers: Any,
                                                         own_topic: Callable[[str], str]) -> None:
    # A tree of this test's own (root = orders.<tag>): a pattern subscription takes over the messages
    # waiting in every topic it matches, so one on the shared orders.** would get other tests' leftovers.
    topics = [own_topic(name) for name in ('', 'created', 'emea.received', 'cancelled')]
    root = topics[0]
    subscriber = peers(ws_server, hello=SUBSCRIBER)
    one = subscriber.ok('subscribe', 'subscribed', pattern=f'{root}.*')['sub_key']
    every = subscriber.ok('subscribe', 'subscribed', pattern=f'{root}.**')['sub_key']
    assert one != every
    for n, topic in enumerate(topics):
        rest_publish(ws_server, PUBLISHER, topic, {'n': n})
    # root.* matches one segment after "root." only; root.** every depth and the root itself.
    # Both end with root.cancelled: what came before it in publication order is all they get.
    got_every = subscriber.take(4, sub_key=every)
    got_one = subscriber.take(2, sub_key=one)
    assert [m['meta']['topic_name'] for m in got_every] == topics
    assert [m['meta']['topic_name'] for m in got_one] == [f'{root}.created', f'{root}.cancelled']


def test_resume_by_sub_key_and_unsubscribe(ws_server: LiveServer, peers: Any, module_db_url: str,
                                           own_topic: Callable[[str], str]) -> None:
    topic = own_topic('created')
    sub_key = detached_subscription(ws_server, module_db_url, SUBSCRIBER, 10, topic=topic)
    sent = [rest_publish(ws_server, PUBLISHER, topic, n) for n in range(3)]
    first = peers(ws_server, hello=SUBSCRIBER)
    assert first.ok('subscribe', 'subscribed', sub_key=sub_key)['queue_depth'] == 3
    held = first.messages(3)
    assert [m['meta']['delivery_count'] for m in held] == [1, 1, 1]

    # Another definition may not take it; the same one, on another connection, does: the first is told.
    peers(ws_server, hello=OTHER).error('subscribe', 404, 'subscription not found', sub_key=sub_key)
    peers(ws_server, hello=OTHER).error('unsubscribe', 404, sub_key=sub_key)
    second = peers(ws_server, auth=SUBSCRIBER)
    resumed = second.ok('subscribe', 'subscribed', sub_key=sub_key)
    assert resumed['sub_key'] == sub_key and resumed['resumed'] is True and resumed['window'] == 10
    detached = first.wait(lambda f: f['action'] == 'detached')
    assert detached['sub_key'] == sub_key and detached['details']
    # What the first held unacknowledged comes to the second, its attempt counted.
    again = second.messages(3)
    assert [m['meta']['msg_id'] for m in again] == sent
    assert [m['meta']['delivery_count'] for m in again] == [2, 2, 2]
    stale = first.request('ack', ack_ids=[m['ack_id'] for m in held])
    assert stale['acked'] == 0
    assert second.request('ack', ack_ids=[m['ack_id'] for m in again])['acked'] == 3

    # Detached (the connection closed), the queue fills; unsubscribing from a new connection removes it all.
    second.close()
    db = Database(module_db_url)
    try:
        sub_id = db.sub_id(sub_key)
        assert sub_id is not None
        poll(lambda: (db.ws_client(sub_key) or {}).get('owner') == '', message='the ws_client row released')
        for n in range(3):
            rest_publish(ws_server, PUBLISHER, topic, n)
        assert db.queued(sub_id) == 3
        third = peers(ws_server, hello=SUBSCRIBER)
        gone = third.ok('unsubscribe', 'unsubscribed', sub_key=sub_key)
        assert gone['sub_key'] == sub_key
        assert db.sub_id(sub_key) is None and db.queued(sub_id) == 0 and db.ws_client(sub_key) is None
        assert db.rows('SELECT * FROM conduit_ws_client WHERE sub_id = :s', s=sub_id) == []
        third.error('subscribe', 404, 'subscription not found', sub_key=sub_key)
        third.error('unsubscribe', 404, sub_key=sub_key)
    finally:
        db.close()


# Hostile frames: an error answer or a close code, never a dead worker


def test_malformed_frames_are_answered_400_and_the_connection_stays(ws_server: LiveServer, peers: Any) -> None:
    peer = peers(ws_server, hello=OTHER)  # may publish and subscribe: only the frames' shape is wrong
    bad: list[Any] = [
        'not json', '{"action": "ping"', '[1, 2]', '"ping"', '42', 'null', '', '[' * 10000 + ']' * 10000,
        '{"action": "ping", "action": "ping", "id": 1e999}', '{"action": "ping", "id": NaN}',
        '{"action": "publish", "topic": "orders.created", "data": ' + '9' * 500 + '}',
        '{"action": "publish", "topic": "orders.created", "data": ' + '[' * 100 + ']' * 100 + '}',
        {}, {'action': None}, {'action': 5}, {'action': ['ping']}, {'action': 'fly'}, {'action': 'PING'},
        {'action': 'publish'}, {'action': 'publish', 'data': 1}, {'action': 'publish', 'topic': 5, 'data': 1},
        {'action': 'publish', 'topic': 'orders.created'}, {'action': 'publish', 'topic': None, 'data': 1},
        {'action': 'subscribe', 'topic': {'a': 1}}, {'action': 'subscribe', 'sub_key': 5},
        {'action': 'subscribe', 'sub_key': ''}, {'action': 'subscribe', 'sub_key': 'sk.x', 'topic': 'orders.created'},
        {'action': 'ack'}, {'action': 'ack', 'ack_ids': 'a'}, {'action': 'ack', 'ack_ids': []},
        {'action': 'ack', 'ack_ids': [1]}, {'action': 'ack', 'ack_ids': [None]}, {'action': 'ack', 'ack_ids': ['']},
        {'action': 'ack', 'ack_ids': ['x' * 10000]}, {'action': 'ack', 'ack_ids': ['a'] * 1001},
        {'action': 'ack', 'ack_ids': {'a': 1}},
        {'action': 'unsubscribe'}, {'action': 'unsubscribe', 'sub_key': 5}, {'action': 'unsubscribe', 'sub_key': None},
        {'action': 'ping', 'id': [1]}, {'action': 'ping', 'id': {'a': 1}}, {'action': 'ping', 'id': True},
        {'action': 'ping', 'id': 'i' * 1000},
    ]
    for frame in bad:
        peer.send(frame)
        answer = peer.wait(lambda f: f.get('action') == 'error', what=f'the answer to {str(frame)[:80]}')
        assert answer['status'] == 400 and answer['details'], (str(frame)[:80], answer)
        if isinstance(frame, dict) and frame.get('id') is not None:
            assert answer['id'] is None, (frame, answer)  # a mistyped id is not echoed
    # An answer echoes the id of a frame that is wrong in another field.
    peer.send({'action': 'ack', 'id': 'wrong-ids', 'ack_ids': 'x'})
    assert peer.answer('wrong-ids')['status'] == 400
    # A thousand ack_ids of garbage: a count, and each named back.
    garbage = [f'garbage-{n}' for n in range(1000)]
    acked = peer.request('ack', ack_ids=garbage)
    assert (acked['action'], acked['acked'], sorted(acked['not_found'])) == ('acked', 0, sorted(garbage))
    assert peer.request('ping')['action'] == 'pong'
    still_healthy(ws_server, SUBSCRIBER)


def test_frame_over_max_frame_bytes_closes_1009(ws_server: LiveServer, peers: Any,
                                                own_topic: Callable[[str], str]) -> None:
    topic = own_topic('created')  # what it stores stays out of the shared topics
    # Just under the limit is an ordinary frame.
    near = peers(ws_server, hello=OTHER)
    near.send({'action': 'publish', 'topic': topic, 'data': 'x' * (MAX_FRAME_BYTES - 200), 'id': 1})
    assert near.answer(1)['action'] == 'published'
    one_frame = peers(ws_server, hello=SUBSCRIBER)
    one_frame.send({'action': 'publish', 'topic': topic, 'data': 'x' * (MAX_FRAME_BYTES + 1)})
    assert one_frame.close_code() == 1009
    # The same size as fragments: the limit is on the message, not on each frame.
    fragments = peers(ws_server, hello=SUBSCRIBER)
    chunk = 'x' * 16384
    fragments.send_fragments(['{"action": "ping", "id": "', *[chunk] * 5, '"}'])
    assert fragments.close_code() == 1009
    # A huge frame announced in its header: refused without waiting for the bytes.
    huge = peers(ws_server, hello=SUBSCRIBER)
    try:
        huge.ws.send('y' * (8 * MAX_FRAME_BYTES))
    except (OSError, websocket.WebSocketException):
        pass  # the server may close before it all went out
    assert huge.close_code() == 1009
    still_healthy(ws_server, SUBSCRIBER)


def test_binary_frame_closes_1003(ws_server: LiveServer, peers: Any) -> None:
    peer = peers(ws_server, hello=SUBSCRIBER)
    peer.ws.send_binary(json.dumps({'action': 'ping', 'id': 1}).encode())
    assert peer.close_code() == 1003
    before_hello = peers(ws_server)
    before_hello.ws.send_binary(b'\x00\x01\x02')
    assert before_hello.close_code() in (1003, 1008)
    still_healthy(ws_server, SUBSCRIBER)


def test_fragmented_message_is_one_frame(ws_server: LiveServer, peers: Any) -> None:
    peer = peers(ws_server)
    peer.send_fragments(['{"action": "hello", "id": "h", ', f'"username": "{SUBSCRIBER[0]}", ',
                         f'"password": "{SUBSCRIBER[1]}"}}'])
    assert peer.answer('h')['action'] == 'authenticated'
    peer.send_fragments(['{"action": "pi', 'ng", "id": "f"}'])
    assert peer.answer('f') == {'action': 'pong', 'id': 'f'}
    # A ping between fragments (allowed by RFC 6455) is answered without breaking the message.
    peer.ws.send_frame(websocket.ABNF.create_frame('{"action": "pi', websocket.ABNF.OPCODE_TEXT, fin=0))
    peer.ws.ping(b'between')
    peer.ws.send_frame(websocket.ABNF.create_frame('ng", "id": "g"}', websocket.ABNF.OPCODE_CONT, fin=1))
    assert peer.answer('g') == {'action': 'pong', 'id': 'g'}
    # Fragments of bad UTF-8: the protocol is broken, the connection closed (1007), the server fine.
    broken = peers(ws_server, hello=SUBSCRIBER)
    broken.ws.send_frame(websocket.ABNF.create_frame(b'{"action": "\xc3', websocket.ABNF.OPCODE_TEXT, fin=0))
    broken.ws.send_frame(websocket.ABNF.create_frame(b'\x28ping"}', websocket.ABNF.OPCODE_CONT, fin=1))
    assert broken.close_code() == 1007
    still_healthy(ws_server, SUBSCRIBER)


@pytest.mark.slow
def test_a_flood_of_bad_frames_is_answered_and_survived(ws_server: LiveServer, peers: Any) -> None:
    peer = peers(ws_server, hello=SUBSCRIBER)
    answered = 0
    # Sent in bursts, each read back before the next, so the client's own buffers stay bounded.
    for burst in range(50):
        for n in range(200):
            peer.send(f'{{"action": "nope", "id": {burst * 200 + n}}}' if n % 2 else 'x')
        for _ in range(200):
            answer = peer.wait(lambda f: f.get('action') == 'error', what=f'an answer of burst {burst}')
            assert answer['status'] == 400, answer
            answered += 1
    assert answered == 10000
    assert peer.request('ping')['action'] == 'pong'
    still_healthy(ws_server, SUBSCRIBER)


# Liveness


@pytest.mark.slow
def test_a_silent_peer_is_closed_and_a_live_one_kept(server_factory: Callable[..., LiveServer], peers: Any) -> None:
    server = server_factory(extra_config='[websocket]\nping_interval_secs = 0.3\ndead_peer_secs = 1.5\n').start()
    provision(server, USERS, TOPICS, GRANTS)
    sock = raw_upgrade(server, SUBSCRIBER)
    # It reads what comes (the server's pings) and never answers; the server hangs up on it.
    received = b''
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(4096)
        except TimeoutError:
            continue
        except OSError:
            break  # reset: closed without ceremony, as a dead peer is
        if not chunk:
            break
        received += chunk
    else:
        raise AssertionError('the server did not close a silent peer within 30 s')
    sock.close()
    assert received[:1] == b'\x89', f'the server sent no ping first: {received[:20]!r}'

    # A peer that answers pings stays, however long it says nothing itself (here 4 dead_peer_secs).
    live = peers(server, auth=SUBSCRIBER)
    sub_key = live.ok('subscribe', 'subscribed', topic='orders.created')['sub_key']
    assert not live.quiet(6.0)
    assert live.closed is None
    assert live.request('ping')['action'] == 'pong'
    msg_id = rest_publish(server, PUBLISHER, 'orders.created', 'still here')
    got = live.messages(1)[0]
    assert (got['sub_key'], got['meta']['msg_id']) == (sub_key, msg_id)
    still_healthy(server, SUBSCRIBER)


@pytest.mark.slow
def test_two_hundred_connections_at_once(ws_server: LiveServer, peers: Any, tag: str,
                                         own_topic: Callable[[str], str]) -> None:
    # 200 is max_subscriptions_per_definition, which counts subscriptions no client is attached to:
    # ws.subscriber may hold some the other tests left, a definition of this test's own holds none.
    crowd_name, crowd = f'ws.crowd.{tag}', (f'ws-crowd-{tag}', f'ws-crowd-pw-{tag}')
    provision(ws_server, [(crowd_name, *crowd)], grants={crowd_name: {'pub': [], 'sub': ['orders.**']}})
    topic = own_topic('created')
    count = 200
    connected = []
    for n in range(count):
        peer = peers(ws_server, auth=crowd) if n % 2 else peers(ws_server, hello=crowd)
        peer.send({'action': 'subscribe', 'id': n, 'topic': topic, 'window': 1})
        connected.append(peer)
    sub_keys = {peer.answer(n)['sub_key'] for n, peer in enumerate(connected)}
    assert len(sub_keys) == count
    msg_id = rest_publish(ws_server, PUBLISHER, topic, {'to': 'all'})
    for peer in connected:
        got = peer.messages(1)[0]
        assert got['meta']['msg_id'] == msg_id and got['sub_key'] in sub_keys
        peer.send({'action': 'ack', 'id': 'a', 'ack_ids': [got['ack_id']]})
    for peer in connected:
        assert peer.answer('a')['acked'] == 1
    # All at once again: one publication over WebSocket each, everyone answered.
    for n, peer in enumerate(connected):
        peer.send({'action': 'publish', 'id': f'p{n}', 'topic': 'orders.cancelled', 'data': n})
    for n, peer in enumerate(connected):
        refused = peer.answer(f'p{n}')  # ws.crowd.<tag> has no pub permission: 401 for each, none lost
        assert (refused['action'], refused['status']) == ('error', 401), refused
    for peer in connected:
        peer.close()
    still_healthy(ws_server, SUBSCRIBER)


def test_abandoned_half_open_connections_do_not_hold_the_worker(ws_server: LiveServer) -> None:
    # Clients that upgrade and vanish (TCP closed, no closing frame), some mid-frame.
    for n in range(20):
        sock = socket.create_connection(('127.0.0.1', ws_server.port), timeout=10)
        sock.sendall(b'GET /pubsub/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
                     b'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n')
        if n % 2:
            sock.recv(4096)
            sock.sendall(b'\x81\xfe\x10\x00abcd')  # a masked text frame header announcing 4096 bytes, then nothing
        sock.close()
    still_healthy(ws_server, SUBSCRIBER)


def test_a_closed_connection_is_reported_as_such(ws_server: LiveServer) -> None:
    # The client closes politely: the server answers the closing handshake with the same code.
    peer = Peer.connect(ws_server, hello=SUBSCRIBER)
    peer.ws.send_close(4000, b'bye')
    with pytest.raises(PeerClosed) as closed:
        peer.wait(lambda f: False, timeout=30, what='the closing answer')
    assert closed.value.code == 4000
    peer.close()
    still_healthy(ws_server, SUBSCRIBER)
