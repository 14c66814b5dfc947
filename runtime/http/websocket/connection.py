"""RFC 6455 frames over a socket taken over from the HTTP server; wsproto reads and checks the
peer's frames and makes the control frames, this module writes the text frames (``text_frame``).

One greenlet reads (``receive``), any number write (``send_text``, ``send_texts``: several
messages in one write; serialised by a lock so that frames never interleave). Reading is
bounded: a message over ``max_message_bytes`` closes the connection with 1009 before more of it
is kept, a binary message with 1003, a protocol error (unmasked frame, bad UTF-8, bad close code)
with wsproto's code. The reader also keeps the peer honest while it waits: every
``ping_interval`` it sends a ping, and a peer that sent nothing — not even a pong — for
``dead_peer_secs`` is dropped (shut down, no closing handshake: it is not there). The socket keeps
the worker's send timeout, so one write that a client does not take in time closes the
connection instead of holding a greenlet.

What a peer may send is bounded by its ``Limits``, which the session tightens before sign-in and
loosens after it: the largest message (enforced as its bytes arrive, and before sign-in already at
each frame's header, before its payload is read), how much is read from the socket at a time, and
how many frames per second (a token bucket; more closes the connection with 1008). Every frame
counts, continuation and control frames too. Frames are taken from wsproto one at a time, as the
session asks for messages, so a limit set after a message applies to the very next frame; and
every ``FRAMES_PER_TURN`` frames the reader yields to the other greenlets, so that a connection
sending thousands of tiny frames in one read does not hold the worker.
"""

from __future__ import annotations

import ctypes
import logging
import math
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import gevent.lock
from gevent.socket import wait_read
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Ping, TextMessage

from runtime.observability.websocket_metrics import RATE_LIMITED, TOO_LARGE, NoWebSocketMetrics, WebSocketMetrics

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

#: Frames (wsproto events) the reader works through before it lets the other greenlets run.
FRAMES_PER_TURN = 50


def text_frame(payload: bytes) -> bytes:
    """One whole (FIN), unmasked text frame of payload, as a server sends it (RFC 6455 §5.2)."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return b'\x81\x7e' + n.to_bytes(2, 'big') + payload
    return b'\x81\x7f' + n.to_bytes(8, 'big') + payload


@dataclass(frozen=True)
class Limits:
    """What a peer may send: the largest message, bytes read at a time, frames per second and their burst."""

    max_message_bytes: int
    #: Bytes asked of the socket at a time (a recv buffer of this size is allocated for each read).
    read_size: int = READ_SIZE
    #: The token bucket of frames: refilled at frames_per_sec, holding at most frame_burst.
    frames_per_sec: float = math.inf
    frame_burst: float = math.inf
    #: Check the header of each frame of the next message against max_message_bytes as it arrives.
    check_headers: bool = False
    #: At most this much of what the peer still sends is read (and dropped) after this side closes.
    drain_bytes: int = DRAIN_BYTES


class Closed(Exception):
    """The connection ended: the close code and reason (1006 when the peer vanished without one)."""

    def __init__(self, code: int, reason: str = '') -> None:
        super().__init__(f'{code} {reason}'.strip())
        self.code = code
        self.reason = reason


class TimedOut(Exception):
    """No whole message arrived within the time given to ``receive``."""


class _HeaderScan:
    """The payload lengths announced by the frame headers of a byte stream, as its bytes arrive (RFC 6455 §5.2).

    It follows the frames of one message only: once a data frame with FIN has been seen, it stops.
    """

    def __init__(self) -> None:
        self._head = bytearray()
        self._skip = 0
        self.done = False

    def feed(self, data: bytes) -> int:
        """The largest payload a frame header in data announces (0 when none or when done)."""
        biggest, i, n = 0, 0, len(data)
        while i < n and not self.done:
            if self._skip:
                taken = min(self._skip, n - i)
                self._skip -= taken
                i += taken
                continue
            head = self._head
            need = self._header_length()
            while len(head) < need and i < n:
                head.append(data[i])
                i += 1
                need = self._header_length()
            if len(head) < need:
                break
            length = head[1] & 0x7F
            if length == 126:
                length = int.from_bytes(head[2:4], 'big')
            elif length == 127:
                length = int.from_bytes(head[2:10], 'big')
            biggest = max(biggest, length)
            # A data frame (opcode below 8) with FIN ends the message; control frames come between fragments.
            self.done = bool(head[0] & 0x80) and not head[0] & 0x08
            self._skip = length
            self._head = bytearray()
        return biggest

    def _header_length(self) -> int:
        head = self._head
        if len(head) < 2:
            return 2
        length = head[1] & 0x7F
        return 2 + (2 if length == 126 else 8 if length == 127 else 0) + (4 if head[1] & 0x80 else 0)


class WsConnection:
    """A server-side WebSocket connection on a connected (gevent) socket."""

    def __init__(self, sock: socket.socket, *, limits: Limits, ping_interval_secs: float, dead_peer_secs: float,
                 label: str = '', counters: WebSocketMetrics | None = None) -> None:
        self._sock = sock
        self._ws = Connection(ConnectionType.SERVER)
        self._ping_interval = ping_interval_secs
        self._dead_after = dead_peer_secs
        self.label = label
        self._counters = counters or NoWebSocketMetrics()
        self._lock = gevent.lock.Semaphore()
        #: wsproto's events of what was read, taken one at a time (None: everything read is handled).
        self._events: Iterator[Event] | None = None
        self._parts: list[str] = []
        self._size = 0
        self._closed: Closed | None = None
        self.last_heard = time.monotonic()
        self._last_ping = self.last_heard
        #: Frames handled since the reader last let the other greenlets run.
        self._turn = 0
        self.set_limits(limits)

    @property
    def closed(self) -> bool:
        """Whether the connection has ended (no more frames go either way)."""
        return self._closed is not None

    @property
    def limits(self) -> Limits:
        """What the peer may send now."""
        return self._limits

    def set_limits(self, limits: Limits) -> None:
        """From the next frame on, the peer may send this much (its token bucket starts full)."""
        self._limits = limits
        self._tokens = limits.frame_burst
        self._refilled = time.monotonic()
        self._scan = _HeaderScan() if limits.check_headers else None

    # Reading

    def receive(self, timeout: float | None = None) -> str:
        """The next whole text message; Closed when the connection ends, TimedOut past timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            message = self._next_message()
            if message is not None:
                return message
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
                data = self._sock.recv(self._limits.read_size)
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
            self._turn = 0  # waiting for the socket let the others run
            if self._scan is not None and self._scan.feed(data) > self._limits.max_message_bytes:
                self._too_large(' (its frame header announced more)')
                continue
            self._ws.receive_data(data)
            self._events = self._ws.events()

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

    def _next_message(self) -> str | None:
        """Handle the frames read so far up to the end of the next whole message; None if none is complete."""
        while self._events is not None and self._closed is None:
            event = next(self._events, None)
            if event is None:
                self._events = None
                return None
            self._turn += 1
            if self._turn >= FRAMES_PER_TURN:
                # A read may hold thousands of tiny frames: the others (the hub, /health) get their turn.
                self._turn = 0
                gevent.sleep(0)
                if self._closed is not None:
                    return None
            if isinstance(event, TextMessage):
                if event.frame_finished and not self._take_frame():
                    return None
                self._size += len(event.data.encode('utf-8', 'surrogatepass'))
                if self._size > self._limits.max_message_bytes:
                    self._too_large()
                    return None
                self._parts.append(event.data)
                if event.message_finished:
                    message = ''.join(self._parts)
                    self._parts, self._size = [], 0
                    return message
            elif isinstance(event, BytesMessage):
                self.close(UNSUPPORTED_DATA, 'binary frames are not accepted: send JSON text frames')
            elif isinstance(event, CloseConnection):
                self._peer_closed(event)
            elif not self._take_frame():
                return None
            elif isinstance(event, Ping):
                self._send_bytes(lambda event=event: self._ws.send(event.response()))
            # A Pong needs nothing: last_heard is set by any bytes at all.
        return None

    def _take_frame(self) -> bool:
        """Count one frame against the token bucket; False (and the connection closed, 1008) when it is empty."""
        limits = self._limits
        if limits.frames_per_sec == math.inf:
            return True
        now = time.monotonic()
        self._tokens = min(limits.frame_burst, self._tokens + (now - self._refilled) * limits.frames_per_sec)
        self._refilled = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self._counters.websocket_frame(RATE_LIMITED)
        _log.info('websocket %s: more than %g frames per second: closed', self.label, limits.frames_per_sec)
        self.close(POLICY_VIOLATION, f'more than {limits.frames_per_sec:g} frames per second '
                                     f'(burst {limits.frame_burst:g}): send fewer, larger frames')
        return False

    def _too_large(self, how: str = '') -> None:
        self._counters.websocket_frame(TOO_LARGE)
        self.close(MESSAGE_TOO_BIG, f'message over {self._limits.max_message_bytes} bytes{how}')

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
        self.send_texts([text.encode('utf-8') if isinstance(text, str) else text])

    def send_texts(self, texts: list[bytes]) -> None:
        """Send text messages (each UTF-8 bytes), one frame each, in one write; Closed as ``send_text``.

        The bytes are taken as valid UTF-8, as the JSON renderer makes them: a server frame is only its
        header and the payload as it is (RFC 6455: unmasked), so nothing is decoded or copied per message.
        """
        if self._closed is not None:
            raise self._closed
        if texts:
            self._send_bytes(lambda: b''.join(map(text_frame, texts)))
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
        left = self._limits.drain_bytes
        while left > 0:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return
            try:
                wait_read(self._sock.fileno(), timeout=wait)
                data = self._sock.recv(self._limits.read_size)
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


#: After a connection ends, how long before this process's free heap memory is handed back to the system;
#: more connections ending meanwhile are covered by the same trim.
TRIM_DELAY_SECS = 1.0


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None where there is none (another C library, another system)."""
    if not sys.platform.startswith('linux'):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim  # type: ignore[no-any-return]


class MemoryReturn:
    """Hands the heap memory freed by ended connections back to the system, at most once per TRIM_DELAY_SECS.

    glibc keeps what a process frees for its own later use, and fragments of many freed buffers need
    not add up to a top of the heap it would give back by itself: a burst of connections would leave
    the worker that much bigger for good.
    """

    def __init__(self) -> None:
        self._trim = _malloc_trim()
        self._due = False

    def connection_ended(self) -> None:
        """A connection's buffers were freed: trim soon (one trim for every connection ending until then)."""
        if self._trim is None or self._due:
            return
        self._due = True
        gevent.spawn_later(TRIM_DELAY_SECS, self._run)

    def _run(self) -> None:
        self._due = False
        assert self._trim is not None
        self._trim(0)


#: The worker's one MemoryReturn.
memory_return = MemoryReturn()
