"""WsConnection against wsproto's client side over a socket pair: framing, bounds, pings, dead peers, closing."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import gevent
import pytest
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage

from runtime.http.websocket.connection import FRAMES_PER_TURN, Closed, Limits, TimedOut, WsConnection, text_frame

pytestmark = pytest.mark.unit


class Peer:
    """The client end: wsproto in client mode on one end of a socket pair."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.ws = Connection(ConnectionType.CLIENT)

    def send(self, event: object) -> None:
        self.sock.sendall(self.ws.send(event))  # type: ignore[arg-type]

    def events(self, timeout: float = 5.0) -> list[object]:
        """Events the server sent, reading until at least one arrives (or the socket ends)."""
        self.sock.settimeout(timeout)
        got: list[object] = []
        while not got:
            data = self.sock.recv(65536)
            self.ws.receive_data(data or None)
            got = list(self.ws.events())
            if not data:
                break
        return got


@pytest.fixture
def pair():
    a, b = socket.socketpair()
    yield a, b
    a.close()
    b.close()


def server(sock: socket.socket, max_message_bytes: int = 1000, **kw: float) -> WsConnection:
    opts = {'ping_interval_secs': 60.0, 'dead_peer_secs': 120.0}
    opts.update(kw)
    return WsConnection(sock, label='test', limits=Limits(max_message_bytes=max_message_bytes),
                        **opts)  # type: ignore[arg-type]


def test_text_messages_both_ways_and_fragments_joined(pair):
    conn, peer = server(pair[0]), Peer(pair[1])
    peer.send(TextMessage(data='{"a": 1}'))
    assert conn.receive(timeout=5) == '{"a": 1}'
    peer.send(TextMessage(data='ab', message_finished=False))
    peer.send(TextMessage(data='cd', message_finished=True))
    assert conn.receive(timeout=5) == 'abcd'
    conn.send_text('héllo')
    conn.send_text(b'{"x":2}')
    texts: list[str] = []
    while len(texts) < 2:
        texts += [e.data for e in peer.events() if isinstance(e, TextMessage)]
    assert texts == ['héllo', '{"x":2}']


def test_messages_sent_in_one_write_arrive_whole_at_every_length_a_header_can_have(pair):
    conn, peer = server(pair[0]), Peer(pair[1])
    # Lengths at each edge of the three header forms (7 bits, 16 bits, 64 bits), and text beyond ASCII.
    texts = ['', 'x' * 125, 'y' * 126, 'z' * 65535, 'w' * 65536, 'é' * 70000, '{"n":1}']
    reader = gevent.spawn(lambda: _texts(peer, len(texts)))
    conn.send_texts([t.encode('utf-8') for t in texts])
    assert reader.get(timeout=10) == texts
    assert text_frame(b'ab') == b'\x81\x02ab'  # FIN, text, unmasked: what RFC 6455 says a server sends


def test_a_closed_connection_sends_nothing_and_says_why(pair):
    conn, _peer = server(pair[0]), Peer(pair[1])
    conn.close(1000, 'bye', drain=False)
    with pytest.raises(Closed) as e:
        conn.send_texts([b'{"late":1}'])
    assert e.value.code == 1000


def _texts(peer: Peer, n: int) -> list[str]:
    """The next n whole text messages the server sent (fragments joined)."""
    texts: list[str] = []
    part = ''
    while len(texts) < n:
        for e in peer.events(timeout=10):
            if isinstance(e, TextMessage):
                part += e.data
                if e.message_finished:
                    texts.append(part)
                    part = ''
    return texts


def test_message_over_the_limit_closes_1009(pair):
    conn, peer = server(pair[0], max_message_bytes=100), Peer(pair[1])
    peer.send(TextMessage(data='x' * 60, message_finished=False))
    peer.send(TextMessage(data='y' * 60, message_finished=True))
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert e.value.code == 1009
    close = [ev for ev in peer.events() if isinstance(ev, CloseConnection)]
    assert close and close[0].code == 1009


def test_multibyte_characters_count_as_bytes(pair):
    conn, peer = server(pair[0], max_message_bytes=100), Peer(pair[1])
    peer.send(TextMessage(data='é' * 60))  # 60 characters, 120 bytes
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert e.value.code == 1009


def test_binary_frame_closes_1003(pair):
    conn, peer = server(pair[0]), Peer(pair[1])
    peer.send(BytesMessage(data=b'\x00\x01'))
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert e.value.code == 1003


def test_unmasked_frame_is_a_protocol_error(pair):
    conn = server(pair[0])
    pair[1].sendall(b'\x81\x02hi')  # a text frame without the mask a client must set
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert e.value.code == 1002


def test_ping_is_answered_and_close_is_echoed(pair):
    conn, peer = server(pair[0]), Peer(pair[1])
    peer.send(Ping(payload=b'abc'))
    peer.send(TextMessage(data='after'))
    assert conn.receive(timeout=5) == 'after'
    pongs = [e for e in peer.events() if isinstance(e, Pong)]
    assert pongs and pongs[0].payload == b'abc'
    peer.send(CloseConnection(code=1000, reason='bye'))
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert (e.value.code, e.value.reason) == (1000, 'bye')
    assert any(isinstance(ev, CloseConnection) for ev in peer.events())
    with pytest.raises(Closed):
        conn.send_text('too late')


def test_receive_times_out(pair):
    conn = server(pair[0])
    with pytest.raises(TimedOut):
        conn.receive(timeout=0.2)


def test_server_pings_and_drops_a_silent_peer(pair):
    conn, peer = server(pair[0], ping_interval_secs=0.1, dead_peer_secs=0.5), Peer(pair[1])
    started = time.monotonic()
    with pytest.raises(Closed) as e:
        conn.receive()
    assert e.value.code == 1006 and 'no frame' in e.value.reason
    assert time.monotonic() - started < 5
    assert any(isinstance(ev, Ping) for ev in peer.events())


def test_a_peer_answering_pings_stays(pair):
    conn, peer = server(pair[0], ping_interval_secs=0.05, dead_peer_secs=0.3), Peer(pair[1])

    def answer_pings() -> None:
        for _ in range(20):
            for ev in peer.events():
                if isinstance(ev, Ping):
                    peer.send(ev.response())
    g = gevent.spawn(answer_pings)
    with pytest.raises(TimedOut):
        conn.receive(timeout=0.8)  # outlives dead_peer_secs: the pongs kept it
    g.kill()


def test_peer_vanishing_ends_the_connection(pair):
    conn = server(pair[0])
    pair[1].close()
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert e.value.code == 1006


def _watcher(probe: Callable[[], int]) -> tuple[set[int], gevent.Greenlet]:
    """A greenlet that notes what probe says at each turn it gets: the reader's progress other greenlets see."""
    seen: set[int] = set()

    def run() -> None:
        while True:
            seen.add(probe())
            gevent.sleep(0)
    return seen, gevent.spawn(run)


def test_reader_lets_others_run_between_many_messages_of_one_read(pair):
    conn, peer = server(pair[0]), Peer(pair[1])
    count = 20 * FRAMES_PER_TURN
    pair[1].sendall(b''.join(peer.ws.send(TextMessage(data='x')) for _ in range(count)))
    assert conn.receive(timeout=5) == 'x'  # one read takes them all
    received = [1]
    seen, watcher = _watcher(lambda: received[0])
    try:
        for _ in range(count - 1):
            assert conn.receive(timeout=5) == 'x'
            received[0] += 1
    finally:
        watcher.kill()
    assert len(seen) >= 10


def test_reader_lets_others_run_within_a_message_of_many_fragments(pair):
    conn, peer = server(pair[0], max_message_bytes=100_000), Peer(pair[1])
    count = 20 * FRAMES_PER_TURN
    pair[1].sendall(b''.join(peer.ws.send(TextMessage(data='x', message_finished=False)) for _ in range(count))
                    + peer.ws.send(TextMessage(data='!', message_finished=True)))
    # Other greenlets see the message grow: the reader let them run while parsing the fragments of one read.
    seen, watcher = _watcher(lambda: len(conn._parts))
    try:
        assert conn.receive(timeout=5) == 'x' * count + '!'
    finally:
        watcher.kill()
    assert len(seen) >= 10  # not one turn at the wait for the socket, then none while its thousand frames are parsed


def test_frames_past_the_rate_close_1008_continuations_and_pings_counted(pair):
    conn, peer = WsConnection(pair[0], limits=Limits(max_message_bytes=1000, frames_per_sec=0.5, frame_burst=5),
                              ping_interval_secs=60, dead_peer_secs=120, label='test'), Peer(pair[1])
    for _ in range(3):
        peer.send(Ping(payload=b'p'))
    for _ in range(3):
        peer.send(TextMessage(data='x', message_finished=False))
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert e.value.code == 1008 and 'frames per second' in e.value.reason
    close = [ev for ev in peer.events() if isinstance(ev, CloseConnection)]
    while not close:
        close = [ev for ev in peer.events() if isinstance(ev, CloseConnection)]
    assert close[0].code == 1008


def test_frame_header_announcing_more_than_the_limit_is_refused_before_its_payload(pair):
    conn = WsConnection(pair[0], limits=Limits(max_message_bytes=100, check_headers=True),
                        ping_interval_secs=60, dead_peer_secs=120, label='test')
    # A masked text frame announcing 1 MiB (mask 0: the payload reads as sent), of which 10 bytes come.
    pair[1].sendall(b'\x81\xff' + (1 << 20).to_bytes(8, 'big') + b'\x00' * 4 + b'x' * 10)
    with pytest.raises(Closed) as e:
        conn.receive(timeout=5)
    assert e.value.code == 1009


def test_limits_set_after_a_message_apply_to_the_next_one_read_with_it(pair):
    conn, peer = WsConnection(pair[0], limits=Limits(max_message_bytes=100, check_headers=True, frame_burst=2,
                                                     frames_per_sec=0.1),
                              ping_interval_secs=60, dead_peer_secs=120, label='test'), Peer(pair[1])
    # A hello and a larger message, more frames than the first limits' burst, all in one write.
    pair[1].sendall(peer.ws.send(TextMessage(data='hello')) + peer.ws.send(TextMessage(data='y' * 500))
                    + b''.join(peer.ws.send(TextMessage(data='z')) for _ in range(5)))
    assert conn.receive(timeout=5) == 'hello'
    conn.set_limits(Limits(max_message_bytes=1000))
    assert conn.receive(timeout=5) == 'y' * 500
    assert [conn.receive(timeout=5) for _ in range(5)] == ['z'] * 5
