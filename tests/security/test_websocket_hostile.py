"""Hostile WebSocket clients: before and after sign-in, what they may send is bounded, and a normal client is not.

The frames are written by hand (RFC 6455 §5.2, masked as a client must) over plain sockets, since a
client library would not send an unfinished frame or a flood of one-byte continuations. Before
sign-in the server's defaults apply (``hello_max_bytes`` 4 KiB, 10 frames per second with a burst
of 50); once signed in the frame rate is lowered here (100 per second, a burst of 500) so that a
flood is sure to outrun it on a busy machine. The figures at the defaults (2,000 such connections,
the worker's memory and /health) are measured by bench/websocket_hostile.py.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

from tests.live_server import LiveServer
from tests.security.conftest import PASSWORD, USER, start_target, stop_and_check_log
from tests.websocket_peer import Peer, basic_header, still_healthy

LIMITS = '''
[websocket]
frames_per_sec = 100
frame_burst = 500
'''

TEXT, CONTINUATION, CLOSE = 0x1, 0x0, 0x8


@pytest.fixture(scope='module')
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server with the WebSocket defaults before sign-in and a low frame rate after it."""
    base = tmp_path_factory.mktemp('ws-hostile')
    server = start_target(base, f'sqlite:///{base / "conduit.db"}', LIMITS)
    yield server
    stop_and_check_log(server)


def upgrade(server: LiveServer, auth: tuple[str, str] | None = None) -> socket.socket:
    """A plain socket past the WebSocket handshake, with Basic Auth on it or (auth None) without credentials."""
    sock = socket.create_connection(('127.0.0.1', server.port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode('ascii')
    authorization = f'Authorization: {basic_header(*auth)}\r\n' if auth else ''
    sock.sendall((f'GET /pubsub/ws HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n'
                  f'Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n'
                  f'{authorization}\r\n').encode('ascii'))
    head = b''
    while b'\r\n\r\n' not in head:
        chunk = sock.recv(4096)
        assert chunk, f'the server closed the connection during the handshake: {head!r}'
        head += chunk
    assert head.startswith(b'HTTP/1.1 101'), head
    assert head.endswith(b'\r\n\r\n'), 'the server spoke before the client'
    return sock


def frame_header(opcode: int, length: int, fin: bool = True, mask: bytes = b'\x00\x00\x00\x00') -> bytes:
    """The header of a masked client frame announcing length payload bytes."""
    first = (0x80 if fin else 0) | opcode
    if length < 126:
        return bytes([first, 0x80 | length]) + mask
    if length < 1 << 16:
        return bytes([first, 0x80 | 126]) + struct.pack('!H', length) + mask
    return bytes([first, 0x80 | 127]) + struct.pack('!Q', length) + mask


def frame(opcode: int, payload: bytes, fin: bool = True) -> bytes:
    """A whole masked client frame."""
    mask = os.urandom(4)
    return frame_header(opcode, len(payload), fin, mask) + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b''
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f'the server ended the TCP connection after {len(data)} of {n} bytes')
        data += chunk
    return data


def read_close(sock: socket.socket) -> tuple[int, str, list[bytes]]:
    """Read the server's frames up to its closing frame: (code, reason, the text payloads before it)."""
    texts = []
    while True:
        first, second = _exactly(sock, 2)
        length = second & 0x7F
        if length == 126:
            length = struct.unpack('!H', _exactly(sock, 2))[0]
        elif length == 127:
            length = struct.unpack('!Q', _exactly(sock, 8))[0]
        payload = _exactly(sock, length)
        opcode = first & 0x0F
        if opcode == CLOSE:
            return struct.unpack('!H', payload[:2])[0], payload[2:].decode('utf-8'), texts
        if opcode == TEXT:
            texts.append(payload)


def test_unfinished_large_frame_before_hello_is_closed_1009_at_its_header(target: LiveServer) -> None:
    sock = upgrade(target)
    try:
        # The attack of the report: a frame announcing just under max_frame_bytes (6 MiB), never finished,
        # and no hello. Only the header and 8 KiB of it are sent: the server must not wait for more.
        sock.sendall(frame_header(TEXT, 6 * 1024 * 1024 - 1) + b'x' * 8192)
        code, reason, _ = read_close(sock)
    finally:
        sock.close()
    assert code == 1009, reason
    assert '4096 bytes' in reason
    still_healthy(target, (USER, PASSWORD))


def test_fragments_growing_past_the_hello_limit_are_closed_1009(target: LiveServer) -> None:
    sock = upgrade(target)
    try:
        # Each frame small, the message they make more than the 4 KiB a hello may take.
        sock.sendall(frame(TEXT, b'x' * 3000, fin=False) + frame(CONTINUATION, b'y' * 3000, fin=False))
        code, reason, _ = read_close(sock)
    finally:
        sock.close()
    assert code == 1009, reason
    assert 'message over 4096 bytes' in reason


def test_one_byte_continuation_flood_before_hello_is_closed_1008(target: LiveServer) -> None:
    sock = upgrade(target)
    try:
        sock.sendall(frame(TEXT, b'{', fin=False) + b''.join(frame(CONTINUATION, b' ', fin=False) for _ in range(500)))
        code, reason, _ = read_close(sock)
    finally:
        sock.close()
    assert code == 1008, reason
    assert 'frames per second' in reason
    still_healthy(target, (USER, PASSWORD))


def test_signed_in_ping_flood_is_closed_1008(target: LiveServer) -> None:
    sock = upgrade(target, (USER, PASSWORD))
    flood = b''.join(frame(TEXT, json.dumps({'action': 'ping', 'id': n}).encode()) for n in range(20_000))
    sent: list[BaseException] = []

    def send() -> None:
        try:
            sock.sendall(flood)
        except OSError as e:  # the server closed the connection part way: the point of the test
            sent.append(e)
    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    try:
        code, reason, pongs = read_close(sock)
    finally:
        sock.close()
        sender.join(30)
    assert code == 1008, reason
    assert 'more than 100 frames per second' in reason
    assert 500 <= len(pongs) < 20_000  # the burst was answered; the flood was not
    still_healthy(target, (USER, PASSWORD))


def test_normal_client_is_unaffected(target: LiveServer) -> None:
    peer = Peer.connect(target, hello=(USER, PASSWORD))
    try:
        sub = peer.ok('subscribe', 'subscribed', topic='sec.topic')
        for n in range(50):
            peer.ok('publish', 'published', topic='sec.topic', data={'n': n, 'pad': 'p' * 10_000})
        got = peer.take(50, sub_key=sub['sub_key'])
        assert sorted(m['data']['n'] for m in got) == list(range(50))
        assert peer.request('ping')['action'] == 'pong'
        assert peer.ws.connected
    finally:
        peer.close()


def test_frames_sent_with_the_hello_get_the_signed_in_limits(target: LiveServer) -> None:
    sock = upgrade(target)
    try:
        # A client that does not wait for "authenticated": a publish larger than a hello may be, and
        # more frames than the burst allowed before sign-in, in the same write as its hello.
        hello = json.dumps({'action': 'hello', 'id': 'h', 'username': USER, 'password': PASSWORD}).encode()
        publish = json.dumps({'action': 'publish', 'id': 'p', 'topic': 'sec.topic', 'data': 'd' * 20_000}).encode()
        pings = [json.dumps({'action': 'ping', 'id': n}).encode() for n in range(60)]
        sock.sendall(frame(TEXT, hello) + frame(TEXT, publish) + b''.join(frame(TEXT, p) for p in pings)
                     + frame(CLOSE, struct.pack('!H', 1000)))
        code, reason, texts = read_close(sock)
    finally:
        sock.close()
    answers = [json.loads(t) for t in texts]
    assert [a['action'] for a in answers] == ['authenticated', 'published'] + ['pong'] * 60, answers[:3]
    assert code == 1000, reason


def test_limit_closes_are_counted_in_metrics(target: LiveServer) -> None:
    r = target.request('GET', '/metrics', auth=target.admin)
    assert r.status_code == 200, r.text
    counted = {line.split('"')[1]: float(line.rsplit(' ', 1)[1]) for line in r.text.splitlines()
               if line.startswith('conduit_websocket_frames_total{')}
    # The tests above, in file order: two messages too large, two floods too fast.
    assert counted['too_large'] >= 2 and counted['rate_limited'] >= 2, counted
