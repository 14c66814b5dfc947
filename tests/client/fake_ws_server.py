"""A fake of Conduit's WebSocket pub/sub endpoint for runtime.client's unit tests: wsproto over loopback.

It speaks the wire protocol of docs/websockets.md with an in-memory broker small enough to read:
topics are plain names, every subscription has a queue, at most ``window`` unacked messages are out
per subscription, and a connection that ends puts its unacked messages back at the front of their
queues with the attempt counted — what the real server promises, without storage. It records what
clients sent (upgrade headers, frames) and can be told to misbehave: drop a connection, close it
with a code, go silent, refuse sign-ins. Each connection is served by its own thread (a greenlet
under gevent's monkey-patching).
"""

from __future__ import annotations

import base64
import itertools
import json
import socket
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

DEFAULT_WINDOW = 100


@dataclass
class FakeSub:
    """One subscription: its queue, what is out unacked, and the connection it is attached to."""

    sub_key: str
    user: str
    topic: str
    window: int
    queue: list[dict[str, Any]] = field(default_factory=list)
    unacked: dict[str, dict[str, Any]] = field(default_factory=dict)
    conn: FakeConnection | None = None


class FakeConnection:
    """One client connection: what it sent, and ways to end it badly."""

    def __init__(self, server: FakeServer, sock: socket.socket) -> None:
        self.server = server
        self.sock = sock
        self.ws = WSConnection(ConnectionType.SERVER)
        self.headers: dict[str, str] = {}
        self.frames: list[dict[str, Any]] = []
        self.user: str | None = None
        #: When set, nothing is answered any more (not even pings): a server that hangs.
        self.mute = False
        self.ended = threading.Event()
        self._send_lock = threading.Lock()
        self._text: list[str] = []

    def send_json(self, obj: dict[str, Any]) -> None:
        """Send one text frame."""
        self._send(TextMessage(data=json.dumps(obj)))

    def _send(self, *events: Any) -> None:
        # Several threads send (answers, deliveries, detach notices): wsproto's state is not shared-safe.
        with self._send_lock:
            try:
                for event in events:
                    self.sock.sendall(self.ws.send(event))
            except Exception:
                pass

    def drop(self) -> None:
        """End the TCP connection without a closing frame (a network cut, a killed worker)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close_with(self, code: int, reason: str) -> None:
        """Send a closing frame with this code, then end the connection."""
        self._send(CloseConnection(code=code, reason=reason))
        self.drop()

    def serve(self) -> None:
        """Read and answer until the connection ends; then its subscriptions' unacked messages go back."""
        try:
            while True:
                try:
                    data = self.sock.recv(65536)
                except OSError:
                    break
                if not data:
                    break
                self.ws.receive_data(data)
                if not self._events():
                    break
        finally:
            self.server.gone(self)
            try:
                self.sock.close()
            except OSError:
                pass
            self.ended.set()

    def _events(self) -> bool:
        for event in self.ws.events():
            if self.mute:
                continue
            if isinstance(event, Request):
                if not self._upgrade(event):
                    return False
            elif isinstance(event, Ping):
                self._send(event.response())
            elif isinstance(event, CloseConnection):
                self._send(event.response())
                return False
            elif isinstance(event, TextMessage):
                self._text.append(event.data)
                if event.message_finished:
                    text, self._text = ''.join(self._text), []
                    if not self._frame(json.loads(text)):
                        return False
        return True

    def _upgrade(self, event: Request) -> bool:
        self.headers = {k.decode().lower(): v.decode() for k, v in event.extra_headers}
        self.headers['host'] = event.host
        auth = self.headers.get('authorization')
        if auth is not None:
            user = self.server.check_basic(auth)
            status = 403 if 'origin' in self.headers else 401 if user is None else None
            if status is not None:
                body = json.dumps({'is_ok': False, 'status': status,
                                   'details': 'Invalid credentials' if status == 401 else 'use hello'}).encode()
                headers = [(b'content-type', b'application/json'), (b'content-length', str(len(body)).encode())]
                self._send(RejectConnection(status_code=status, headers=headers, has_body=True), RejectData(data=body))
                return False
            self.user = user
        self._send(AcceptConnection())
        return True

    def _frame(self, frame: dict[str, Any]) -> bool:
        self.frames.append(frame)
        fid = frame.get('id')
        action = frame.get('action')
        if self.user is None:
            if action != 'hello':
                self.close_with(1008, 'authenticate first')
                return False
            if self.server.users.get(frame.get('username')) != frame.get('password'):
                self.send_json({'action': 'error', 'id': fid, 'status': 401, 'details': 'Invalid credentials'})
                self.close_with(1008, 'sign-in refused')
                return False
            self.user = frame['username']
            self.send_json({'action': 'authenticated', 'id': fid, 'username': self.user})
            return True
        handler = getattr(self.server, f'on_{action}', None) if action in self.server.ACTIONS else None
        if handler is None:
            self.send_json({'action': 'error', 'id': fid, 'status': 400, 'details': f'unknown action {action!r}'})
            return True
        answer = handler(self, frame)
        if answer is None:  # told to drop the connection instead of answering
            self.drop()
            return False
        self.send_json({'id': fid, **answer})
        self.server.pump()
        return True


class FakeServer:
    """A loopback WebSocket server speaking Conduit's pub/sub protocol; start() it, close() it."""

    ACTIONS = ('publish', 'subscribe', 'ack', 'unsubscribe', 'ping')

    def __init__(self, users: dict[str, str] | None = None) -> None:
        self.users = users if users is not None else {'alice': 'alice-secret-pw'}
        self.connections: list[FakeConnection] = []
        self.subs: dict[str, FakeSub] = {}
        #: Topics whose publish is refused 401, and topics whose publish drops the connection unanswered.
        self.forbidden: set[str] = set()
        self.drop_on_publish: set[str] = set()
        self.lock = threading.RLock()
        self._msg_ids = itertools.count(1)
        self._ack_ids = itertools.count(1)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(('127.0.0.1', 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self.url = f'ws://127.0.0.1:{self.port}/pubsub/ws'
        self._stopped = False
        self._new_connection = threading.Condition(self.lock)

    def start(self) -> FakeServer:
        """Accept connections in a background thread."""
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def close(self) -> None:
        """Stop accepting and end every connection."""
        self._stopped = True
        try:
            # Wakes the accepting thread: a close alone leaves its accept() listening (Linux).
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        for conn in list(self.connections):
            conn.drop()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            conn = FakeConnection(self, sock)
            with self.lock:
                self.connections.append(conn)
                self._new_connection.notify_all()
            threading.Thread(target=conn.serve, daemon=True).start()

    def wait_connections(self, n: int, timeout: float = 10.0) -> FakeConnection:
        """Wait until n connections were accepted; the n-th."""
        with self.lock:
            if not self._new_connection.wait_for(lambda: len(self.connections) >= n, timeout):
                raise AssertionError(f'{len(self.connections)} connection(s) within {timeout} s, expected {n}')
            return self.connections[n - 1]

    def check_basic(self, header: str) -> str | None:
        """The user of a valid Basic Authorization header."""
        try:
            user, _, password = base64.b64decode(header.split(' ', 1)[1]).decode().partition(':')
        except (IndexError, ValueError):
            return None
        return user if self.users.get(user) == password else None

    # The protocol

    def on_publish(self, conn: FakeConnection, frame: dict[str, Any]) -> dict[str, Any] | None:
        topic = frame.get('topic')
        if topic in self.drop_on_publish:
            return None
        if topic in self.forbidden:
            return {'action': 'error', 'status': 401, 'details': 'Permission denied'}
        msg_id = f'zpsm{next(self._msg_ids):08x}'
        with self.lock:
            for sub in self.subs.values():
                if sub.topic == topic:
                    sub.queue.append({'msg_id': msg_id, 'topic_name': topic, 'data': frame.get('data'),
                                      'delivery_count': 0})
        return {'action': 'published', 'msg_id': msg_id}

    def on_subscribe(self, conn: FakeConnection, frame: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if 'sub_key' in frame:
                sub = self.subs.get(frame['sub_key'])
                if sub is None or sub.user != conn.user:
                    return {'action': 'error', 'status': 404, 'details': 'no such sub_key'}
                old = sub.conn
                if old is not None and old is not conn:
                    self._give_back(sub)
                    old.send_json({'action': 'detached', 'sub_key': sub.sub_key,
                                   'details': 'resumed on another connection'})
                sub.conn = conn
                return {'action': 'subscribed', 'sub_key': sub.sub_key, 'queue_depth': len(sub.queue),
                        'window': sub.window, 'resumed': True}
            sub = FakeSub(f'sk.{uuid.uuid4().hex[:12]}', conn.user or '', frame.get('topic') or frame.get('pattern'),
                          frame.get('window') or DEFAULT_WINDOW, conn=conn)
            self.subs[sub.sub_key] = sub
            return {'action': 'subscribed', 'sub_key': sub.sub_key, 'queue_depth': 0, 'window': sub.window}

    def on_ack(self, conn: FakeConnection, frame: dict[str, Any]) -> dict[str, Any]:
        acked, not_found = 0, []
        with self.lock:
            for ack_id in frame.get('ack_ids') or []:
                for sub in self.subs.values():
                    if sub.conn is conn and sub.unacked.pop(ack_id, None) is not None:
                        acked += 1
                        break
                else:
                    not_found.append(ack_id)
        return {'action': 'acked', 'acked': acked, 'not_found': not_found}

    def on_unsubscribe(self, conn: FakeConnection, frame: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            sub = self.subs.get(frame.get('sub_key', ''))
            if sub is None or sub.user != conn.user:
                return {'action': 'error', 'status': 404, 'details': 'no such sub_key'}
            del self.subs[sub.sub_key]
        return {'action': 'unsubscribed', 'sub_key': sub.sub_key}

    def on_ping(self, conn: FakeConnection, frame: dict[str, Any]) -> dict[str, Any]:
        return {'action': 'pong'}

    # Delivery

    def pump(self) -> None:
        """Send what each attached subscription may send now (up to its window)."""
        with self.lock:
            for sub in self.subs.values():
                conn = sub.conn
                while conn is not None and sub.queue and len(sub.unacked) < sub.window:
                    msg = sub.queue.pop(0)
                    msg['delivery_count'] += 1
                    ack_id = str(next(self._ack_ids))
                    sub.unacked[ack_id] = msg
                    meta = {k: v for k, v in msg.items() if k != 'data'}
                    conn.send_json({'action': 'message', 'sub_key': sub.sub_key, 'ack_id': ack_id,
                                    'data': msg['data'], 'meta': {**meta, 'ack_id': ack_id, 'sub_key': sub.sub_key}})

    def _give_back(self, sub: FakeSub) -> None:
        sub.queue[:0] = list(sub.unacked.values())
        sub.unacked.clear()

    def gone(self, conn: FakeConnection) -> None:
        """A connection ended: its subscriptions are detached, their unacked messages queued again."""
        with self.lock:
            for sub in self.subs.values():
                if sub.conn is conn:
                    self._give_back(sub)
                    sub.conn = None
