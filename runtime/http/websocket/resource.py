"""GET /pubsub/ws: authenticate the upgrade, answer 101 and run the connection's session on the socket."""

from __future__ import annotations

import falcon

from runtime.errors import ConduitError
from runtime.http.auth import CALLER, CALLER_REALM
from runtime.http.websocket.connection import WsConnection, memory_return
from runtime.http.websocket.handshake import (
    TAKEN_OVER_KEY,
    UPGRADED_KEY,
    UpgradeRequired,
    accept_answer,
    check_origin,
    client_key,
)
from runtime.http.websocket.session import SignIn, WebSocketParts, WebSocketSession, hello_limits, signed_in_limits

#: Where the gunicorn worker puts the client's socket in the WSGI environ.
SOCKET_KEY = 'gunicorn.socket'

_ERROR = {'application/json': {'schema': {'type': 'object', 'properties': {
    'is_ok': {'const': False}, 'cid': {'type': 'string'}, 'status': {'type': 'string'},
    'details': {'type': 'string'}}}}}


class WebSocketResource:
    """The WebSocket endpoint of pub/sub publishers and subscribers (docs/websockets.md)."""

    #: Authenticated here: by the upgrade's Basic Auth header, or by the hello frame once upgraded.
    auth = CALLER

    openapi = {'get': {
        'summary': 'Upgrade to a WebSocket for publishing and subscribing (JSON frames)',
        'description': "RFC 6455 upgrade. Authenticate with Basic Auth on this request or, from a browser, with a "
                       "first frame {\"action\": \"hello\", \"username\", \"password\"}. Frames: publish, subscribe, "
                       "ack, unsubscribe, ping; the server sends message, error and detached frames. See "
                       "docs/websockets.md.",
        'tags': ['pub/sub'],
        'responses': {'101': {'description': 'Switched to WebSocket'},
                      '400': {'description': 'Malformed upgrade request', 'content': _ERROR},
                      '401': {'description': 'Wrong credentials in the Basic Auth header', 'content': _ERROR},
                      '403': {'description': 'Basic Auth from a browser origin not allowed: use the hello frame',
                              'content': _ERROR},
                      '426': {'description': 'Not a WebSocket upgrade', 'content': _ERROR}},
    }}

    def __init__(self, parts: WebSocketParts, sign_in: SignIn) -> None:
        self._parts = parts
        self._sign_in = sign_in

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            key = client_key(req)
        except ConduitError:
            # Only an upgrade may go on unauthenticated (to its hello frame): to anything else this
            # route is like every other pub/sub route, so anonymous callers learn nothing more here.
            self._parts.rest.security.authenticate(req.get_header('Authorization'), realm=CALLER_REALM)
            raise
        sock = req.env.get(SOCKET_KEY)
        if sock is None:
            raise UpgradeRequired('WebSocket connections are served by the Conduit server itself (gunicorn)')
        caller = None
        if req.get_header('Authorization') is not None:
            check_origin(req, self._parts.settings.allowed_origins)
            caller = self._parts.rest.security.authenticate(req.get_header('Authorization'), realm=CALLER_REALM)
        peer = req.remote_addr or '?'
        # From here the socket is the session's: nothing more is written to it as HTTP.
        resp.status = falcon.HTTP_101
        req.env[TAKEN_OVER_KEY] = True
        try:
            sock.sendall(accept_answer(key))
        except OSError:
            return
        settings = self._parts.settings
        # Until its hello succeeds, a client may send no more than a hello takes (docs/SECURITY.md).
        limits = hello_limits(settings) if caller is None else signed_in_limits(settings)
        conn = WsConnection(sock, limits=limits, ping_interval_secs=settings.ping_interval_secs,
                            dead_peer_secs=settings.dead_peer_secs, label=peer, counters=self._parts.counters)
        upgraded = req.env.get(UPGRADED_KEY)
        if upgraded is not None:
            upgraded.add(conn)
        try:
            WebSocketSession(conn, self._parts, self._sign_in, peer, caller).run()
        finally:
            if upgraded is not None:
                upgraded.discard(conn)
            memory_return.connection_ended()
