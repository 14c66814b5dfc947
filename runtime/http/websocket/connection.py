"""RFC 6455 frames over a socket taken over from the HTTP server; wsproto does the framing.

One greenlet reads (``receive``), any number write (``send_text``, serialised by a lock so that
frames never interleave). Reading is bounded: a message over ``max_message_bytes`` closes the
connection with 1009 before more of it is kept, a binary message with 1003, a protocol error
(unmasked frame, bad UTF-8, bad close code) with wsproto's code. The reader also keeps the peer
honest while it waits: every ``ping_interval`` it sends a ping, and a peer that sent nothing — not
even a pong — for ``dead_peer_secs`` is dropped (shut down, no closing handshake: it is not there).
The socket keeps the worker's send timeout, so one write that a client does not take in time
closes the connection instead of holding a greenlet.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import deque
from collections.abc import Callable

import gevent.lock
from gevent.socket import wait_read
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Ping, Pong, TextMessage

_log = logging.getLogger(__name__)

#: Close codes this side sends (RFC 6455 §7.4.1).
NORMAL = 1000
GOING_AWAY = 1001
UNSUPPORTED_DATA = 1003
POLICY_VIOLATION = 1008
MESSAGE_TOO_BIG = 1009
INTERNAL_ERROR = 1011

#: Bytes read from the socket at a time.
READ_SIZE = 65536

#: After this side closes: how long, and how much, of what the peer still sends is read and dropped.
DRAIN_SECS = 2.0
DRAIN_BYTES = 16 * 1024 * 1024

#: Longest a closing frame may take to send: the peer may be the reason the connection ends.
CLOSE_SEND_TIMEOUT_SECS = 2.0


class Closed(Exception):
    """The connection ended: the close code and reason (1006 when the peer vanished without one)."""

    def __init__(self, code: int, reason: str = '') -> None:
        super().__init__(f'{code} {reason}'.strip())
        self.code = code
        self.reason = reason


class TimedOut(Exception):
    """No whole message arrived within the time given to ``receive``."""


class WsConnection:
    """A server-side WebSocket connection on a connected (gevent) socket."""

    def __init__(self, sock: socket.socket, *, max_message_bytes: int, ping_interval_secs: float,
                 dead_peer_secs: float, label: str = '') -> None:
        self._sock = sock
        self._ws = Connection(ConnectionType.SERVER)
        self._max = max_message_bytes
        self._ping_interval = ping_interval_secs
        self._dead_after = dead_peer_secs
        self.label = label
        self._lock = gevent.lock.Semaphore()
        self._messages: deque[str] = deque()
        self._parts: list[str] = []
        self._size = 0
        self._closed: Closed | None = None
        self.last_heard = time.monotonic()
        self._last_ping = self.last_heard

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (no more frames go either way)."""
        return self._closed is not None

    # Reading

    def receive(self, timeout: float | None = None) -> str:
        """The next whole text message; Closed when the connection ends, TimedOut past timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._messages:
            if self._closed is not None:
                raise self._closed
            now = time.monotonic()
            wait = self._tick(now)
            if deadline is not None:
                if now >= deadline:
                    raise TimedOut()
                wait = min(wait, deadline - now)
            try:
                wait_read(self._sock.fileno(), timeout=max(wait, 0.001))
                data = self._sock.recv(READ_SIZE)
            except (TimeoutError, BlockingIOError):
                continue
            except OSError as e:
                self._end(Closed(1006, f'connection lost: {e.strerror or type(e).__name__}'))
                continue
            if not data:
                self._ws.receive_data(None)
                self._end(Closed(1006, 'the peer closed the TCP connection without a closing frame'))
                continue
            self.last_heard = time.monotonic()
            self._ws.receive_data(data)
            self._handle_events()
        return self._messages.popleft()

    def _tick(self, now: float) -> float:
        """Ping when due, drop a silent peer; how long the reader may wait before the next tick."""
        if now - self.last_heard >= self._dead_after:
            _log.info('websocket %s: no frame from the peer for %g s: dropped', self.label, self._dead_after)
            self._end(Closed(1006, f'no frame from the peer for {self._dead_after:g} s'))
            self._shutdown()
            return 0.0
        if now - self._last_ping >= self._ping_interval:
            self._last_ping = now
            self._send_bytes(lambda: self._ws.send(Ping(payload=b'')))
        return min(self._last_ping + self._ping_interval, self.last_heard + self._dead_after) - now

    def _handle_events(self) -> None:
        for event in self._ws.events():
            if isinstance(event, TextMessage):
                self._size += len(event.data.encode('utf-8', 'surrogatepass'))
                if self._size > self._max:
                    self.close(MESSAGE_TOO_BIG, f'message over {self._max} bytes')
                    return
                self._parts.append(event.data)
                if event.message_finished:
                    self._messages.append(''.join(self._parts))
                    self._parts, self._size = [], 0
            elif isinstance(event, BytesMessage):
                self.close(UNSUPPORTED_DATA, 'binary frames are not accepted: send JSON text frames')
                return
            elif isinstance(event, Ping):
                self._send_bytes(lambda event=event: self._ws.send(event.response()))
            elif isinstance(event, Pong):
                pass  # last_heard is set by any bytes at all
            elif isinstance(event, CloseConnection):
                self._peer_closed(event)
                return

    def _peer_closed(self, event: CloseConnection) -> None:
        if self._ws.state is ConnectionState.REMOTE_CLOSING:
            # The peer's closing frame: echo it (RFC 6455 §5.5.1), and the connection is over.
            self._send_bytes(lambda: self._ws.send(event.response()), CLOSE_SEND_TIMEOUT_SECS)
            self._end(Closed(event.code, event.reason or ''))
            self._shutdown()
        elif self._ws.state is ConnectionState.OPEN:
            # wsproto's verdict on a frame that broke the protocol: tell the peer why, then end.
            self.close(event.code, event.reason or '')
        else:
            self._end(Closed(event.code, event.reason or ''))  # the answer to our own closing frame
            self._shutdown()

    # Writing

    def send_text(self, text: str | bytes) -> None:
        """Send one text message (a str, or UTF-8 bytes); Closed if the connection is gone or the send failed."""
        if self._closed is not None:
            raise self._closed
        payload = text.decode('utf-8') if isinstance(text, bytes) else text
        self._send_bytes(lambda: self._ws.send(TextMessage(data=payload)))
        if self._closed is not None:
            raise self._closed

    def close(self, code: int = NORMAL, reason: str = '', drain: bool = True) -> None:
        """Send a closing frame (once) and end the connection; the peer's answer is not awaited.

        Only the reading greenlet may drain (read on) after the frame; another one passes drain=False.
        """
        if self._closed is None and self._ws.state in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            reason = reason.encode('utf-8')[:120].decode('utf-8', 'ignore')  # a close reason is at most 123 bytes
            self._send_bytes(lambda: self._ws.send(CloseConnection(code=code, reason=reason)), CLOSE_SEND_TIMEOUT_SECS)
        self._end(Closed(code, reason))
        if drain:
            self._drain()
        self._shutdown()

    def _drain(self) -> None:
        """Read and drop what the peer still sends for a moment, so that our closing frame reaches it.

        Closing a socket with unread input makes the kernel reset the connection, and a reset can reach
        the peer before the closing frame it was sent after: a client sending a frame too large would see
        "connection reset" instead of 1009.
        """
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            return
        deadline = time.monotonic() + DRAIN_SECS
        left = DRAIN_BYTES
        while left > 0:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return
            try:
                wait_read(self._sock.fileno(), timeout=wait)
                data = self._sock.recv(READ_SIZE)
            except (TimeoutError, OSError):
                return
            if not data:
                return
            left -= len(data)

    def _send_bytes(self, frame: Callable[[], bytes], timeout: float | None = None) -> None:
        with self._lock:
            if self._closed is not None:
                return
            try:
                data = frame()
                if timeout is not None:
                    with gevent.Timeout(timeout, TimeoutError):
                        self._sock.sendall(data)
                else:
                    self._sock.sendall(data)
            except (OSError, TimeoutError) as e:
                # A client that does not take what is sent within the send timeout loses the connection.
                _log.info('websocket %s: send failed (%s): connection closed', self.label, type(e).__name__)
                self._end(Closed(1006, f'send failed: {type(e).__name__}'))
                self._shutdown()

    def _end(self, closed: Closed) -> None:
        if self._closed is None:
            self._closed = closed

    def _shutdown(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
