"""The gunicorn gevent worker with bounds on slow and numerous clients, and room for WebSockets.

gunicorn's gevent worker gives each connection a greenlet from a pool of ``worker_connections``;
when the pool is full it stops accepting, so 1,000 clients that send a byte a second make every
other request — ``/health`` included — wait. This worker changes six things:

- **Headroom, then shedding.** The pool holds ``http.max_connections`` connections plus a small
  reserve; a connection that arrives while ``max_connections`` are open is answered
  ``503 Service Unavailable`` with ``Retry-After`` at once and closed, never queued.
- **Time bounds on the socket.** Every blocking send of an answer must finish within
  ``http.send_timeout_secs`` (gevent applies a socket timeout to a whole ``sendall``), so a client
  that never reads cannot pin an answer in memory; the connection is closed with one INFO line.
  The request line and headers must arrive within ``http.header_timeout_secs`` (gunicorn's
  keep-alive timeout, which bounds reading each request head, set by runtime.server); the body's
  deadline and minimum rate are enforced where it is read (runtime.http.body).
- **Turns.** After each request the connection's greenlet yields, so every other connection with a
  request waiting is served before this one's next: a keep-alive client that always has its next
  request ready (pipelining, or a load generator on another core) never blocks in ``recv`` and would
  otherwise hold the worker alone.
- **Upgraded connections.** A WebSocket request takes its socket over (runtime.http.websocket): the
  worker then writes nothing more to it, and on SIGTERM tells each such client at once (1001,
  "going away") instead of cutting it when the graceful time runs out.
- **File descriptors.** The soft RLIMIT_NOFILE is raised to the hard limit, and a limit below
  ``max_connections`` is logged, since each connection needs one.
- **A prompt stop.** On SIGTERM the worker stops accepting at once (gunicorn's gevent worker looks
  at its flag once a second), closes the keep-alive connections that wait between two requests
  (gunicorn's waited for each to time out: a browser or a client's connection pool kept every stop
  waiting for ``http.header_timeout_secs``), and lets the requests in progress finish within
  ``server.graceful_timeout_secs``. A client whose request crossed that close on the wire sees
  the connection closed, as with any server that closes idle keep-alive connections, and retries.
"""

from __future__ import annotations

import json
import logging
import resource
import socket
import struct
import time
from functools import partial
from http import HTTPStatus
from typing import Any
from weakref import WeakSet

import gevent
from gevent.event import Event
from gevent.pool import Pool
from gevent.server import StreamServer
from gunicorn.http.errors import (
    ExpectationFailed,
    InvalidResponseHeader,
    LimitRequestHeaders,
    LimitRequestLine,
    ParseException,
)
from gunicorn.sock import ssl_context
from gunicorn.workers.base_async import AsyncWorker
from gunicorn.workers.ggevent import GeventWorker

from runtime.http.websocket.connection import GOING_AWAY
from runtime.http.websocket.handshake import TAKEN_OVER_KEY, UPGRADED_KEY

_log = logging.getLogger(__name__)

#: Connections accepted past max_connections only to be answered 503 and closed.
SHED_RESERVE = 256

#: Longest the 503 of a shed connection may take to send.
SHED_SEND_TIMEOUT_SECS = 1.0

#: What the app returns for a request whose socket was taken over (see ConduitWorker.load_wsgi).
_TAKEN_OVER: list[bytes] = []

#: File descriptors the worker needs besides its connections (database, logs, archive, pipes).
RESERVED_FDS = 128

#: How often a serving worker tells the master it is alive (gunicorn's worker timeout counts from it).
NOTIFY_SECS = 1.0

#: How often a stopping worker looks whether its requests in progress have finished.
DRAIN_POLL_SECS = 0.02


#: Statuses of parse errors that carry no code of their own (gunicorn's own choices).
_PARSE_STATUS = {LimitRequestLine: 414, LimitRequestHeaders: 431, ExpectationFailed: 417}


def _error_answer(status: int, details: str, extra_headers: str = '') -> bytes:
    """A whole HTTP answer with Conduit's JSON error body, closing the connection."""
    line = f'{status} {HTTPStatus(status).phrase}'
    body = json.dumps({'is_ok': False, 'cid': None, 'status': line, 'details': details}).encode()
    head = (f'HTTP/1.1 {line}\r\nContent-Type: application/json\r\n{extra_headers}'
            f'Content-Length: {len(body)}\r\nConnection: close\r\n\r\n').encode()
    return head + body


_SHED_ANSWER = _error_answer(503, 'the server has too many open connections; retry shortly', 'Retry-After: 1\r\n')


def raise_fd_limit(wanted: int) -> int:
    """Raise the soft limit of open files to the hard limit; returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = wanted if hard == resource.RLIM_INFINITY else hard
        if target > soft:
            try:
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
                soft = target
            except (ValueError, OSError):
                pass  # not allowed here: keep the soft limit and say so below
    return soft


class ConduitWorker(GeventWorker):
    """gunicorn's gevent worker with connection shedding and send timeouts (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        http = self.app.settings.http
        self._max_connections = http.max_connections
        self._send_timeout = http.send_timeout_secs
        self._open = 0
        # gunicorn sizes the pool from worker_connections: make room for the connections that are shed.
        self.worker_connections = self._max_connections + SHED_RESERVE
        #: Connections waiting for their next request (or their first): closed at once on SIGTERM.
        self._between_requests: set[socket.socket] = set()
        #: Set on SIGTERM: the serving loop stops waiting (made in run, once the worker's hub exists).
        self._stop_asked: Event | None = None

    def init_process(self) -> None:
        """Raise the open-files limit before serving (runs in the worker process)."""
        limit = raise_fd_limit(self.worker_connections + RESERVED_FDS)
        if limit < self.worker_connections + RESERVED_FDS:
            _log.warning('open-files limit is %d: fewer connections than http.max_connections=%d can be served',
                         limit, self._max_connections)
        super().init_process()

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        """Serve one connection, or answer 503 at once when max_connections are open."""
        if self._open >= self._max_connections:
            self._shed(client)
            return
        self._open += 1
        self._between_requests.add(client)
        try:
            # A socket timeout bounds every blocking recv and each whole sendall (gevent's semantics);
            # GeventWorker.handle would reset it to blocking, so AsyncWorker's is called directly.
            client.settimeout(self._send_timeout)
            AsyncWorker.handle(self, listener, client, addr)
        finally:
            self._between_requests.discard(client)
            self._open -= 1

    def handle_request(self, listener_name: Any, req: Any, sock: socket.socket, addr: Any) -> Any:
        """One request, then a turn for the other connections; an answer not taken in time loses the connection."""
        self._between_requests.discard(sock)
        try:
            answered = super().handle_request(listener_name, req, sock, addr)
        except TimeoutError:
            _log.info('closed a connection from %s: the answer was not taken within %g s',
                      addr[0] if isinstance(addr, tuple) else addr, self._send_timeout)
            try:
                # Reset rather than close: the kernel drops what it still buffers for this client too.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 0))
            except OSError:
                pass
            # gunicorn closes the connection quietly on StopIteration; an OSError would be logged with a traceback.
            raise StopIteration() from None
        # Let every other ready connection have its turn before this one's next request: a keep-alive
        # client whose next request is always waiting never blocks in recv, and would otherwise be served
        # alone until it paused (a pipelining client starved all others; with wrk at saturation the
        # worker's p99 was near a second while its p50 was 0.4 ms).
        gevent.sleep(0)
        # The connection now waits for its next request. Added even when stopping: a SIGTERM handled during
        # the sleep above came after the answer was sent as keep-alive, so gunicorn keeps reading from it.
        # (A connection gunicorn closes instead is discarded by handle() before another greenlet runs.)
        self._between_requests.add(sock)
        return answered

    def run(self) -> None:
        """Serve until SIGTERM; then stop accepting, close idle keep-alive connections, let requests finish."""
        self._stop_asked = Event()
        tls = {'ssl_context': ssl_context(self.cfg)} if self.cfg.is_ssl else {}
        servers = []
        for listener in self.sockets:
            listener.setblocking(1)
            server = StreamServer(listener, handle=partial(self.handle, listener), spawn=Pool(self.worker_connections),
                                  **tls)
            if self.cfg.workers > 1:
                server.max_accept = 1  # one connection per wake-up, so that the workers share new connections
            server.start()
            servers.append(server)
        while self.alive:
            self.notify()
            self._stop_asked.wait(NOTIFY_SECS)
        for server in servers:
            # Not close(): a connection accepted just before still needs its listener's address when
            # its handler starts (it is then closed as idle); the listener goes with the process.
            server.stop_accepting()
        deadline = time.monotonic() + self.cfg.graceful_timeout
        while any(server.pool.free_count() != server.pool.size for server in servers):  # a connection is open
            self._close_idle()  # also those whose request has finished since the last look
            if time.monotonic() >= deadline:
                self.log.warning('Worker graceful timeout (pid:%s)', self.pid)
                for server in servers:
                    server.stop(timeout=1)
                return
            self.notify()
            gevent.sleep(DRAIN_POLL_SECS)

    def _close_idle(self) -> None:
        """End the connections waiting between two requests: their next read sees the end of the stream."""
        for client in list(self._between_requests):
            self._between_requests.discard(client)
            try:
                # Through a duplicate of the descriptor: gevent's own shutdown would fail the handler's
                # read with EBADF, which gunicorn logs as an error with a traceback; this way the read
                # returns the end of the stream and the connection ends quietly.
                with socket.fromfd(client.fileno(), client.family, client.type) as same:
                    same.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # closed by the client meanwhile

    def load_wsgi(self) -> None:
        """Load the app, wrapped so that a request whose socket was taken over (a WebSocket) ends quietly."""
        super().load_wsgi()
        app = self.wsgi
        upgraded = self._upgraded = WeakSet()

        def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
            environ[UPGRADED_KEY] = upgraded
            body = app(environ, start_response)
            return _TAKEN_OVER if environ.get(TAKEN_OVER_KEY) else body
        self.wsgi = wsgi

    def handle_exit(self, sig: int, frame: Any) -> None:
        """SIGTERM: stop as gunicorn does, and tell WebSocket clients at once so they reconnect elsewhere."""
        super().handle_exit(sig, frame)
        if self._stop_asked is not None:
            self._stop_asked.set()
        for conn in list(getattr(self, '_upgraded', ())):
            # One greenlet each: a client that does not read must not delay the others' closing frames.
            gevent.spawn(conn.close, GOING_AWAY, 'server stopping', False)

    def is_already_handled(self, respiter: Any) -> bool:
        """An upgraded request has used its socket: gunicorn writes nothing more to it and closes it."""
        return respiter is _TAKEN_OVER or super().is_already_handled(respiter)

    def handle_error(self, req: Any, client: socket.socket, addr: Any, exc: BaseException) -> None:
        """A request gunicorn could not parse: a 4xx in Conduit's JSON error shape, one WARNING line."""
        if not isinstance(exc, ParseException) or isinstance(exc, InvalidResponseHeader):
            super().handle_error(req, client, addr, exc)
            return
        status = _PARSE_STATUS.get(type(exc), getattr(exc, 'code', 400))
        if not 400 <= status < 500:
            # An unsupported transfer coding (501 in gunicorn) is still the client's doing.
            status = 400
        details = f'malformed request: {exc}'[:500]
        ip = addr[0] if isinstance(addr, tuple) else addr
        self.log.warning('Invalid request from ip=%s: %s', ip, details)
        _send_and_close(client, _error_answer(status, details), SHED_SEND_TIMEOUT_SECS)

    def _shed(self, client: socket.socket) -> None:
        _send_and_close(client, _SHED_ANSWER, SHED_SEND_TIMEOUT_SECS)


def _send_and_close(client: socket.socket, answer: bytes, timeout: float) -> None:
    try:
        client.settimeout(timeout)
        client.sendall(answer)
    except OSError:
        pass
    finally:
        client.close()
