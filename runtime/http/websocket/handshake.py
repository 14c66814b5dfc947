"""The WebSocket upgrade: what a valid request carries (RFC 6455 §4.2.1) and the 101 answer."""

from __future__ import annotations

import base64
import binascii
from urllib.parse import urlsplit

import falcon
from wsproto.utilities import generate_accept_token

from runtime.errors import BadRequest, ConduitError, Forbidden

#: The only protocol version RFC 6455 defines.
VERSION = '13'


class UpgradeRequired(ConduitError):
    """426: the request is not a WebSocket upgrade (or cannot be one here)."""

    http_status = 426


#: WSGI environ key set once a request's socket was taken over (upgraded): the worker must write
#: nothing more to it and close it when the application returns (runtime.http.worker).
TAKEN_OVER_KEY = 'conduit.socket_taken_over'

#: WSGI environ key of the worker's set of upgraded connections: each is closed with "going away"
#: (1001) as soon as the worker starts stopping, rather than cut when its graceful time runs out.
UPGRADED_KEY = 'conduit.upgraded_connections'


def _header_tokens(req: falcon.Request, name: str) -> set[str]:
    return {t.strip().lower() for t in (req.get_header(name) or '').split(',') if t.strip()}


def client_key(req: falcon.Request) -> str:
    """The Sec-WebSocket-Key of a valid upgrade request; UpgradeRequired or BadRequest naming what is wrong."""
    if 'websocket' not in _header_tokens(req, 'Upgrade') or 'upgrade' not in _header_tokens(req, 'Connection'):
        raise UpgradeRequired('this endpoint speaks WebSocket only: send Upgrade: websocket and Connection: Upgrade')
    if req.get_header('Sec-WebSocket-Version') != VERSION:
        raise UpgradeRequired(f'Sec-WebSocket-Version must be {VERSION}')
    key = (req.get_header('Sec-WebSocket-Key') or '').strip()
    try:
        if len(key) != 24 or len(base64.b64decode(key, validate=True)) != 16:
            raise ValueError(key)
    except (ValueError, binascii.Error):
        raise BadRequest('Sec-WebSocket-Key must be 16 random bytes in base64') from None
    return key


def check_origin(req: falcon.Request, allowed_origins: str) -> None:
    """Refuse Basic Auth on the upgrade from a browser page of another origin (cross-site WebSocket hijacking).

    Allowed: no Origin (not a browser), the server's own origin (Origin's host and port are the Host
    header's), and the origins of ``[websocket] allowed_origins``.

    A browser sends credentials it remembers for this server with any page's WebSocket, so the header
    proves nothing about the page: such a browser must authenticate with the hello frame instead.
    """
    origin = req.get_header('Origin')
    if origin is None or req.get_header('Authorization') is None:
        return
    origin = origin.strip().rstrip('/').lower()
    allowed = {o.strip().rstrip('/').lower() for o in allowed_origins.split(',') if o.strip()}
    if '*' in allowed or origin in allowed:
        return
    # A page of this very server (the dashboard), and clients that send the URL they dial as Origin.
    host = (req.get_header('Host') or '').strip().lower()
    if host and urlsplit(origin).netloc == host:
        return
    raise Forbidden('a browser page may not use the Basic Auth header here unless its origin is in '
                    '[websocket] allowed_origins: authenticate with the hello frame')


def accept_answer(key: str) -> bytes:
    """The 101 Switching Protocols answer to a request with this key (no subprotocol, no extension)."""
    return (b'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n'
            b'Sec-WebSocket-Accept: ' + generate_accept_token(key.encode('ascii')) + b'\r\n\r\n')
