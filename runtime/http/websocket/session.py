"""The JSON protocol of one WebSocket connection, and the windows of its subscriptions.

The connection's own greenlet reads frames and answers them in order (``Session.run``). Messages
go the other way from the subscriptions' delivery loops (``runtime.pubsub``), each through its
``Channel``: a loop hands a batch to ``Channel.deliver_batch``, which sends it — never more than the
subscription's window, since the window is the loop's batch size — and waits until each message is
acknowledged, the client leaves, or the ack deadline passes. Only acknowledged messages are
reported delivered (and so leave the queue); the rest go back with their attempt counted
(``ClientGone``: due at once, for the client's return; ``AckTimeout``: after the usual wait).

Every frame a client sends is bounded before it is parsed (``WsConnection``) and checked field by
field; a wrong one is answered ``error {id, status, details}`` with REST's statuses and the
connection stays up. Before authentication only ``hello`` is accepted.
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import gevent
from gevent.event import Event

from runtime import json_limits
from runtime.errors import (
    BadRequest,
    ConduitError,
    TooManyRequests,
    Unauthorized,
    UnrenderableMessage,
)
from runtime.http.auth import CALLER_REALM, SignInThrottle
from runtime.http.pubsub_rest import RestParts, check_permission, publish_message, subscription_topic
from runtime.http.signin_log import FailedSignInLog
from runtime.http.websocket.connection import POLICY_VIOLATION, Closed, TimedOut, WsConnection
from runtime.invoke import new_cid
from runtime.json_limits import JsonLimits
from runtime.pubsub.delivery import Outcome
from runtime.pubsub.message import render_pull
from runtime.pubsub.permissions import SUB
from runtime.pubsub.subscribers.websocket import AckTimeout, ClientGone
from runtime.pubsub.topics import validate_pattern

if TYPE_CHECKING:
    from runtime.config import WebSocketSection
    from runtime.pubsub.registry import SubInfo
    from runtime.pubsub.statements import Delivery
    from runtime.pubsub.websocket_hub import WebSocketHub
    from runtime.security import BasicAuth

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


class Counters(Protocol):
    """The WebSocket figures a session reports (runtime.metrics)."""

    def websocket_opened(self) -> None: ...

    def websocket_closed(self) -> None: ...

    def websocket_frame(self, action: str) -> None: ...


@dataclass(frozen=True)
class WebSocketParts:
    """What WebSocket connections work with."""

    settings: WebSocketSection
    #: Publishing and subscription checks, the callers' definitions and permissions (as REST).
    rest: RestParts
    #: Subscriptions of kind websocket and their attachment to this worker's connections.
    hub: WebSocketHub
    counters: Counters
    json_limits: JsonLimits


class SignIn:
    """Hello-frame sign-ins: the definitions, failure throttle and failure log of Basic Auth over HTTP."""

    def __init__(self, security: Any, throttle: SignInThrottle, failures_log: FailedSignInLog | None) -> None:
        self._security = security
        self._throttle = throttle
        self._failures_log = failures_log

    def __call__(self, username: str, password: str, peer: str) -> BasicAuth:
        """The active definition of these credentials; Unauthorized or TooManyRequests."""
        self._throttle.check(peer)
        # The header a browser cannot send, built from the frame: one code path checks every password.
        header = 'Basic ' + base64.b64encode(f'{username}:{password}'.encode()).decode('ascii')
        try:
            return self._security.authenticate(header, realm=CALLER_REALM)
        except Unauthorized:
            self._throttle.failed(peer)
            if self._failures_log is not None:
                self._failures_log.record(peer, header, 'WEBSOCKET', '/pubsub/ws (hello)')
            raise


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


class Session:
    """One authenticated (or authenticating) WebSocket client: its frames and its subscriptions."""

    def __init__(self, conn: WsConnection, parts: WebSocketParts, sign_in: SignIn, peer: str,
                 caller: BasicAuth | None) -> None:
        self._conn = conn
        self._parts = parts
        self._sign_in = sign_in
        self.peer = peer
        self._caller = caller
        #: This connection's subscriptions by id.
        self._channels: dict[int, Channel] = {}
        #: The channel of every message sent and not yet acknowledged, by ack_id.
        self._acks: dict[str, Channel] = {}
        self._next_ack = itertools.count(1)
        #: A subscription attached by the frame being answered: its messages flow once the answer is sent.
        self._opening: Channel | None = None
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
                # The pattern itself, read as a name, must be granted (sub=orders.** covers orders.*); each
                # message is still checked against its own topic when it is published.
                check_permission(self._parts.rest, caller, SUB, pattern)
                name = pattern
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
        channel = Channel(self, sub)
        self._channels[sub.id] = channel
        try:
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
        hub.unsubscribe(sub)
        return 'unsubscribed', {'sub_key': sub_key}

    def _ping(self, frame: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return 'pong', {}

    # Subscriptions

    def new_ack_id(self, channel: Channel) -> str:
        """A fresh ack_id for a message sent through channel."""
        ack_id = str(next(self._next_ack))
        self._acks[ack_id] = channel
        return ack_id

    def forget_ack(self, ack_id: str) -> None:
        """An ack_id no longer awaited (its outcome is settled)."""
        self._acks.pop(ack_id, None)

    def dropped(self, channel: Channel, details: str) -> None:
        """A subscription moved to another connection: forget it here and tell the client."""
        if self._channels.get(channel.sub.id) is channel:
            del self._channels[channel.sub.id]
        notice = {'action': 'detached', 'sub_key': channel.sub.sub_key, 'details': details}
        # Told from the pub/sub layer's greenlet: a slow client must not hold it up.
        gevent.spawn(self._send_quietly, notice)

    def _send_quietly(self, answer: dict[str, Any]) -> None:
        try:
            self._send(answer)
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


class Channel:
    """One subscription attached to one connection: what its delivery loop sends through (``Attached``)."""

    def __init__(self, session: Session, sub: SubInfo) -> None:
        self.sub = sub
        self._session = session
        #: Sent and not yet acknowledged, by ack_id; and acknowledged in the batch under way.
        self._unacked: dict[str, Delivery] = {}
        self._acked: set[str] = set()
        self._changed = Event()
        self._open = Event()
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Messages the client holds unacknowledged."""
        return len(self._unacked)

    def open(self) -> None:
        """The client knows the sub_key: messages may flow."""
        self._open.set()

    def close(self) -> None:
        """No more messages through this channel; a batch under way ends (unacked ones go back)."""
        self._closed = True
        self._open.set()
        self._changed.set()

    def taken_over(self, sub_id: int) -> None:
        """The subscription was resumed by another connection."""
        if not self._closed:
            self.close()
            self._session.dropped(self, 'resumed on another connection')

    def acked(self, ack_id: str) -> bool:
        """Record an acknowledgement; False if the message is not awaited any more."""
        if ack_id not in self._unacked:
            return False
        self._acked.add(ack_id)
        self._changed.set()
        return True

    def deliver_batch(self, sub: SubInfo, batch: list[Delivery]) -> list[Outcome]:
        """Send a batch (at most the window) and wait for its acknowledgements; an Outcome per message sent."""
        self._open.wait()
        if self._closed:
            return []
        session, parts = self._session, self._session._parts
        outcomes: list[Outcome] = []
        sent: list[tuple[str, Delivery]] = []
        key = json.dumps(sub.sub_key).encode()
        now = time.time()
        for d in batch:
            if self._closed:
                break
            ack_id = session.new_ack_id(self)
            try:
                body = render_pull(d, sub.sub_key, now, ack_id, parts.json_limits)
            except UnrenderableMessage as e:
                session.forget_ack(ack_id)
                outcomes.append(Outcome(d, False, e))  # dead-lettered at once: trying again cannot help
                continue
            self._unacked[ack_id] = d
            sent.append((ack_id, d))
            try:
                session.conn.send_text(b'{"action":"message","sub_key":' + key + b',"ack_id":"' + ack_id.encode()
                                       + b'",' + body[1:])
            except Closed:
                self.close()
        deadline = time.monotonic() + parts.settings.ack_deadline_secs
        while not self._closed and len(self._acked) < len(sent):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._changed.clear()
            self._changed.wait(left)
        for ack_id, d in sent:
            del self._unacked[ack_id]
            session.forget_ack(ack_id)
            if ack_id in self._acked:
                outcomes.append(Outcome(d, True))
            elif self._closed:
                outcomes.append(Outcome(d, False, ClientGone('the client left before acknowledging the message')))
            else:
                outcomes.append(Outcome(d, False, AckTimeout(
                    f'not acknowledged within {parts.settings.ack_deadline_secs:g} s')))
        self._acked.clear()
        return outcomes
