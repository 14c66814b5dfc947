"""A small synchronous client of Conduit's WebSocket pub/sub endpoint (``GET /pubsub/ws``).

For scripts, tests and services of other programs; it speaks the protocol of docs/websockets.md::

    from runtime.client import Client, Detached

    with Client('ws://127.0.0.1:17010/pubsub/ws', 'crm', 'secret') as client:
        sub = client.subscribe('orders.created', window=10)
        client.publish('orders.created', {'id': 1})
        for item in client.messages(timeout=5):      # ends after 5 s without a message
            if isinstance(item, Detached):            # the subscription left this client
                break
            print(item.data, item.meta['delivery_count'])
            item.ack()

Guarantees and limits:

- **Requests** (``publish``, ``subscribe``, ``ack``, ``unsubscribe``, ``ping``) carry an ``id`` made
  here and wait for the answer with the same id; ``message`` and ``detached`` frames read meanwhile
  are queued for ``messages()``, which yields ``Message`` items and ``Detached`` notices (a
  subscription resumed by another connection, or deleted while this client was away: it is no
  longer resumed here). An ``error`` answer raises ``ClientError(status, details)`` and the
  connection stays up.
- **Delivery is at-least-once.** The server sends at most ``window`` unacknowledged messages per
  subscription and removes a message only when it is acknowledged (``message.ack()``,
  ``client.ack(...)``). Unacked messages come back after ``[websocket] ack_deadline_secs``, or at once
  to the next connection when this one drops, their attempt counted.
- **Reconnecting** (``reconnect=True``, the default): when the connection drops, the client connects
  again with capped exponential backoff and jitter, authenticates again, and resumes every
  subscription it holds with ``subscribe {sub_key}`` (on whichever worker it lands). Messages received
  but not acknowledged before the drop are dropped here — ``ack()`` of one of them does nothing and
  returns False — because
  the server redelivers them (their ``delivery_count`` one higher). A request whose answer was lost in
  the drop raises ``AnswerLost``: it may or may not have been carried out (a publish may have been
  stored); the client is connected again for the next one. Requests made after the drop wait for the
  reconnection. Refused credentials end the reconnecting (``ClientError``). With ``reconnect=False``
  a drop raises ``Disconnected`` from whatever call notices it.
- **Threads and greenlets**: works with and without gevent's monkey-patching (the socket calls are
  the standard library's, patched or not). One reader at a time is all the protocol needs — a loop
  over ``messages()`` or a request waiting for its answer — and that is the intended use: one thread
  or greenlet per client. Reads are serialised by a lock and answers are matched by id, so another
  thread may also publish or ack while one iterates; each frame read is handed to whoever waits for it.
- **Secrets**: the password is sent in the ``hello`` frame or the upgrade's ``Authorization`` header
  only; it is never logged, never part of ``repr()`` or of an error message. No ``Origin`` header is
  sent (the server refuses Basic Auth from browser origins it does not know), and redirects are not
  followed (the header would go to the redirect's target). ``websocket.enableTrace(True)`` of the
  websocket-client library prints the handshake and every frame, credentials included: leave it off
  with real credentials.
- **websocket-client** is the optional ``websocket`` extra (``pip install 'conduit[websocket]'``): it is
  imported by the first ``connect()``, not with this module, so the server and the CLI never load it.
  Without it ``connect()`` raises ``WebSocketClientMissing`` (an ``ImportError``) naming the extra;
  the rest of this module (its errors, ``Message``, ``backoff_secs``) works as ever.

Longer than the house's 500 lines on purpose: it is one concept, a connection, and its parts
(connecting, reading, requests) share one set of state and locks; split, each would reach into the
others' privates.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import random
import selectors
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit, urlunsplit

from runtime.errors import ConduitError

if TYPE_CHECKING:
    import websocket

_log = logging.getLogger(__name__)

#: The endpoint's path, added to a URL given without one.
ENDPOINT_PATH = '/pubsub/ws'
#: First reconnection wait; it doubles per failed attempt up to max_backoff, each wait 50–100 % of that.
INITIAL_BACKOFF_SECS = 0.5
#: Most ack_ids one ack frame may carry (the server's limit).
MAX_ACK_IDS = 1000
#: How long a waiting request or iterator sleeps before trying again to become the reader.
READER_POLL_SECS = 0.05
#: How long close() waits for the server's closing frame.
CLOSE_TIMEOUT_SECS = 2.0
#: Close code reported for a connection that ended without a closing frame (RFC 6455 §7.1.5).
ABNORMAL_CLOSURE = 1006
#: Options a publish frame may carry besides topic and data.
PUBLISH_OPTIONS = ('priority', 'expiration', 'correl_id', 'in_reply_to', 'ext_client_id', 'has_gd', 'pub_time',
                   'mime_type')
#: Answer statuses that stop reconnecting: trying again with the same credentials cannot help.
FATAL_STATUSES = (401, 403)
#: The pip requirement that brings websocket-client along.
WEBSOCKET_EXTRA = 'conduit[websocket]'


class WebSocketClientMissing(ConduitError, ImportError):
    """websocket-client is not installed: the client cannot connect."""

    def __init__(self) -> None:
        super().__init__("runtime.client.Client needs websocket-client, which is not installed: "
                         f"pip install '{WEBSOCKET_EXTRA}'")
        self.name = 'websocket'  # as ImportError names the missing module


class ClientError(ConduitError):
    """The server answered a request with an error: its REST status and details."""

    def __init__(self, status: int, details: str, retry_after: float | None = None) -> None:
        self.status = status
        self._details = details
        #: Seconds to wait before signing in again, with a 429 answer.
        self.retry_after = retry_after
        super().__init__(f'{status} {details}')

    @property
    def details(self) -> str:
        """The server's text: what was wrong with the request."""
        return self._details


class Disconnected(ConduitError, ConnectionError):
    """The connection ended (and the client does not, or cannot, reconnect): its close code and reason."""

    def __init__(self, reason: str, code: int = ABNORMAL_CLOSURE) -> None:
        self.code = code
        self.reason = reason
        super().__init__(f'disconnected ({code}): {reason}')


class AnswerLost(Disconnected):
    """The connection dropped after a request was sent and before its answer came: it may have been carried out."""


class NoAnswer(ConduitError, TimeoutError):
    """No answer to a request within the client's request_timeout."""

    def __init__(self, action: str, timeout: float) -> None:
        self.action = action
        super().__init__(f'no answer to {action} within {timeout:g} s')


@dataclass
class Subscription:
    """A subscription this client holds: resumed by its sub_key after every reconnection."""

    sub_key: str
    queue_depth: int
    window: int | None = None
    topic: str | None = None
    pattern: str | None = None
    #: Whether the last subscribe answer re-attached an existing subscription.
    resumed: bool = False

    def __repr__(self) -> str:
        # A sub_key reads another client's messages: keep it out of logs and tracebacks.
        target = self.topic if self.topic is not None else self.pattern
        return f'<Subscription {target or "(resumed)"} window={self.window} queue_depth={self.queue_depth}>'


@dataclass
class Message:
    """A message of a subscription: acknowledge it once it is processed, or it comes again."""

    sub_key: str
    ack_id: str
    data: Any
    meta: dict[str, Any]
    _client: Client | None = field(default=None, repr=False, compare=False)
    #: The connection it came over: its ack_id means nothing to any other.
    _connection: int = field(default=0, repr=False, compare=False)

    def ack(self) -> bool:
        """Acknowledge this message; False when it can no longer be (it came over a connection since lost)."""
        if self._client is None:
            raise RuntimeError('this message belongs to no client')
        return self._client.ack(self) == 1

    def __repr__(self) -> str:
        return f'<Message {self.meta.get("msg_id", "?")} ack_id={self.ack_id} topic={self.meta.get("topic_name")}>'


@dataclass
class Detached:
    """A subscription left this client: resumed by another connection, or gone when resumed after a reconnection."""

    sub_key: str
    details: str

    def __repr__(self) -> str:
        return f'<Detached: {self.details}>'


def _library() -> ModuleType:
    """The websocket module of websocket-client; WebSocketClientMissing when it is not installed."""
    try:
        import websocket
    except ModuleNotFoundError as e:
        if e.name != 'websocket':
            raise  # websocket-client is there and one of its own dependencies is not: that is the error to see
        raise WebSocketClientMissing() from None
    return websocket


def backoff_secs(attempt: int, max_backoff: float, rng: Callable[[float, float], float] = random.uniform) -> float:
    """The wait before reconnection attempt number attempt (0-based): doubling, capped, with jitter."""
    ceiling = min(max_backoff, INITIAL_BACKOFF_SECS * 2 ** min(attempt, 30))
    # Never below half the ceiling: clients cut off together spread out, and none hammers a recovering server.
    return rng(ceiling / 2, ceiling)


def _endpoint(url: str) -> str:
    """The ws:// or wss:// URL of the endpoint; ValueError naming what is wrong (never echoing credentials)."""
    parts = urlsplit(url)
    scheme = {'http': 'ws', 'https': 'wss'}.get(parts.scheme, parts.scheme)
    if scheme not in ('ws', 'wss'):
        raise ValueError(f'url must start with ws://, wss://, http:// or https://, not {parts.scheme!r}')
    if parts.username is not None or parts.password is not None:
        raise ValueError('url must not carry credentials: give username and password instead')
    if not parts.hostname:
        raise ValueError('url names no host')
    return urlunsplit((scheme, parts.netloc, parts.path if parts.path not in ('', '/') else ENDPOINT_PATH,
                       parts.query, ''))


class Client:
    """A WebSocket connection to Conduit's pub/sub endpoint: publish, subscribe, iterate, acknowledge, resume."""

    def __init__(self, url: str, username: str, password: str, *, auth: Literal['hello', 'basic'] = 'hello',
                 reconnect: bool = True, connect_timeout: float = 10, max_backoff: float = 30,
                 on_error: Callable[[Exception], None] | None = None, request_timeout: float = 30,
                 heartbeat_secs: float = 20) -> None:
        """Nothing is sent until connect() (or ``with``).

        auth: 'hello' signs in with the first frame (what browsers do), 'basic' with the upgrade's
        Authorization header. on_error is called with every error no request waits for (an ``error``
        frame without a known id, a failed reconnection attempt); without it they are logged.
        heartbeat_secs: after this long without a frame the client pings the server, and after three
        times as long it takes the connection for lost (the server itself pings every 20 s).
        """
        if auth not in ('hello', 'basic'):
            raise ValueError(f"auth must be 'hello' or 'basic', not {auth!r}")
        self.url = _endpoint(url)
        self.username = username
        self.__password = password
        self.auth = auth
        self.reconnect = reconnect
        self.connect_timeout = connect_timeout
        self.max_backoff = max_backoff
        self.request_timeout = request_timeout
        self.heartbeat_secs = heartbeat_secs
        self._on_error = on_error
        self._ws: websocket.WebSocket | None = None
        #: websocket-client's module, imported by the first connect(): every use of it has a socket it made.
        self._lib: ModuleType | None = None
        #: Tells when _ws has something to read. The socket's own timeout stays connect_timeout, for
        #: reads of a frame under way and for every send alike: a reader's short wait must never be
        #: the timeout of another thread's send (a frame cut half-way kills the connection).
        self._selector: selectors.BaseSelector | None = None
        #: Signed in and resumed on _ws: requests may go; while False they wait for the reconnection.
        self._ready = False
        #: Inside _open: a drop fails the attempt instead of starting another reconnection.
        self._connecting = False
        #: Number of the current connection (0: none yet); a Message keeps the one it came over.
        self._connection = 0
        self._ids = itertools.count(1)
        #: Serialises reading and (re)connecting; frames are written under _send_lock.
        self._read_lock = threading.Lock()
        self._send_lock = threading.Lock()
        #: Guards _waiting, _answers and _inbox between a reader and the threads it hands frames to.
        self._state = threading.Lock()
        #: Notified (under _state) whenever a frame was filed or the reader let go: waiters look again.
        self._filed = threading.Condition(self._state)
        #: Ids of requests sent and awaiting an answer -> the connection they were sent over.
        self._waiting: dict[str, int] = {}
        self._answers: dict[str, Any] = {}
        self._inbox: deque[Message | Detached] = deque()
        self._subs: dict[str, Subscription] = {}
        self._closing = threading.Event()
        self._ended: Disconnected | None = None
        self._last_heard = 0.0
        self._last_ping = 0.0

    def __repr__(self) -> str:
        state = 'closed' if self._closing.is_set() else 'connected' if self._ready else 'not connected'
        return f'<Client {self.url} user={self.username!r} auth={self.auth} {state}>'

    def __enter__(self) -> Client:
        if not self._ready:
            self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def connected(self) -> bool:
        """Whether a connection is open and signed in now."""
        return self._ready

    @property
    def subscriptions(self) -> list[Subscription]:
        """The subscriptions this client holds (and resumes after a reconnection)."""
        return list(self._subs.values())

    # Connecting

    def connect(self) -> None:
        """Connect and authenticate once: ClientError if refused, Disconnected if the server cannot be reached."""
        if self._closing.is_set():
            raise Disconnected('the client was closed', 1000)
        with self._read_lock:
            if not self._ready:
                self._drop_socket()  # one lost and not yet noticed
                self._open()

    def close(self) -> None:
        """Close the connection (code 1000) and stop reconnecting; unacked messages go back to their queues."""
        self._closing.set()
        self._ended = self._ended or Disconnected('the client was closed', 1000)
        if self._read_lock.acquire(timeout=2 * READER_POLL_SECS):
            try:
                ws = self._ws
                if ws is not None:
                    ws_lib = self._websocket_lib()
                    try:
                        ws.close(timeout=CLOSE_TIMEOUT_SECS)
                    except (ws_lib.WebSocketException, OSError):
                        pass
                self._drop_socket()
            finally:
                self._read_lock.release()
        elif self._ws is not None:
            # Another thread is reading: wake it; it finds the client closed and stops.
            self._ws.abort()
        self._fail_waiting(self._ended)

    def _websocket_lib(self) -> ModuleType:
        """websocket-client's module: there, since the socket in hand was made with it."""
        assert self._lib is not None
        return self._lib

    def _open(self) -> None:
        """One connection: handshake, sign-in, resumed subscriptions; the caller holds the read lock."""
        ws_lib = self._lib = _library()  # the first connect() without websocket-client stops here, naming the extra
        header = []
        if self.auth == 'basic':
            token = base64.b64encode(f'{self.username}:{self.__password}'.encode()).decode('ascii')
            header.append(f'Authorization: Basic {token}')
        self._connecting = True
        try:
            try:
                ws = ws_lib.create_connection(self.url, timeout=self.connect_timeout, header=header,
                                              suppress_origin=True, redirect_limit=0, enable_multithread=True)
            except ws_lib.WebSocketBadStatusException as e:
                raise _refusal(e) from None
            except (ws_lib.WebSocketException, OSError) as e:
                raise Disconnected(f'cannot connect to {self.url}: {type(e).__name__}: {e}') from None
            self._ws = ws
            self._selector = selectors.DefaultSelector()
            self._selector.register(ws.sock, selectors.EVENT_READ)
            self._connection += 1
            self._last_heard = self._last_ping = time.monotonic()
            if self.auth == 'hello':
                self._call_reading({'action': 'hello', 'username': self.username, 'password': self.__password},
                                   self.connect_timeout)
            _log.debug('connected to %s as %s (%s)', self.url, self.username, self.auth)
            self._resume()
            self._ready = True
        except BaseException:
            self._drop_socket()
            raise
        finally:
            self._connecting = False

    def _drop_socket(self) -> None:
        ws, self._ws, self._ready = self._ws, None, False
        selector, self._selector = self._selector, None
        if selector is not None:
            selector.close()
        if ws is not None:
            ws.shutdown()

    def _lost(self, error: Disconnected) -> None:
        """The connection ended under the reader: reconnect (and resume), or raise Disconnected."""
        self._drop_socket()
        if self._connecting:
            raise error  # a connection attempt failed: the reconnection loop (or connect()) decides
        with self._state:
            # Received but unacked: their ack_ids die with the connection; the server sends them again.
            kept = [item for item in self._inbox if not isinstance(item, Message)]
            self._inbox.clear()
            self._inbox.extend(kept)
        self._fail_waiting(AnswerLost(f'the connection dropped before the answer came: {error.reason}', error.code))
        if self._closing.is_set():
            raise self._ended or error
        if not self.reconnect:
            self._ended = error
            raise error
        _log.info('connection to %s lost (%s): reconnecting', self.url, error)
        self._reconnect()

    def _reconnect(self) -> None:
        """Connect again until it works, resuming every subscription; ClientError when the sign-in is refused."""
        not_before = 0.0  # a 429's Retry-After
        for attempt in itertools.count():
            if self._closing.wait(max(backoff_secs(attempt, self.max_backoff), not_before)):
                raise self._ended or Disconnected('the client was closed', 1000)
            try:
                self._open()
                return
            except ClientError as e:
                if e.status in FATAL_STATUSES:
                    self._ended = Disconnected(f'reconnecting was refused: {e}')
                    raise
                not_before = float(e.retry_after or 0)
                self._report(e)
            except (Disconnected, NoAnswer) as e:
                if self._closing.is_set():
                    raise self._ended or Disconnected('the client was closed', 1000) from None
                not_before = 0.0
                self._report(e)

    def _resume(self) -> None:
        """Re-attach every subscription held, by its sub_key; one gone meanwhile becomes a Detached item."""
        for sub in list(self._subs.values()):
            try:
                answer = self._call_reading({'action': 'subscribe', 'sub_key': sub.sub_key}, self.request_timeout)
            except ClientError as e:
                if e.status != 404:
                    raise
                # Deleted meanwhile (limit_sub_inactivity, an admin): nothing left to resume.
                self._subs.pop(sub.sub_key, None)
                with self._state:
                    self._inbox.append(Detached(sub.sub_key, e.details))
                continue
            sub.queue_depth = answer.get('queue_depth', sub.queue_depth)
            sub.window = answer.get('window', sub.window)
            sub.resumed = True
        if self._subs:
            _log.info('resumed %d subscription(s) on %s', len(self._subs), self.url)

    def _report(self, error: Exception) -> None:
        if self._on_error is not None:
            try:
                self._on_error(error)
            except Exception:
                _log.exception('the on_error callback failed')
        else:
            _log.warning('websocket client %s (%s): %s', self.url, self.username, error)

    def _fail_waiting(self, error: Disconnected) -> None:
        with self._state:
            for rid in list(self._waiting):
                self._answers.setdefault(rid, error)
            self._waiting.clear()
            self._filed.notify_all()

    def _ensure_connected(self) -> None:
        """Return once the connection is ready; reconnect first when it was lost and no one else noticed."""
        if self._ended is not None:
            raise self._ended
        if self._ready:
            return
        with self._read_lock:
            if self._ended is not None:
                raise self._ended
            if self._ready:
                return
            if self._connection == 0:
                raise Disconnected('not connected: call connect() first')
            self._lost(Disconnected('the connection was lost'))

    # Reading

    def _read_one(self, deadline: float | None) -> None:
        """Read one frame (or until deadline, or a heartbeat slice) and file it; the caller holds the read lock."""
        ws = self._ws
        if ws is None or not (self._ready or self._connecting):
            if self._ended is not None:
                raise self._ended
            self._lost(Disconnected('the connection was lost'))
            return
        wait = self.heartbeat_secs
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        if not self._readable(ws, wait):
            self._idle(ws)
            return
        ws_lib = self._websocket_lib()
        try:
            opcode, data = ws.recv_data(control_frame=True)
        except (ws_lib.WebSocketException, OSError, ValueError) as e:
            # A timeout here is a frame begun and not finished within connect_timeout: as good as lost.
            self._lost(Disconnected(f'{type(e).__name__}: {e}'))
            return
        self._last_heard = time.monotonic()
        if opcode == ws_lib.ABNF.OPCODE_CLOSE:
            code = int.from_bytes(data[:2], 'big') if len(data) >= 2 else 1005
            self._lost(Disconnected(data[2:].decode('utf-8', 'replace') or 'closed by the server', code))
        elif opcode == ws_lib.ABNF.OPCODE_TEXT:
            self._file(data.decode('utf-8') if isinstance(data, bytes) else data)
        elif opcode == ws_lib.ABNF.OPCODE_BINARY:
            _log.warning('websocket client %s: a binary frame from the server was ignored', self.url)

    def _readable(self, ws: websocket.WebSocket, wait: float) -> bool:
        """Whether a frame (or the end) arrives within wait seconds."""
        sock, selector = ws.sock, self._selector
        if sock is None or selector is None:
            return True  # recv_data raises at once
        pending = getattr(sock, 'pending', None)  # TLS: decrypted bytes the selector cannot see
        if pending is not None and pending():
            return True
        try:
            return bool(selector.select(max(wait, 0.0)))
        except (OSError, ValueError):
            return True  # closed under us: recv_data says how

    def _idle(self, ws: websocket.WebSocket) -> None:
        """Nothing came for a while: ping the server; after three heartbeats of silence, the connection is lost."""
        now = time.monotonic()
        silent = now - self._last_heard
        if silent >= 3 * self.heartbeat_secs:
            self._lost(Disconnected(f'no frame from the server for {silent:.0f} s'))
        elif silent >= self.heartbeat_secs and now - self._last_ping >= self.heartbeat_secs:
            self._last_ping = now
            ws_lib = self._websocket_lib()
            try:
                with self._send_lock:
                    ws.ping()
            except (ws_lib.WebSocketException, OSError) as e:
                self._lost(Disconnected(f'{type(e).__name__}: {e}'))

    def _file(self, text: str) -> None:
        """Queue a message, hand an answer to its request, report an error no one waits for."""
        try:
            frame = json.loads(text)
        except ValueError:
            _log.warning('websocket client %s: a frame that is not JSON was ignored', self.url)
            return
        if not isinstance(frame, dict):
            _log.warning('websocket client %s: a frame that is not an object was ignored', self.url)
            return
        action = frame.get('action')
        if action == 'message':
            item: Message | Detached = Message(str(frame.get('sub_key', '')), str(frame.get('ack_id', '')),
                                               frame.get('data'), frame.get('meta') or {}, self, self._connection)
            with self._state:
                self._inbox.append(item)
                self._filed.notify_all()
            return
        if action == 'detached':
            sub_key = str(frame.get('sub_key', ''))
            # Another connection holds it now: resuming it here would only take it back.
            self._subs.pop(sub_key, None)
            with self._state:
                self._inbox.append(Detached(sub_key, str(frame.get('details', ''))))
                self._filed.notify_all()
            return
        rid = frame.get('id')
        rid = str(rid) if rid is not None else None
        with self._state:
            if rid is not None and rid in self._waiting:
                del self._waiting[rid]
                self._answers[rid] = frame
                self._filed.notify_all()
                return
        if action == 'error':
            self._report(_error_of(frame))
        else:
            _log.debug('websocket client %s: an answer no request waits for (%s) was ignored', self.url, action)

    # Requests

    def _call_reading(self, frame: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send a request and read until its answer; the caller holds the read lock (signing in, resuming)."""
        rid = self._send_request(frame, internal=True)
        if rid is None:
            raise Disconnected(f'sending {frame["action"]} failed: the connection dropped')
        return self._await_answer(rid, frame['action'], time.monotonic() + timeout, timeout, self._read_one)

    def _request(self, frame: dict[str, Any]) -> dict[str, Any]:
        """Send a request (once the connection is ready, reconnecting if needed) and wait for its answer."""
        deadline = time.monotonic() + self.request_timeout
        while True:
            self._ensure_connected()
            rid = self._send_request(frame)
            if rid is not None:
                break
            if time.monotonic() >= deadline:
                raise NoAnswer(frame['action'], self.request_timeout)
        return self._await_answer(rid, frame['action'], deadline, self.request_timeout,
                                  lambda until: self._step(lambda: rid not in self._waiting, until))

    def _await_answer(self, rid: str, action: str, deadline: float, timeout: float,
                      wait: Callable[[float], None]) -> dict[str, Any]:
        """The answer to request rid, checked; wait(deadline) reads or waits for one more frame meanwhile."""
        while True:
            answer = self._take_answer(rid)
            if answer is not None:
                return self._checked(answer)
            if time.monotonic() >= deadline:
                self._forget(rid)
                raise NoAnswer(action, timeout)
            wait(deadline)

    def _step(self, done: Callable[[], bool], deadline: float | None) -> None:
        """Read one frame if no one else is reading, else wait until the reader files one; done() ends either."""
        if self._read_lock.acquire(blocking=False):
            try:
                with self._state:
                    finished = done()
                if not finished:
                    self._read_one(deadline)
            finally:
                self._read_lock.release()
                with self._filed:
                    self._filed.notify_all()  # a waiter may become the reader now
            return
        wait = READER_POLL_SECS if deadline is None else min(READER_POLL_SECS, deadline - time.monotonic())
        with self._filed:
            if not done() and wait > 0:
                self._filed.wait(wait)

    def _send_request(self, frame: dict[str, Any], internal: bool = False) -> str | None:
        """Send a request with a new id; None when it could not be sent (the connection is down)."""
        rid = f'c{next(self._ids)}'
        text = json.dumps({**frame, 'id': rid}, ensure_ascii=False, allow_nan=False)
        with self._state:
            # Only sign-in and resume frames go over a connection that is not ready yet.
            ws = self._ws if internal or self._ready else None
            if ws is None:
                return None
            self._waiting[rid] = self._connection
        ws_lib = self._websocket_lib()
        try:
            with self._send_lock:
                ws.send(text)
        except (ws_lib.WebSocketException, OSError) as e:
            # Not (wholly) sent, so not carried out: the next try goes over a new connection.
            _log.debug('sending %s failed: %s: %s', frame['action'], type(e).__name__, e)
            self._forget(rid)
            with self._state:
                if self._ws is ws:
                    self._ready = False
            ws.abort()  # wakes a reader blocked on the broken socket
            return None
        _log.debug('sent %s %s', frame['action'], rid)
        return rid

    def _take_answer(self, rid: str) -> dict[str, Any] | None:
        with self._state:
            answer = self._answers.pop(rid, None)
        if isinstance(answer, Disconnected):
            raise answer
        return answer

    def _forget(self, rid: str) -> None:
        with self._state:
            self._waiting.pop(rid, None)
            self._answers.pop(rid, None)

    @staticmethod
    def _checked(answer: dict[str, Any]) -> dict[str, Any]:
        if answer.get('action') == 'error':
            raise _error_of(answer)
        return answer

    # The protocol

    def publish(self, topic: str, data: Any, **options: Any) -> str:
        """Publish data to topic; the msg_id once the server stored it.

        options are the publish fields: priority, expiration, correl_id, in_reply_to, ext_client_id,
        has_gd, pub_time, mime_type.
        """
        unknown = sorted(set(options) - set(PUBLISH_OPTIONS))
        if unknown:
            raise TypeError(f'publish() got unknown options {", ".join(unknown)}: use {", ".join(PUBLISH_OPTIONS)}')
        answer = self._request({'action': 'publish', 'topic': topic, 'data': data, **options})
        if answer.get('overflowed'):
            _log.warning('publishing to %s overflowed: %s', topic, answer.get('details', ''))
        return str(answer['msg_id'])

    def subscribe(self, topic: str | None = None, *, pattern: str | None = None, window: int | None = None,
                  sub_key: str | None = None) -> Subscription:
        """A new subscription to a topic or a pattern, or (sub_key) one made before, re-attached here.

        window: unacknowledged messages the server may send at once (server default 100).
        """
        if sum(x is not None for x in (topic, pattern, sub_key)) != 1:
            raise ValueError('subscribe needs exactly one of topic, pattern, sub_key')
        if sub_key is not None and window is not None:
            raise ValueError('window is set when a subscription is made; resuming by sub_key keeps it')
        frame: dict[str, Any] = {'action': 'subscribe'}
        if sub_key is not None:
            frame['sub_key'] = sub_key
        elif topic is not None:
            frame['topic'] = topic
        else:
            frame['pattern'] = pattern
        if window is not None:
            frame['window'] = window
        answer = self._request(frame)
        key = str(answer['sub_key'])
        known = self._subs.get(key)
        sub = Subscription(key, int(answer.get('queue_depth', 0)), answer.get('window', window),
                           topic if topic is not None else known.topic if known else None,
                           pattern if pattern is not None else known.pattern if known else None,
                           bool(answer.get('resumed', False)))
        self._subs[key] = sub
        return sub

    def unsubscribe(self, sub_key: str | Subscription) -> None:
        """Remove a subscription and its queue."""
        key = sub_key.sub_key if isinstance(sub_key, Subscription) else sub_key
        self._request({'action': 'unsubscribe', 'sub_key': key})
        self._subs.pop(key, None)

    def ack(self, *items: Message | str) -> int:
        """Acknowledge messages (or ack_ids): they leave the queue. How many the server acknowledged.

        Messages that came over a connection since lost are skipped (the server sends them again).
        """
        ack_ids: list[str] = []
        for item in items:
            if isinstance(item, Message):
                if item._connection == self._connection and self._ws is not None:
                    ack_ids.append(item.ack_id)
            else:
                ack_ids.append(item)
        acked = 0
        for start in range(0, len(ack_ids), MAX_ACK_IDS):
            answer = self._request({'action': 'ack', 'ack_ids': ack_ids[start:start + MAX_ACK_IDS]})
            acked += int(answer.get('acked', 0))
        return acked

    def ping(self) -> float:
        """A ping frame answered by a pong: the round trip in seconds."""
        started = time.monotonic()
        self._request({'action': 'ping'})
        return time.monotonic() - started

    def messages(self, timeout: float | None = None) -> Iterator[Message | Detached]:
        """Messages of every subscription, and Detached notices, as they come; ends after timeout s without one.

        timeout None waits for ever. A Detached item says a subscription left this client (resumed by
        another connection, or deleted while the client was away); it is no longer resumed.
        """
        while True:
            deadline = None if timeout is None else time.monotonic() + timeout
            item = self._next_item(deadline)
            if item is None:
                return
            yield item

    def receive(self, timeout: float | None = None) -> Message | Detached | None:
        """The next message (or Detached notice), None after timeout seconds without one."""
        return self._next_item(None if timeout is None else time.monotonic() + timeout)

    def _next_item(self, deadline: float | None) -> Message | Detached | None:
        try:
            self._ensure_connected()
            while True:
                with self._state:
                    if self._inbox:
                        return self._inbox.popleft()
                if deadline is not None and time.monotonic() >= deadline:
                    return None
                self._step(lambda: bool(self._inbox), deadline)
        except Disconnected:
            if self._closing.is_set():
                return None  # close(), maybe from another thread: the iteration ends
            raise


def _error_of(frame: dict[str, Any]) -> ClientError:
    status = frame.get('status')
    return ClientError(status if isinstance(status, int) else 500, str(frame.get('details', '')),
                       frame.get('retry_after'))


def _refusal(e: websocket.WebSocketBadStatusException) -> ClientError:
    """The server's HTTP answer to the upgrade, as a ClientError with its JSON details when there are some."""
    details = e.status_message or 'refused'
    if e.resp_body:
        try:
            body = json.loads(e.resp_body)
            if isinstance(body, dict) and isinstance(body.get('details'), str):
                details = body['details']
        except ValueError:
            pass
    return ClientError(e.status_code, details)
