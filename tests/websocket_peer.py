"""A WebSocket client of a live server as a test sees it: JSON frames in and out, close codes, raw sockets.

Built on websocket-client (the real library a Python user would take), not on the server's own
classes nor on ``runtime.client``: a test must see what is on the wire. ``Peer`` keeps the frames
it read while it waited for something else (a ``message`` arriving before the answer to an ``ack``),
so a test can ask for answers and messages in any order. Also here: setting up security
definitions, permissions and topics through the admin API, reading the ``conduit_ws_client`` table
directly, and the "server still healthy" check every hostile-input test ends with.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import socket
import struct
import time
from collections import deque
from collections.abc import Iterable
from typing import Any

import requests
import sqlalchemy
import websocket
from websocket import ABNF

from tests.live_server import LiveServer

#: Seconds any wait of a test may take (tests/live_server.poll uses the same).
WAIT_SECS = 30.0


class PeerClosed(Exception):
    """The server closed the connection: its close code (None when it dropped the TCP connection)."""

    def __init__(self, code: int | None, reason: str = '') -> None:
        super().__init__(f'connection closed: {code} {reason}'.strip())
        self.code = code
        self.reason = reason


def ws_url(server: LiveServer) -> str:
    """The WebSocket endpoint of a server."""
    return f'ws://127.0.0.1:{server.port}/pubsub/ws'


def basic_header(username: str, password: str) -> str:
    """An Authorization header value for Basic Auth."""
    return 'Basic ' + base64.b64encode(f'{username}:{password}'.encode()).decode('ascii')


class Peer:
    """One WebSocket connection: send frames, wait for answers and messages, see how it ends."""

    def __init__(self, ws: websocket.WebSocket) -> None:
        self.ws = ws
        self._ids = itertools.count(1)
        #: Frames read but not consumed yet, oldest first.
        self.pending: deque[dict[str, Any]] = deque()
        #: Set once the server's closing frame (or the end of the TCP connection) was read.
        self.closed: PeerClosed | None = None

    @classmethod
    def connect(cls, server: LiveServer, auth: tuple[str, str] | None = None, hello: tuple[str, str] | None = None,
                origin: str | None = None, timeout: float = WAIT_SECS) -> Peer:
        """Open a connection: Basic Auth on the upgrade (auth), or a hello frame (hello), or neither.

        No Origin header unless given: websocket-client would otherwise send the server's own URL as
        the origin, as a browser would, and Basic Auth from a browser origin is refused.
        """
        header = [f'Authorization: {basic_header(*auth)}'] if auth else []
        options: dict[str, Any] = {'origin': origin} if origin else {'suppress_origin': True}
        ws = websocket.create_connection(ws_url(server), header=header, timeout=timeout, **options)
        peer = cls(ws)
        if hello is not None:
            answer = peer.request('hello', username=hello[0], password=hello[1])
            assert answer['action'] == 'authenticated', f'hello refused: {answer}'
            assert answer['username'] == hello[0], answer
        return peer

    # Sending

    def send(self, frame: Any) -> None:
        """Send one text frame: a dict or list as JSON, a str as it is."""
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def request(self, action: str, **fields: Any) -> dict[str, Any]:
        """Send a frame with a fresh id and return the server's answer to it (error or not)."""
        fid = f'r{next(self._ids)}'
        self.send({'action': action, 'id': fid, **fields})
        return self.answer(fid)

    def answer(self, fid: Any, timeout: float = WAIT_SECS) -> dict[str, Any]:
        """The answer with this id (messages read meanwhile stay pending)."""
        return self.wait(lambda f: f.get('id') == fid and f.get('action') != 'message', timeout,
                         f'the answer to frame {fid!r}')

    def ok(self, action: str, expected: str, **fields: Any) -> dict[str, Any]:
        """request(), asserting the answer's action (an error answer fails the test with its details)."""
        answer = self.request(action, **fields)
        assert answer['action'] == expected, f'{action} {fields}: expected {expected}, got {answer}'
        return answer

    def error(self, action: str, status: int, *named: str, **fields: Any) -> dict[str, Any]:
        """request(), asserting an error answer with this status whose details name each of named."""
        answer = self.request(action, **fields)
        assert answer['action'] == 'error', f'{action} {fields}: expected error {status}, got {answer}'
        assert answer['status'] == status, f'{action} {fields}: expected {status}, got {answer}'
        for text in named:
            assert text in answer['details'], f'{text!r} not in {answer["details"]!r}'
        return answer

    # Receiving

    def _read(self, timeout: float) -> dict[str, Any] | None:
        """The next JSON frame from the socket; None past timeout; PeerClosed when the connection ended."""
        if self.closed is not None:
            raise self.closed
        deadline = time.monotonic() + timeout
        try:
            while True:
                # Control frames (the server's pings) do not end the wait: the deadline does.
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.ws.settimeout(left)
                frame = self.ws.recv_frame()
                if frame.opcode in (ABNF.OPCODE_TEXT, ABNF.OPCODE_BINARY, ABNF.OPCODE_CONT):
                    self.ws.cont_frame.validate(frame)
                    self.ws.cont_frame.add(frame)
                    if self.ws.cont_frame.is_fire(frame):
                        opcode, whole = self.ws.cont_frame.extract(frame)
                        assert opcode == ABNF.OPCODE_TEXT, f'the server sent a binary frame: {whole.data[:200]!r}'
                        parsed: dict[str, Any] = json.loads(whole.data)
                        return parsed
                elif frame.opcode == ABNF.OPCODE_PING:
                    try:
                        self.ws.pong(frame.data)
                    except (OSError, websocket.WebSocketException):
                        pass
                elif frame.opcode == ABNF.OPCODE_CLOSE:
                    code = struct.unpack('!H', frame.data[:2])[0] if len(frame.data) >= 2 else None
                    self.closed = PeerClosed(code, frame.data[2:].decode('utf-8', 'replace'))
                    raise self.closed
        except websocket.WebSocketTimeoutException:
            return None
        except (websocket.WebSocketConnectionClosedException, ConnectionError) as e:
            self.closed = PeerClosed(None, f'TCP connection ended: {e!r}')
            raise self.closed from None
        except OSError as e:
            if isinstance(e, TimeoutError):
                return None
            self.closed = PeerClosed(None, f'TCP connection ended: {e!r}')
            raise self.closed from None

    def wait(self, match: Any, timeout: float = WAIT_SECS, what: str = 'a frame') -> dict[str, Any]:
        """The first frame (pending first) that match(frame) accepts; AssertionError naming what on timeout."""
        for frame in self.pending:
            if match(frame):
                self.pending.remove(frame)
                return frame
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f'{what} did not come within {timeout:g} s; pending: {list(self.pending)[:5]}')
            frame = self._read(min(left, 1.0))
            if frame is None:
                continue
            if match(frame):
                return frame
            self.pending.append(frame)

    def receive(self, timeout: float = WAIT_SECS) -> dict[str, Any] | None:
        """The next frame, pending first; None when none came within timeout (PeerClosed when closed)."""
        if self.pending:
            return self.pending.popleft()
        return self._read(timeout)

    def messages(self, count: int, timeout: float = WAIT_SECS, sub_key: str | None = None) -> list[dict[str, Any]]:
        """The next count message frames (of one subscription, if sub_key is given)."""
        return [self.wait(lambda f: f.get('action') == 'message' and (sub_key is None or f['sub_key'] == sub_key),
                          timeout, f'message {n + 1} of {count}') for n in range(count)]

    def take(self, count: int, timeout: float = WAIT_SECS, sub_key: str | None = None) -> list[dict[str, Any]]:
        """The next count messages, each acknowledged as soon as it arrived (so no window ever holds them up)."""
        taken: list[dict[str, Any]] = []
        for n in range(count):
            message = self.wait(lambda f: f.get('action') == 'message' and (sub_key is None or f['sub_key'] == sub_key),
                                timeout, f'message {n + 1} of {count} (after data {[m["data"] for m in taken]})')
            self.send({'action': 'ack', 'id': f'take-{message["ack_id"]}', 'ack_ids': [message['ack_id']]})
            taken.append(message)
        for message in taken:
            answer = self.answer(f'take-{message["ack_id"]}')
            assert (answer['action'], answer.get('acked')) == ('acked', 1), answer
        return taken

    def quiet(self, seconds: float = 1.0) -> list[dict[str, Any]]:
        """Everything that arrives within seconds (pending included), consumed: for "nothing more came"."""
        got = list(self.pending)
        self.pending.clear()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            frame = self._read(left)
            if frame is not None:
                got.append(frame)
        return got

    def close_code(self, timeout: float = WAIT_SECS) -> int | None:
        """Read until the server closes; its close code (None if it dropped the TCP connection without one)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                frame = self._read(max(0.05, min(1.0, deadline - time.monotonic())))
            except PeerClosed as closed:
                return closed.code
            if frame is not None:
                self.pending.append(frame)
            elif time.monotonic() > deadline:
                raise AssertionError(f'the server did not close the connection within {timeout:g} s')

    def close(self) -> None:
        """Close politely (never raises)."""
        try:
            self.ws.close(timeout=1)
        except Exception:  # noqa: BLE001 - a closing failure must not hide the test's outcome
            pass

    def abort(self) -> None:
        """Drop the TCP connection without a closing frame, as a killed client does."""
        try:
            self.ws.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
        except (OSError, AttributeError):
            pass
        try:
            self.ws.shutdown()
        except Exception:  # noqa: BLE001
            pass

    def send_fragments(self, parts: Iterable[str]) -> None:
        """Send one text message as several frames (a first TEXT frame, then continuations)."""
        parts = list(parts)
        for n, part in enumerate(parts):
            opcode = ABNF.OPCODE_TEXT if n == 0 else ABNF.OPCODE_CONT
            self.ws.send_frame(ABNF.create_frame(part, opcode, fin=int(n == len(parts) - 1)))


def raw_upgrade(server: LiveServer, auth: tuple[str, str], timeout: float = WAIT_SECS) -> socket.socket:
    """A plain TCP socket that completed the WebSocket handshake (Basic Auth) and will speak no more."""
    sock = socket.create_connection(('127.0.0.1', server.port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode('ascii')
    sock.sendall((f'GET /pubsub/ws HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nUpgrade: websocket\r\n'
                  f'Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n'
                  f'Authorization: {basic_header(*auth)}\r\n\r\n').encode('ascii'))
    head = b''
    while b'\r\n\r\n' not in head:
        chunk = sock.recv(4096)
        assert chunk, f'the server closed the connection during the handshake: {head!r}'
        head += chunk
    assert head.startswith(b'HTTP/1.1 101'), head
    return sock


# Setting up a server through the admin API


def admin(server: LiveServer, method: str, path: str, **kwargs: Any) -> requests.Response:
    """An admin API request."""
    return server.request(method, path, auth=server.admin, **kwargs)


def provision(server: LiveServer, users: Iterable[tuple[str, str, str]] = (),
              topics: Iterable[dict[str, Any]] = (), grants: dict[str, dict[str, list[str]]] | None = None) -> None:
    """Create security definitions (name, username, password), topics and permissions through the admin API."""
    for name, username, password in users:
        r = admin(server, 'POST', '/admin/security', json={'name': name, 'username': username, 'password': password})
        assert r.status_code == 201, f'security {name}: {r.status_code} {r.text}'
    for topic in topics:
        r = admin(server, 'POST', '/admin/topics', json=topic)
        assert r.status_code == 201, f'topic {topic}: {r.status_code} {r.text}'
    for name, grant in (grants or {}).items():
        r = admin(server, 'PUT', f'/admin/security/{name}/permissions', json=grant)
        assert r.status_code == 200, f'permissions of {name}: {r.status_code} {r.text}'


def rest_publish(server: LiveServer, auth: tuple[str, str], topic: str, data: Any, **fields: Any) -> str:
    """Publish over REST; the msg_id."""
    r = requests.post(f'{server.url}/pubsub/topic/{topic}', json={'data': data, **fields}, auth=auth, timeout=15)
    assert r.status_code == 200, f'publish to {topic}: {r.status_code} {r.text}'
    msg_id: str = r.json()['msg_id']
    return msg_id


def still_healthy(server: LiveServer, auth: tuple[str, str]) -> None:
    """Never a dead worker: /health answers 200 and a fresh connection signs in and answers a ping."""
    r = server.request('GET', '/health')
    assert r.status_code == 200, f'/health: {r.status_code} {r.text}\n{server.log()[-3000:]}'
    peer = Peer.connect(server, hello=auth)
    try:
        assert peer.request('ping')['action'] == 'pong'
    finally:
        peer.close()


# Reading the database directly


class Database:
    """The server's database, read directly (as an operator would) for what no API shows."""

    def __init__(self, url: str) -> None:
        self.engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)

    def rows(self, query: str, **params: Any) -> list[dict[str, Any]]:
        """The rows of one SQL query, as dicts."""
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(sqlalchemy.text(query), params)]

    def ws_client(self, sub_key: str) -> dict[str, Any] | None:
        """The conduit_ws_client row of a subscription (None when there is none)."""
        found = self.rows('SELECT c.* FROM conduit_ws_client c JOIN conduit_subscription s ON s.id = c.sub_id '
                          'WHERE s.sub_key = :k', k=sub_key)
        return found[0] if found else None

    def sub_id(self, sub_key: str) -> int | None:
        """A subscription's id (None when it does not exist)."""
        found = self.rows('SELECT id FROM conduit_subscription WHERE sub_key = :k', k=sub_key)
        return int(found[0]['id']) if found else None

    def queued(self, sub_id: int) -> int:
        """Messages in a subscription's queue."""
        return int(self.rows('SELECT COUNT(*) AS n FROM conduit_queue WHERE sub_id = :s', s=sub_id)[0]['n'])

    def dead(self, sub_id: int) -> int:
        """Messages in a subscription's dead-letter queue."""
        return int(self.rows('SELECT COUNT(*) AS n FROM conduit_dead_letter WHERE sub_id = :s', s=sub_id)[0]['n'])

    def close(self) -> None:
        """Release the engine."""
        self.engine.dispose()


def detached_subscription(server: LiveServer, db_url: str, auth: tuple[str, str], window: int, **target: str) -> str:
    """A new subscription (topic= or pattern=) whose client has left: what is published now waits in its queue.

    Its delivery loop fetches a whole window at once when a client resumes it, which is how a test
    puts several messages in flight together.
    """
    peer = Peer.connect(server, hello=auth)
    try:
        sub_key = str(peer.ok('subscribe', 'subscribed', window=window, **target)['sub_key'])
    finally:
        peer.close()
    db = Database(db_url)
    try:
        def released() -> bool:
            row = db.ws_client(sub_key)
            return row is not None and row['owner'] == ''
        deadline = time.monotonic() + WAIT_SECS
        while not released():
            assert time.monotonic() < deadline, f'the subscription of {target} not released within {WAIT_SECS:g} s'
            time.sleep(0.05)
    finally:
        db.close()
    return sub_key
