"""REST channels: every path the runtime does not own goes to the channel router."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import ChannelNotFound, MethodNotAllowed, ServiceNotFound
from runtime.http.body import limits_of, parse_body, read_body
from runtime.service.base import HttpInfo
from runtime.service.context import CHANNEL_REST

if TYPE_CHECKING:
    from runtime.channels.rest import ChannelRouter
    from runtime.security.basic_auth import SecurityRegistry
    from runtime.service.invoke import Invoker
    from runtime.service.store import ServiceStore


class ChannelSink:
    """Finds the channel, checks its security, parses the body and runs the service."""

    def __init__(self, router: Callable[[], ChannelRouter], security: SecurityRegistry, store: ServiceStore,
                 invoker: Invoker) -> None:
        """router: the channel router now (it is replaced whole when channels change)."""
        self._router = router
        self._security = security
        self._store = store
        self._invoker = invoker

    def __call__(self, req: falcon.Request, resp: falcon.Response, **_: Any) -> None:
        channels, path_params = self._router().find(req.path)
        if not channels:
            raise ChannelNotFound(req.path)
        channel = next((c for c in channels if not c.methods or req.method in c.methods), None)
        if channel is None:
            raise MethodNotAllowed(req.method, sorted({m for c in channels for m in c.methods}))
        if channel.security:
            self._security.authenticate(req.get_header('Authorization'), required=channel.security)
        payload = parse_body(read_body(req), channel.data_format, limits_of(req).json)
        cls = self._store.get(channel.service)
        http = HttpInfo(req.method, req.path, dict(req.params), path_params, dict(req.headers))
        try:
            svc = self._invoker.run(cls, payload, channel=CHANNEL_REST, cid=req.context.cid, http=http)
        except ServiceNotFound as e:
            # A service the handler invoked is missing: the server's problem, not the client's.
            raise RuntimeError(f'service {channel.service!r} invoked a missing service: {e.name!r}') from e
        write_response(resp, svc.response)


def write_response(resp: falcon.Response, response: Any) -> None:
    """Serialise a service's response onto a falcon response."""
    resp.status = falcon.code_to_http_status(response.status_code)
    for name, value in response.headers.items():
        resp.set_header(name, value)
    payload = response.payload
    if payload is None:
        resp.text = ''
        if response.content_type:
            resp.content_type = response.content_type
    elif isinstance(payload, bytes):
        resp.data = payload
        resp.content_type = response.content_type or 'application/octet-stream'
    elif isinstance(payload, str):
        resp.text = payload
        resp.content_type = response.content_type or 'text/plain; charset=utf-8'
    else:
        resp.media = payload
        resp.content_type = response.content_type or falcon.MEDIA_JSON
