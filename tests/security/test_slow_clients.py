"""Slow and numerous clients: each is cut off in bounded time, and the worker keeps answering.

The server here has small limits so that each bound shows within a second or two; the figures
at production defaults (1,100 slow sockets against /health) are measured by bench/slow_clients.py.
"""

from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.live_server import LiveServer, poll
from tests.security.conftest import PASSWORD, USER, start_target, stop_and_check_log

LIMITS = '''
[http]
header_timeout_secs = 1
body_grace_secs = 1.0
body_min_rate_bytes = 1000
send_timeout_secs = 1.0
max_body_size = 33554432
max_connections = 40
auth_max_failures = 0
'''


@pytest.fixture(scope='module')
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A server with second-scale limits; its log must stay free of errors."""
    base = tmp_path_factory.mktemp('tight')
    server = start_target(base, f'sqlite:///{base / "conduit.db"}', LIMITS)
    yield server
    stop_and_check_log(server)


def _send_buffer_max() -> int:
    """The most a TCP sender's buffer may grow to here (tcp_wmem's maximum; 4 MB when it cannot be read)."""
    try:
        return max(int(Path('/proc/sys/net/ipv4/tcp_wmem').read_text().split()[2]), 4 * 1024 * 1024)
    except (OSError, ValueError, IndexError):
        return 4 * 1024 * 1024


def _connect(server: LiveServer) -> socket.socket:
    return socket.create_connection(('127.0.0.1', server.port), timeout=10)


def _read_all(s: socket.socket) -> bytes:
    data = b''
    try:
        while chunk := s.recv(65536):
            data += chunk
    except (ConnectionResetError, TimeoutError):
        pass
    return data


def test_slow_body_gets_408(tight: LiveServer) -> None:
    with _connect(tight) as s:
        s.sendall(b'POST /api/sec/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                  b'Content-Length: 10000\r\n\r\n[')
        started = time.monotonic()
        answer = b''
        s.settimeout(0.2)
        while time.monotonic() - started < 8 and not answer:
            try:
                s.sendall(b'1,')  # two bytes every 0.2 s: far below 1,000 bytes/s
                answer = s.recv(4096)
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        elapsed = time.monotonic() - started
        s.settimeout(5)
        answer += _read_all(s)  # the body may come in a later segment; the server then closes
    assert answer.startswith(b'HTTP/1.1 408'), answer[:200]
    assert b'too slowly' in answer or b'slow' in answer.lower()
    assert elapsed < 5


def test_body_at_a_fair_rate_is_read_whole(tight: LiveServer) -> None:
    # 3,000 bytes in 1.5 s: above the minimum rate, though longer than the grace period.
    body = b'[' + b','.join(b'1' for _ in range(1500)) + b']'
    with _connect(tight) as s:
        s.sendall(b'POST /api/sec/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                  b'Connection: close\r\nContent-Length: ' + str(len(body)).encode() + b'\r\n\r\n')
        for i in range(0, len(body), 300):
            s.sendall(body[i:i + 300])
            time.sleep(0.15)
        assert _read_all(s).startswith(b'HTTP/1.1 200')


def test_slow_headers_are_cut_off(tight: LiveServer) -> None:
    with _connect(tight) as s:
        s.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n')
        started = time.monotonic()
        closed = False
        s.settimeout(0.2)
        while time.monotonic() - started < 6:
            try:
                s.sendall(b'X')
                if s.recv(4096) == b'':
                    closed = True
                    break
            except TimeoutError:
                continue
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
        assert closed and time.monotonic() - started < 4


def test_past_max_connections_new_ones_get_503_at_once(tight: LiveServer) -> None:
    idle = [_connect(tight) for _ in range(40)]
    try:
        time.sleep(0.3)  # let the worker accept them all
        with _connect(tight) as s:
            s.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\n\r\n')
            answer = _read_all(s)
        assert answer.startswith(b'HTTP/1.1 503'), answer[:200]
        assert b'Retry-After: 1' in answer and b'too many open connections' in answer
    finally:
        for s in idle:
            s.close()
    # The idle ones are gone: served again.
    deadline = time.monotonic() + 5
    while requests.get(tight.url + '/health', timeout=5).status_code != 200:
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_a_client_that_never_reads_loses_the_connection(tight: LiveServer) -> None:
    # An echo answer the kernel cannot hold for the server whole (twice its largest send buffer), or
    # sendall would finish into the buffer and nothing would time out (a 4 MB answer did, with tcp_wmem's
    # maximum at 4 MB).
    big = '[' + ','.join(['"' + 'x' * 1000 + '"'] * (_send_buffer_max() * 2 // 1003 + 1)) + ']'
    with _connect(tight) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(b'POST /api/sec/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
                  b'Content-Length: ' + str(len(big)).encode() + b'\r\n\r\n' + big.encode())
        tight.wait_for_log('was not taken within', timeout=10)
        received = _read_all(s)
    assert len(received) < len(big)  # cut off, not delivered whole
    # The worker goes on serving.
    assert requests.get(tight.url + '/health', timeout=5).status_code == 200


def test_a_greedy_keep_alive_client_does_not_starve_the_others(tight: LiveServer) -> None:
    # A connection whose next request is always waiting never blocks in recv, so without a yield
    # between requests its greenlet served all of them before the worker even accepted anyone else
    # (seen with wrk at saturation: p50 0.4 ms, p99 near a second).
    pipelined = 400
    request = (b'POST /api/sec/open HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
               b'Content-Length: 2\r\n\r\n{}')
    answered = 0
    first = threading.Event()

    def read_greedy(s: socket.socket) -> None:
        nonlocal answered
        data = b''
        while answered < pipelined:
            chunk = s.recv(65536)
            if not chunk:
                return
            data += chunk
            answered = data.count(b'HTTP/1.1 200 ')
            first.set()

    with _connect(tight) as greedy:
        reader = threading.Thread(target=read_greedy, args=(greedy,), daemon=True)
        reader.start()
        greedy.sendall(request * pipelined)
        assert first.wait(10), 'the greedy client got no answer'
        with _connect(tight) as other:
            other.sendall(b'GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
            answer = _read_all(other)
            answered_before_other = answered
        reader.join(30)
    assert answer.startswith(b'HTTP/1.1 200 '), answer[:200]
    assert answered == pipelined
    # Served in turn: the other client's answer came long before the greedy client's last one.
    assert answered_before_other < pipelined // 2, answered_before_other


def _pull_then_leave(server: LiveServer, sub_key: str, reset: bool) -> None:
    """Ask for messages with ack 'auto', then close (or reset) the connection without reading the answer."""
    body = json.dumps({'sub_key': sub_key, 'max_messages': 50}).encode()
    token = base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode()
    s = _connect(server)
    if reset:  # close with a reset: SO_LINGER on, zero seconds
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
    s.sendall(b'POST /pubsub/messages/get HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n'
              b'Authorization: Basic ' + token.encode() + b'\r\n'
              b'Content-Length: ' + str(len(body)).encode() + b'\r\n\r\n' + body)
    s.close()


@pytest.mark.parametrize('reset', [False, True], ids=['closed', 'reset'])
def test_an_auto_ack_pull_its_client_never_read_is_handed_over_again(tight: LiveServer, reset: bool) -> None:
    # Before, an auto pull acked what it took in its own transaction: five clients that went away
    # before reading their answers took (and lost) every message.
    auth = (USER, PASSWORD)
    r = tight.request('POST', '/pubsub/subscribe/topic/sec.topic', auth=auth)
    assert r.status_code == 200, r.text
    sub_key = r.json()['sub_key']
    sent = []
    for i in range(4):
        r = tight.request('POST', '/pubsub/topic/sec.topic', json={'data': {'n': i, 'reset': reset}}, auth=auth)
        assert r.status_code == 200, r.text
        sent.append(r.json()['msg_id'])
    try:
        for _ in range(5):
            _pull_then_leave(tight, sub_key, reset)
        time.sleep(1.0)  # the server takes the five pulls first (a wait, not a measure)
        got: list[dict] = []

        def everything_back() -> bool:
            r = tight.request('POST', '/pubsub/messages/get', json={'sub_key': sub_key, 'max_messages': 50},
                              auth=auth)
            assert r.status_code == 200, r.text
            got.extend(r.json()['messages'])
            return len(got) >= len(sent)

        poll(everything_back, 10, message='the messages the gone clients never read')
        assert [m['meta']['msg_id'] for m in got] == sent  # each once, in order
        # Put back as it was: a hand-over nobody got is not an attempt.
        assert {m['meta']['delivery_count'] for m in got} == {1}
        # Taken by a client that read its answer: gone from the queue.
        r = tight.request('POST', '/pubsub/messages/get', json={'sub_key': sub_key}, auth=auth)
        assert r.json()['messages'] == []
    finally:
        tight.request('POST', '/pubsub/unsubscribe/topic/sec.topic', json={'sub_key': sub_key}, auth=auth)
