"""WebSocket subscribers when things break: killed clients, a killed server, a move to another worker, idleness.

The invariants are the pub/sub ones: every publication acknowledged to a publisher reaches the
subscriber; a message leaves the queue only when the client acknowledged it, so what a client held
unacknowledged when it vanished comes back (its attempt counted), and what it acknowledged comes back
at most once more per fault, within one window. Clients are websocket-client connections; the server
is a real gunicorn server, SIGKILLed where a test says so. Figures (duplicates, time to resume) are
printed as the other fault tests print theirs.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import requests
import websocket

from tests.live_server import LiveServer, poll
from tests.reliability.harness import FAST_PUBSUB, Tally
from tests.websocket_peer import Database, Peer, PeerClosed, detached_subscription, provision, rest_publish

SUBSCRIBER = ('ws-sub', 'ws-sub-pw-1')
PUBLISHER = ('ws-pub', 'ws-pub-pw-2')
USERS = [('ws.subscriber', *SUBSCRIBER), ('ws.publisher', *PUBLISHER)]
GRANTS = {'ws.subscriber': {'pub': [], 'sub': ['faults.**']}, 'ws.publisher': {'pub': ['faults.**'], 'sub': []}}

#: Fast redelivery and lease hand-over; a quick sweeper for the inactivity limit.
CONFIG = FAST_PUBSUB + 'sweep_interval_secs = 0.5\n'


def started(server_factory: Callable[..., LiveServer], topics: list[dict[str, Any]], workers: int = 1) -> LiveServer:
    """A started server with the users, permissions and these topics, made through the admin API."""
    server = server_factory(workers=workers, extra_config=CONFIG).start()
    provision(server, USERS, topics, GRANTS)
    return server


def data_of(messages: list[dict[str, Any]]) -> list[Any]:
    """The data of message frames, in order."""
    return [m['data'] for m in messages]


def test_killed_client_gets_its_unacked_messages_back_on_resume(server_factory: Callable[..., LiveServer],
                                                                db_url: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    server = started(server_factory, [{'name': 'faults.orders'}])
    sub_key = detached_subscription(server, db_url, SUBSCRIBER, 5, topic='faults.orders')
    for n in range(8):
        rest_publish(server, PUBLISHER, 'faults.orders', n)
    first = Peer.connect(server, hello=SUBSCRIBER)
    assert first.ok('subscribe', 'subscribed', sub_key=sub_key)['queue_depth'] == 8
    held = first.messages(5)
    assert data_of(held) == [0, 1, 2, 3, 4]
    # Two acknowledged make room for two more: five unacknowledged when the client dies without a closing frame.
    assert first.request('ack', ack_ids=[held[0]['ack_id'], held[1]['ack_id']])['acked'] == 2
    assert data_of(first.messages(2)) == [5, 6]
    first.abort()

    started_at = time.monotonic()
    second = Peer.connect(server, hello=SUBSCRIBER)
    resumed = second.ok('subscribe', 'subscribed', sub_key=sub_key)
    assert resumed['resumed'] is True and resumed['window'] == 5
    back = second.take(6)
    resume_secs = time.monotonic() - started_at
    # The five it held come first, their attempt counted, then the one never sent; none acknowledged.
    assert data_of(back) == [2, 3, 4, 5, 6, 7]
    assert [m['meta']['delivery_count'] for m in back] == [2, 2, 2, 2, 2, 1]
    assert not [f for f in second.quiet(1.0) if f['action'] == 'message']
    poll(lambda: second.ok('subscribe', 'subscribed', sub_key=sub_key)['queue_depth'] == 0,
         message='the queue emptied by the acks')
    second.close()
    with capsys.disabled():
        print(f'\nkilled client: 5 unacked back with delivery_count 2, resume to the 6th message {resume_secs:.2f} s')


class _RestPublisher(threading.Thread):
    """Publishes numbers start, start+step, ... over REST until stopped, recording what was acknowledged."""

    def __init__(self, server: LiveServer, tally: Tally, start: int, step: int) -> None:
        super().__init__(daemon=True)
        self._server, self._tally, self._n, self._step = server, tally, start, step
        self._halt = threading.Event()
        self._session = requests.Session()

    def run(self) -> None:
        while not self._halt.is_set():
            n = self._n
            self._tally.attempted.add(n)
            try:
                r = self._session.post(f'{self._server.url}/pubsub/topic/faults.stream', json={'data': {'n': n}},
                                       auth=PUBLISHER, timeout=5)
                if r.status_code == 200:
                    self._tally.acknowledged.add(n)
                else:
                    self._tally.errors[r.status_code] += 1
            except requests.RequestException:
                self._tally.refused += 1
                time.sleep(0.05)
            self._n += self._step
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop after the request in flight."""
        self._halt.set()
        self.join(30)


class _WsSubscriber(threading.Thread):
    """Receives and acknowledges every message, reconnecting and resuming its sub_key whenever it is cut off."""

    def __init__(self, server: LiveServer, tally: Tally, window: int) -> None:
        super().__init__(daemon=True)
        self._server, self._tally, self._window = server, tally, window
        self._halt = threading.Event()
        self.sub_key: str | None = None
        self.ready = threading.Event()
        #: Seconds from each (re)connection attempt after a cut to the first message received again.
        self.resume_secs: list[float] = []
        self.reconnects = 0
        self.failure: str | None = None

    def run(self) -> None:
        cut_at: float | None = None
        while not self._halt.is_set():
            peer = None
            try:
                peer = Peer.connect(self._server, hello=SUBSCRIBER, timeout=5)
                if self.sub_key is None:
                    answer = peer.ok('subscribe', 'subscribed', topic='faults.stream', window=self._window)
                    self.sub_key = answer['sub_key']
                else:
                    answer = peer.request('subscribe', sub_key=self.sub_key)
                    if answer['action'] != 'subscribed':
                        self.failure = f'resume refused: {answer}'
                        return
                    self.reconnects += 1
                self.ready.set()
                while not self._halt.is_set():
                    frame = peer.receive(0.5)
                    if frame is None or frame['action'] != 'message':
                        continue
                    if cut_at is not None:
                        self.resume_secs.append(time.monotonic() - cut_at)
                        cut_at = None
                    self._tally.delivered[frame['data']['n']] += 1
                    peer.send({'action': 'ack', 'ack_ids': [frame['ack_id']]})
            except (PeerClosed, OSError, websocket.WebSocketException, AssertionError):
                if cut_at is None:
                    cut_at = time.monotonic()
                time.sleep(0.1)
            finally:
                if peer is not None:
                    peer.close()

    def stop(self) -> None:
        """Stop within half a second."""
        self._halt.set()
        self.join(30)


@pytest.mark.slow
def test_kill_9_under_load_loses_no_acknowledged_publication(server_factory: Callable[..., LiveServer],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    window, kills = 10, 3
    server = started(server_factory, [{'name': 'faults.stream', 'has_gd': True}])
    tally = Tally()
    subscriber = _WsSubscriber(server, tally, window)
    subscriber.start()
    assert subscriber.ready.wait(30), f'the subscriber did not subscribe: {subscriber.failure}'
    publishers = [_RestPublisher(server, tally, start, 2) for start in (0, 1)]
    for p in publishers:
        p.start()
    rng = random.Random(17)
    try:
        for _ in range(kills):
            time.sleep(rng.uniform(1.0, 2.5))
            server.kill()
            time.sleep(rng.uniform(0.0, 0.5))
            server.start()
        time.sleep(1.0)
    finally:
        for p in publishers:
            p.stop()
    try:
        poll(lambda: not tally.lost or subscriber.failure, timeout=120, interval=0.2,
             message=f'every acknowledged publication delivered ({len(tally.lost)} missing)')
    finally:
        subscriber.stop()
    resume = sorted(subscriber.resume_secs)
    with capsys.disabled():
        print(f'\nws kill -9 ({kills} kills, window {window}): {tally.summary()} reconnects={subscriber.reconnects} '
              f'resume secs={[round(s, 2) for s in resume]}')
    assert subscriber.failure is None, subscriber.failure
    assert len(tally.acknowledged) > 50, f'too little load to prove anything: {tally.summary()}'
    assert not tally.lost, f'acknowledged but never delivered: {sorted(tally.lost)[:20]}'
    assert not tally.phantom, f'delivered but never published: {sorted(tally.phantom)[:20]}'
    # Each kill may deliver again at most the window in flight (acks sent but not yet stored among them).
    assert tally.duplicates <= kills * window, tally.summary()
    assert subscriber.reconnects >= kills


def _owner(db: Database, sub_key: str) -> str:
    """The owner column of a subscription's conduit_ws_client row ('' when detached or when there is no row)."""
    row = db.ws_client(sub_key)
    return str(row['owner']) if row else ''


def _probe_worker(server: LiveServer, db: Database, peer: Peer) -> str:
    """The lease owner id of the worker serving this connection (read from a throwaway subscription's row)."""
    answer = peer.request('subscribe', topic='faults.probe', window=1)
    assert answer['action'] == 'subscribed', answer
    owner = poll(lambda: _owner(db, answer['sub_key']), message='the probe attached')
    assert peer.request('unsubscribe', sub_key=answer['sub_key'])['action'] == 'unsubscribed'
    return str(owner)


@pytest.mark.slow
def test_resume_on_the_other_worker_keeps_order(server_factory: Callable[..., LiveServer], db_url: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    server = started(server_factory, [{'name': 'faults.ordered'}, {'name': 'faults.probe'}], workers=2)
    db = Database(db_url)
    first: Peer | None = None
    try:
        # Both workers learn the new definitions through the sync table: sign in until one lets us.
        first = poll(lambda: _try(lambda: Peer.connect(server, hello=SUBSCRIBER, timeout=5)),
                     message='a sign-in with the new definition')
        peer = first

        def subscribed() -> str | None:
            # Its permissions and the topic reach this worker at its next sync too: 401 or 404 until they have.
            answer = peer.request('subscribe', topic='faults.ordered', window=5)
            assert answer['action'] == 'subscribed' or answer.get('status') in (401, 404), answer
            return answer.get('sub_key')
        sub_key = poll(subscribed, message='a subscription with the new permissions')
        first.close()
        poll(lambda: db.ws_client(sub_key) is not None and _owner(db, sub_key) == '', message='the first client gone')
        # A worker learns of a subscription made by another one at its next sync (sync.interval_secs, 0.5 s),
        # and of the publisher's permissions likewise: until then its publications would not reach the queue.
        time.sleep(1.5)
        for n in range(5):
            rest_publish(server, PUBLISHER, 'faults.ordered', n)
        # Resumed with all five queued: the whole window is in flight at once.
        first = _try(lambda: Peer.connect(server, hello=SUBSCRIBER, timeout=5))
        assert first is not None
        assert first.ok('subscribe', 'subscribed', sub_key=sub_key)['queue_depth'] == 5
        owner_a = poll(lambda: _owner(db, sub_key), message='the subscription attached')
        held = first.messages(5)
        assert data_of(held) == [0, 1, 2, 3, 4]
        assert first.request('ack', ack_ids=[held[0]['ack_id'], held[1]['ack_id']])['acked'] == 2

        # The first connection stays; find a connection that the other worker serves.
        attempts, second = 0, None
        while second is None:
            attempts += 1
            assert attempts <= 200, f'200 connections, all on worker {owner_a}'
            candidate = _try(lambda: Peer.connect(server, hello=SUBSCRIBER, timeout=5))
            if candidate is None:
                continue
            owner = _try(lambda c=candidate: _probe_worker(server, db, c))
            if owner and owner != owner_a:
                second = candidate
            else:
                candidate.close()
        for n in range(5, 10):
            rest_publish(server, PUBLISHER, 'faults.ordered', n)
        # The two acks made room in the first connection's window: 5 and 6 go there too.
        assert data_of(first.messages(2)) == [5, 6]

        moved_at = time.monotonic()
        resumed = second.ok('subscribe', 'subscribed', sub_key=sub_key)
        assert resumed['resumed'] is True
        owner_b = poll(lambda: _owner(db, sub_key) not in ('', owner_a) and _owner(db, sub_key),
                       message='the row owned by the other worker')
        detached = first.wait(lambda f: f['action'] == 'detached', what='the detached notice on the first worker')
        assert detached['sub_key'] == sub_key

        # Everything not acknowledged, in publication order: the five held by the first connection
        # (counted once more), then the three it never got.
        got = second.take(8)
        move_secs = time.monotonic() - moved_at
        assert data_of(got) == [2, 3, 4, 5, 6, 7, 8, 9]
        assert [m['meta']['delivery_count'] for m in got] == [2, 2, 2, 2, 2, 1, 1, 1]
        assert not [f for f in second.quiet(1.0) if f['action'] == 'message']
        assert _owner(db, sub_key) == owner_b
        second.close()
        with capsys.disabled():
            print(f'\nws resume on the other worker: {attempts} connection(s) to reach it, '
                  f'8 messages in order in {move_secs:.2f} s')
    finally:
        if first is not None:
            first.close()
        db.close()


def _try(make: Callable[[], Any]) -> Any:
    """make(), or None when the server refused it or the connection failed (the caller tries again)."""
    try:
        return make()
    except (PeerClosed, OSError, websocket.WebSocketException, AssertionError):
        return None


@pytest.mark.slow
def test_inactivity_limit_deletes_a_detached_subscription_only(server_factory: Callable[..., LiveServer],
                                                                db_url: str,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    server = started(server_factory, [{'name': 'faults.idle', 'limit_sub_inactivity': 3},
                                      {'name': 'faults.patient', 'limit_sub_inactivity': 600}])
    db = Database(db_url)
    stays = Peer.connect(server, hello=SUBSCRIBER)
    try:
        leaves = Peer.connect(server, hello=SUBSCRIBER)
        idle = leaves.ok('subscribe', 'subscribed', topic='faults.idle')['sub_key']
        patient = leaves.ok('subscribe', 'subscribed', topic='faults.patient')['sub_key']
        # Attached all along, without acking anything: a connected client is not idle.
        attached = stays.ok('subscribe', 'subscribed', topic='faults.idle', window=10)['sub_key']
        idle_id, patient_id = db.sub_id(idle), db.sub_id(patient)
        assert idle_id is not None and patient_id is not None
        leaves.close()
        left_at = time.monotonic()
        for sub_key in (idle, patient):
            poll(lambda k=sub_key: db.ws_client(k) is None or _owner(db, k) == '', message='the client gone')
        for topic in ('faults.idle', 'faults.patient'):
            for n in range(3):
                rest_publish(server, PUBLISHER, topic, n)
        # Queued in the detached subscription (unless the sweeper was quicker than six publications).
        queued_idle = db.queued(idle_id)
        assert queued_idle in (0, 3), queued_idle
        live = stays.take(3, sub_key=attached)
        assert data_of(live) == [0, 1, 2]

        # The detached subscription of the 3 s topic goes, with its queue; its sub_key is never logged.
        poll(lambda: db.sub_id(idle) is None, message='the idle subscription deleted by the sweeper')
        deleted_secs = time.monotonic() - left_at
        assert db.queued(idle_id) == 0 and db.dead(idle_id) == 0
        assert db.rows('SELECT * FROM conduit_ws_client WHERE sub_id = :s', s=idle_id) == []
        assert idle not in server.log(), 'a sub_key in the server log'
        back = Peer.connect(server, hello=SUBSCRIBER)
        back.error('subscribe', 404, 'subscription not found', sub_key=idle)

        # The other, within its limit, lost nothing; the attached one got everything too.
        assert back.ok('subscribe', 'subscribed', sub_key=patient)['resumed'] is True
        kept = back.take(3)
        assert data_of(kept) == [0, 1, 2] and [m['meta']['delivery_count'] for m in kept] == [1, 1, 1]
        assert db.sub_id(attached) is not None
        poll(lambda: db.queued(patient_id) == 0, message='the patient queue emptied by the acks')
        back.close()
        with capsys.disabled():
            print(f'\nws inactivity (limit 3 s, sweep 0.5 s): detached subscription deleted {deleted_secs:.2f} s '
                  f'after its client left with {queued_idle} queued; the attached one and the one within its limit '
                  f'kept everything')
    finally:
        stays.close()
        db.close()
