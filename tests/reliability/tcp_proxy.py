"""A TCP proxy the tests can cut and restore: a database outage without stopping the database."""

from __future__ import annotations

import gevent
from gevent import socket
from gevent.server import StreamServer

from tests.live_server import free_port


class TcpProxy:
    """Forwards 127.0.0.1:<port> to a target port until cut."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = free_port()
        self._server: StreamServer | None = None
        self._sockets: set[socket.socket] = set()

    def start(self) -> TcpProxy:
        """Accept and forward connections."""
        self._server = StreamServer(('127.0.0.1', self.port), self._handle)
        self._server.start()
        return self

    def cut(self) -> None:
        """Stop accepting and drop every open connection, as a network failure would."""
        if self._server is not None:
            self._server.stop()
            self._server = None
        for s in list(self._sockets):
            try:
                s.close()
            except OSError:
                pass
        self._sockets.clear()

    def _handle(self, client: socket.socket, _address: object) -> None:
        try:
            upstream = socket.create_connection(('127.0.0.1', self.target_port))
        except OSError:
            client.close()
            return
        self._sockets.update((client, upstream))
        pumps = [gevent.spawn(self._pump, client, upstream), gevent.spawn(self._pump, upstream, client)]
        gevent.joinall(pumps, count=1)
        for s in (client, upstream):
            self._sockets.discard(s)
            s.close()
        gevent.killall(pumps)

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
