"""The JSON protocol of one WebSocket connection, and the windows of its subscriptions.

The connection's own greenlet reads frames and answers them in order (``WebSocketSession.run``). Messages
go the other way from the subscriptions' delivery loops (``runtime.pubsub``), each through its
``SendWindow``: a loop hands a batch to ``SendWindow.deliver_batch``, which sends it — never more than the
subscription's window, since the window is the loop's batch size — and waits until each message is
acknowledged, the client leaves, or the ack deadline passes. Only acknowledged messages are
reported delivered (and so leave the queue); the rest go back with their attempt counted
(``ClientGone``: due at once, for the client's return; ``AckTimeout``: after the usual wait).

Every frame a client sends is bounded before it is parsed (``WsConnection``) and checked field by
field; a wrong one is answered ``error {id, status, details}`` with REST's statuses and the
connection stays up. Before authentication only ``hello`` is accepted, and the connection is held to
``hello_limits`` (a few KiB, a few frames per second); the hello's success loosens them to
``signed_in_limits``.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import gevent
from gevent.event import Event

from runtime.db.unavailable import storage_errors
from runtime.errors import (
    BadRequest,
    ConduitError,
    SubscriptionNotFound,
    TooManyRequests,
    Unauthorized,
    UnrenderableMessage,
)
from runtime.http.auth import CALLER_REALM, SignInThrottle
from runtime.http.pubsub_access import (
    PubSubParts,
    check_pattern_permission,
    publish_message,
    refuse_subscriber_fields,
    subscription_topic,
)
from runtime.http.signin_log import FailedSignInLog
from runtime.http.websocket.connection import (
    DRAIN_BYTES,
    POLICY_VIOLATION,
    READ_SIZE,
    Closed,
    Limits,
    TimedOut,
    WsConnection,
)
from runtime.observability.websocket_metrics import WebSocketMetrics
from runtime.pubsub.delivery import Outcome
from runtime.pubsub.message import render_pull
from runtime.pubsub.subscribers.websocket import KIND_WEBSOCKET, AckTimeout, ClientGone
from runtime.pubsub.topics import validate_pattern
from runtime.service.invoke import new_cid
from runtime.util import json_limits
from runtime.util.json_limits import JsonLimits

if TYPE_CHECKING:
    from runtime.config import WebSocketSection
    from runtime.pubsub.registry import SubInfo
    from runtime.pubsub.statements import Delivery
    from runtime.pubsub.subscribers.websocket import WebSocketHub
    from runtime.security.basic_auth import BasicAuth

_log = logging.getLogger(__name__)

#: Actions a client may send once authenticated (hello only before).
ACTIONS = ('hello', 'publish', 'subscribe', 'ack', 'unsubscribe', 'ping')

#: Most ack_ids one ack frame may name, and the longest one (ours are short decimal numbers).
MAX_ACK_IDS = 1000
MAX_ACK_ID_CHARS = 32

#: Longest client id echoed back, user name and password of a hello frame.
MAX_ID_CHARS = 200
MAX_USERNAME_CHARS = 200
MAX_PASSWORD_CHARS = 1024


#: What an unauthenticated client's peer may still send after its connection is closed (read and dropped).
HELLO_DRAIN_BYTES = 256 * 1024


def hello_limits(settings: WebSocketSection) -> Limits:
    """What a client may send before its hello succeeds: a hello's worth (a frame header announcing more is refused)."""
    return Limits(max_message_bytes=settings.hello_max_bytes, read_size=max(1024, settings.hello_max_bytes),
                  frames_per_sec=settings.hello_frames_per_sec, frame_burst=settings.hello_frame_burst,
                  check_headers=True, drain_bytes=HELLO_DRAIN_BYTES)


def signed_in_limits(settings: WebSocketSection) -> Limits:
    """What an authenticated client may send."""
    return Limits(max_message_bytes=settings.max_frame_bytes, read_size=READ_SIZE,
                  frames_per_sec=settings.frames_per_sec, frame_burst=settings.frame_burst, drain_bytes=DRAIN_BYTES)


@dataclass(frozen=True)
class WebSocketParts:
    """What WebSocket connections work with."""

    settings: WebSocketSection
    #: Publishing and subscription checks, the callers' definitions and permissions (as REST).
    rest: PubSubParts
    #: Subscriptions of kind websocket and their attachment to this worker's connections.
    hub: WebSocketHub
    counters: WebSocketMetrics
    json_limits: JsonLimits


class SignIn:
    """Hello-frame sign-ins: the definitions, failure throttle and failure log of Basic Auth over HTTP."""

    def __init__(self, security: Any, throttle: SignInThrottle, failures_log: FailedSignInLog | None) -> None:
        self._security = security
        self._throttle = throttle
        self._failures_log = failures_log

    def __call__(self, username: str, password: str, peer: str) -> BasicAuth:
        """The active definition of these credentials; Unauthorized or TooManyRequests."""
        self._throttle.check(peer, username)
        # The header a browser cannot send, built from the frame: one code path checks every password.
        header = 'Basic ' + base64.b64encode(f'{username}:{password}'.encode()).decode('ascii')
        try:
            caller = self._security.authenticate(header, realm=CALLER_REALM)
        except Unauthorized:
            self._throttle.failed(peer, username)
            if self._failures_log is not None:
                self._failures_log.record(peer, header, 'WEBSOCKET', '/pubsub/ws (hello)')
            raise
        self._throttle.succeeded(peer, username)
        return caller


def _string(frame: dict[str, Any], key: str, limit: int, required: bool = True) -> str | None:
    value = frame.get(key)
    if value is None and not required:
        return None
    if value is None:
        raise BadRequest(f'{key!r} is required')
    if not isinstance(value, str) or not value:
        raise BadRequest(f'{key!r} must be a non-empty string')
    if len(value) > limit:
        raise BadRequest(f'{key!r} must be at most {limit} characters')
    return value


class WebSocketSession:
    """One authenticated (or authenticating) WebSocket client: its frames and its subscriptions."""

    def __init__(self, conn: WsConnection, parts: WebSocketParts, sign_in: SignIn, peer: str,
                 caller: BasicAuth | None) -> None:
        self._conn = conn
        self._parts = parts
        self._sign_in = sign_in
        self.peer = peer
        self._caller = caller
        #: This connection's subscriptions by id.
        self._channels: dict[int, SendWindow] = {}
        #: The channel of every message sent and not yet acknowledged, by ack_id.
        self._acks: dict[str, SendWindow] = {}
        self._next_ack = itertools.count(1)
        #: A subscription attached by the frame being answered: its messages flow once the answer is sent.
        self._opening: SendWindow | None = None
        self._handlers: dict[str, Callable[[dict[str, Any]], tuple[str, dict[str, Any]]]] = {
            'publish': self._publish, 'subscribe': self._subscribe, 'ack': self._ack,
            'unsubscribe': self._unsubscribe, 'ping': self._ping, 'hello': self._hello_again}

    @property
    def conn(self) -> WsConnection:
        """The connection this session speaks over."""
        return self._conn

    def run(self) -> None:
        """Serve the connection until it closes; its subscriptions are then detached (their queues stay)."""
        counters = self._parts.counters
        counters.websocket_opened()
        try:
            if self._caller is None:
                self._caller = self._hello()
            if self._caller is not None:
                while True:
                    self._on_frame(self._conn.receive())
        except Closed:
            pass
        finally:
            self._leave()
            counters.websocket_closed()

    # Authentication

    def _hello(self) -> BasicAuth | None:
        """The caller of the first frame, a hello; else the connection is closed (policy violation)."""
        timeout = self._parts.settings.hello_timeout_secs
        try:
            text = self._conn.receive(timeout=timeout)
        except TimedOut:
            self._conn.close(POLICY_VIOLATION, f'no hello frame within {timeout:g} s')
            return None
        try:
            frame = json_limits.loads(text, self._parts.json_limits)
        except json_limits.InvalidJson:
            frame = None
        if not isinstance(frame, dict) or frame.get('action') != 'hello':
            self._parts.counters.websocket_frame('invalid')
            self._conn.close(POLICY_VIOLATION, 'authenticate first: {"action": "hello", "username": …, "password": …}')
            return None
        self._parts.counters.websocket_frame('hello')
        fid = frame.get('id') if isinstance(frame.get('id'), (str, int)) else None
        try:
            username = _string(frame, 'username', MAX_USERNAME_CHARS)
            password = _string(frame, 'password', MAX_PASSWORD_CHARS)
            assert username is not None and password is not None
            if ':' in username:
                raise Unauthorized(CALLER_REALM)  # no definition can have it: Basic Auth could not carry it
            caller = self._sign_in(username, password, self.peer)
        except ConduitError as e:
            self._send_error(fid, e)
            self._conn.close(POLICY_VIOLATION, 'sign-in refused')
            return None
        # Before the answer: the client may send its next frames as soon as it has it.
        self._conn.set_limits(signed_in_limits(self._parts.settings))
        self._send({'action': 'authenticated', 'id': fid, 'username': caller.username})
        return caller

    def _hello_again(self, frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        raise BadRequest('this connection is authenticated already')

    # Frames

    def _on_frame(self, text: str) -> None:
        fid: Any = None
        counted = False
        try:
            try:
                frame = json_limits.loads(text, self._parts.json_limits)
            except json_limits.InvalidJson as e:
                raise BadRequest(f'the frame {e}'[:300]) from None
            if not isinstance(frame, dict):
                raise BadRequest(f'a frame must be a JSON object, not {type(frame).__name__}')
            fid = frame.get('id')
            if fid is not None and (isinstance(fid, bool) or not isinstance(fid, (str, int))
                                    or len(str(fid)) > MAX_ID_CHARS):
                fid = None
                raise BadRequest(f"'id' must be a string or an integer of at most {MAX_ID_CHARS} characters")
            action = frame.get('action')
            handler = self._handlers.get(action) if isinstance(action, str) else None
            if handler is None:
                shown = repr(action)[:60] if action is not None else 'none'
                raise BadRequest(f"unknown action {shown}: send one of {', '.join(ACTIONS)}")
            self._parts.counters.websocket_frame(action)
            counted = True
            answer, fields = handler(frame)
            self._send({'action': answer, 'id': fid, **fields})
        except ConduitError as e:
            if not counted:
                self._parts.counters.websocket_frame('invalid')
            self._send_error(fid, e)
        except Closed:
            raise
        except Exception:
            cid = new_cid()
            _log.exception('websocket %s: a frame failed (cid %s)', self.peer, cid)
            self._send({'action': 'error', 'id': fid, 'status': 500,
                        'details': f'internal error; the server log has the details under cid {cid}'})
        finally:
            opening, self._opening = self._opening, None
            if opening is not None:
                opening.open()  # after the answer: the client knows the sub_key its messages name

    def _send(self, answer: dict[str, Any]) -> None:
        self._conn.send_text(json.dumps(answer, ensure_ascii=False))

    def _send_error(self, fid: Any, error: ConduitError) -> None:
        if error.http_status >= 500:
            _log.warning('websocket %s: %s', self.peer, error)
        answer = {'action': 'error', 'id': fid, 'status': error.http_status, 'details': error.details}
        if isinstance(error, TooManyRequests):
            answer['retry_after'] = error.retry_after_secs
        self._send(answer)

    def _caller_now(self) -> BasicAuth:
        assert self._caller is not None
        return self._caller

    def _publish(self, frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        topic = frame.get('topic')
        if not isinstance(topic, str):
            raise BadRequest("'topic' must be a string (the topic to publish to)")
        answer = publish_message(self._parts.rest, self._caller_now(), topic, lambda: frame, new_cid(), channel='ws')
        return 'published', answer

    def _subscribe(self, frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        hub, caller, settings = self._parts.hub, self._caller_now(), self._parts.settings
        refuse_subscriber_fields(frame, KIND_WEBSOCKET)
        sub_key = _string(frame, 'sub_key', 200, required=False)
        topic, pattern = frame.get('topic'), frame.get('pattern')
        if sub_key is not None:
            if topic is not None or pattern is not None:
                raise BadRequest("subscribe with 'sub_key' resumes that subscription: send no topic or pattern")
            sub = hub.find(caller.name, sub_key)
        else:
            if (topic is None) == (pattern is None):
                raise BadRequest("subscribe needs one of 'topic', 'pattern' (or 'sub_key' to resume)")
            window = frame.get('window', settings.default_window)
            if isinstance(window, bool) or not isinstance(window, int) or not 1 <= window <= settings.max_window:
                raise BadRequest(f"'window' must be a whole number from 1 to {settings.max_window}")
            if len(self._channels) >= settings.max_subscriptions:
                raise BadRequest(f'this connection holds {len(self._channels)} subscriptions, the most it may '
                                 f'([websocket] max_subscriptions)')
            if topic is not None:
                if not isinstance(topic, str):
                    raise BadRequest("'topic' must be a string")
                name = subscription_topic(self._parts.rest, caller, topic).name
            else:
                if not isinstance(pattern, str):
                    raise BadRequest("'pattern' must be a string")
                validate_pattern(pattern)
                # A sub entry must cover every topic the pattern matches (sub=orders.** covers orders.*); each
                # message is still checked against its own topic when it is delivered.
                check_pattern_permission(self._parts.rest, caller, pattern)
                name = pattern
            with storage_errors():
                sub = hub.subscribe(caller.name, name, window)
        fields: dict[str, Any] = {'sub_key': sub.sub_key, 'window': sub.options.delivery_batch_size}
        if sub_key is not None:
            fields['resumed'] = True
        channel = self._channels.get(sub.id)
        if channel is not None:  # attached to this very connection already
            fields['queue_depth'] = hub.queue_depth(sub)
            return 'subscribed', fields
        if len(self._channels) >= settings.max_subscriptions:
            raise BadRequest(f'this connection holds {len(self._channels)} subscriptions, the most it may '
                             f'([websocket] max_subscriptions)')
        channel = SendWindow(self, sub)
        self._channels[sub.id] = channel
        try:
            with storage_errors():
                fields['queue_depth'] = hub.attach(sub, channel, self.peer)
        except BaseException:
            self._channels.pop(sub.id, None)
            channel.close()
            raise
        # Messages wait until the client has the sub_key they are addressed to (opened after the answer).
        self._opening = channel
        return 'subscribed', fields

    def _ack(self, frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        ack_ids = frame.get('ack_ids')
        if (not isinstance(ack_ids, list) or not 1 <= len(ack_ids) <= MAX_ACK_IDS
                or not all(isinstance(a, str) and 0 < len(a) <= MAX_ACK_ID_CHARS for a in ack_ids)):
            raise BadRequest(f"'ack_ids' must be a list of 1 to {MAX_ACK_IDS} ack_id strings")
        acked, not_found, touched = 0, [], set()
        for ack_id in dict.fromkeys(ack_ids):
            channel = self._acks.pop(ack_id, None)
            if channel is not None and channel.acked(ack_id):
                acked += 1
                touched.add(channel.sub.id)
            else:
                not_found.append(ack_id)
        for sub_id in touched:
            self._parts.hub.activity(sub_id)
        return 'acked', {'acked': acked, 'not_found': not_found}

    def _unsubscribe(self, frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        sub_key = _string(frame, 'sub_key', 200)
        assert sub_key is not None
        hub = self._parts.hub
        sub = hub.find(self._caller_now().name, sub_key)
        channel = self._channels.pop(sub.id, None)
        if channel is not None:
            channel.close()
            hub.detach(sub.id, channel)
        with storage_errors():
            hub.unsubscribe(sub)
        return 'unsubscribed', {'sub_key': sub_key}

    def _ping(self, frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return 'pong', {}

    # Subscriptions

    def new_ack_id(self, channel: SendWindow) -> str:
        """A fresh ack_id for a message sent through channel."""
        ack_id = str(next(self._next_ack))
        self._acks[ack_id] = channel
        return ack_id

    def forget_ack(self, ack_id: str) -> None:
        """An ack_id no longer awaited (its outcome is settled)."""
        self._acks.pop(ack_id, None)

    def forget_channel(self, channel: SendWindow) -> None:
        """A closed channel's ack_ids are answered not_found from now on."""
        for ack_id in [a for a, c in self._acks.items() if c is channel]:
            del self._acks[ack_id]

    def dropped(self, channel: SendWindow) -> None:
        """A subscription left this connection (resumed on another, or removed): forget it and tell the client."""
        if self._channels.get(channel.sub.id) is channel:
            del self._channels[channel.sub.id]
        # Told from the pub/sub layer's greenlet: a slow client must not hold it up.
        gevent.spawn(self._tell_dropped, channel.sub)

    def _tell_dropped(self, sub: SubInfo) -> None:
        try:
            self._parts.hub.find(self._caller_now().name, sub.sub_key)
            details = 'resumed on another connection'
        except SubscriptionNotFound:
            details = 'the subscription was removed'
        except Exception:  # the database is away: the client learns what it needs, that it lost it
            details = 'no longer delivered on this connection'
        try:
            self._send({'action': 'detached', 'sub_key': sub.sub_key, 'details': details})
        except Closed:
            pass

    def _leave(self) -> None:
        """The connection is gone: every subscription goes back to the queue, unacked messages with it."""
        channels = list(self._channels.values())
        self._channels.clear()
        for channel in channels:
            channel.close()
        for channel in channels:
            try:
                self._parts.hub.detach(channel.sub.id, channel)
            except Exception as e:  # its lease then expires: another worker, or this one, delivers it again
                _log.warning('websocket %s: detaching %s failed: %s: %s', self.peer, channel.sub.label,
                             type(e).__name__, e)


class _Sent(NamedTuple):
    """A message the client holds: its ack_id and when it was sent (monotonic)."""

    ack_id: str
    at: float


class SendWindow:
    """One subscription attached to one connection: what its delivery loop sends through (``Attached``).

    The window slides: the loop hands over its head of the queue (at most the window) at every cycle,
    and the channel sends only what the client does not hold yet, so that each acknowledgement makes
    room for one more message at once. A message the client still holds is answered ``held``: its
    attempt stands, and the loop takes it again next cycle; one not sent (the window full) is left
    out of the answer, and the loop takes its attempt back. An acknowledged one is answered
    delivered, one held past the ack deadline ``AckTimeout``, and every one held when the client
    leaves ``ClientGone``.
    """

    def __init__(self, session: WebSocketSession, sub: SubInfo) -> None:
        self.sub = sub
        self._session = session
        #: What the client holds unacknowledged, by queue entry id.
        self._held: dict[int, _Sent] = {}
        #: The entry of each ack_id the client holds.
        self._entries: dict[str, int] = {}
        #: Acknowledged by the client, not yet answered to the loop.
        self._acked: set[int] = set()
        self._changed = Event()
        self._open = Event()
        self._closed = False
        #: The loop was woken (new messages) while waiting here: give it its turn back.
        self._woken = False

    @property
    def in_flight(self) -> int:
        """Messages the client holds unacknowledged."""
        return len(self._held)

    def wake(self) -> None:
        """New messages may be waiting: the loop gets its turn back to take them (if the window has room)."""
        self._woken = True
        self._changed.set()

    def open(self) -> None:
        """The client knows the sub_key: messages may flow."""
        self._open.set()

    def close(self) -> None:
        """No more messages through this channel; the loop's wait ends (what the client held goes back)."""
        self._closed = True
        # At once, not when the loop next answers (it may be between two takes, and send to another
        # connection next): what the client held goes back, so its acks count no more.
        self._session.forget_channel(self)
        self._open.set()
        self._changed.set()

    def taken_over(self, sub_id: int) -> None:
        """The subscription left this connection: resumed on another one, or removed."""
        if not self._closed:
            self.close()
            self._session.dropped(self)

    def acked(self, ack_id: str) -> bool:
        """Record an acknowledgement; False if the message is not held any more (answered already)."""
        entry_id = self._entries.pop(ack_id, None)
        if entry_id is None:
            return False
        self._held.pop(entry_id, None)
        self._acked.add(entry_id)
        self._changed.set()
        return True

    def _release(self, entry_id: int) -> None:
        sent = self._held.pop(entry_id, None)
        if sent is not None:
            self._entries.pop(sent.ack_id, None)
            self._session.forget_ack(sent.ack_id)

    def deliver_batch(self, sub: SubInfo, batch: list[Delivery]) -> list[Outcome]:
        """Send what the client does not hold yet (up to the window); answer once something is settled."""
        self._open.wait()
        deadline = self._session._parts.settings.ack_deadline_secs
        self._woken = False
        try:
            while True:
                outcomes, waiting = self._settle(batch, deadline)
                if outcomes or self._closed or (self._woken and len(self._held) < sub_window(self.sub)):
                    # Answered, gone, or new messages the window has room for: the loop's turn. What the
                    # client still holds is answered held (its attempt stands), and the loop takes it again.
                    return outcomes + [Outcome(d, False, held=True) for d in waiting]
                self._woken = False
                if not waiting:
                    # The window is full of messages the loop did not hand over this time (a message of
                    # higher priority came first): nothing to answer, the loop looks again shortly.
                    self._changed.clear()
                    self._changed.wait(self._next_deadline(deadline))
                    return []
                self._changed.clear()
                self._changed.wait(self._next_deadline(deadline))
        except BaseException:
            # Killed (the subscription's delivery stopped): what the client holds is no longer awaited.
            for entry_id in list(self._held):
                self._release(entry_id)
            raise
        finally:
            if self._closed:  # its ack ids were forgotten by close(), and a closed channel makes no new ones
                for entry_id in list(self._held):
                    self._release(entry_id)

    def _next_deadline(self, deadline: float) -> float:
        oldest = min((s.at for s in self._held.values()), default=None)
        return deadline if oldest is None else max(0.001, oldest + deadline - time.monotonic())

    def _settle(self, batch: list[Delivery], deadline: float) -> tuple[list[Outcome], list[Delivery]]:
        """Outcomes known now, and the messages of the batch the client holds (sending what fits first)."""
        session, parts = self._session, self._session._parts
        now = time.monotonic()
        in_batch = {d.entry_id for d in batch}
        for entry_id, sent in list(self._held.items()):
            if now - sent.at >= deadline and entry_id not in in_batch:
                self._release(entry_id)  # not in this batch: it is sent again when the loop takes it again
        outcomes: list[Outcome] = []
        waiting: list[Delivery] = []
        frames: list[bytes] = []
        sending: list[Delivery] = []  # the deliveries of frames, in order
        room = sub_window(self.sub) - len(self._held)
        key = json.dumps(self.sub.sub_key).encode()
        wall = time.time()
        for d in batch:
            entry_id = d.entry_id
            if entry_id in self._acked:
                self._acked.discard(entry_id)
                outcomes.append(Outcome(d, True))
                continue
            sent = self._held.get(entry_id)
            if sent is not None:
                if self._closed:
                    self._release(entry_id)
                    outcomes.append(Outcome(d, False, ClientGone()))
                elif now - sent.at >= deadline:
                    self._release(entry_id)
                    outcomes.append(Outcome(d, False, AckTimeout(deadline)))
                else:
                    waiting.append(d)
                continue
            if self._closed or room <= 0:
                continue  # not sent: the loop takes its attempt back
            ack_id = session.new_ack_id(self)
            try:
                body = render_pull(d, self.sub.sub_key, wall, ack_id, parts.json_limits)
            except UnrenderableMessage as e:
                session.forget_ack(ack_id)
                outcomes.append(Outcome(d, False, e))  # dead-lettered at once: trying again cannot help
                continue
            self._held[entry_id] = _Sent(ack_id, now)
            self._entries[ack_id] = entry_id
            room -= 1
            frames.append(b'{"action":"message","sub_key":' + key + b',"ack_id":"' + ack_id.encode() + b'",' + body[1:])
            sending.append(d)
        # The batch's new messages go in one write: a frame is a few bytes of header and the message.
        try:
            session.conn.send_texts(frames)
        except Closed:
            self.close()
            for d in sending:
                self._release(d.entry_id)
                outcomes.append(Outcome(d, False, ClientGone()))
            return outcomes, waiting
        waiting.extend(sending)
        return outcomes, waiting


def sub_window(sub: SubInfo) -> int:
    """The most messages a client may hold unacknowledged on a subscription (its batch size)."""
    return sub.options.delivery_batch_size
