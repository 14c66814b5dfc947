"""The falcon app of one worker: health, admin API and channels over a runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import falcon
from sqlalchemy import text

from runtime.core import admin_password
from runtime.errors import BadRequest
from runtime.http import admin, errors, pubsub_rest
from runtime.http.channel_sink import ChannelSink
from runtime.http.openapi import BOOL, INT, STR, OpenApiResource, obj, operation
from runtime.invoke import new_cid
from runtime.metrics import MetricsResource

if TYPE_CHECKING:
    from runtime.core import Runtime

#: Response header carrying the request's correlation id.
CID_HEADER = 'X-Conduit-CID'


class _CidMiddleware:
    """Gives every request a cid and returns it in a header."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.cid = new_cid()
        resp.set_header(CID_HEADER, req.context.cid)


class _NulGuard:
    """Refuses a NUL character in the path or query string: never meaningful, and PostgreSQL rejects it."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        # Checked once here rather than before every lookup that puts a path parameter into SQL.
        if '\x00' in req.path:
            raise BadRequest('the URL path contains a NUL character')
        if '%00' in req.query_string or '\x00' in req.query_string:
            raise BadRequest('the query string contains a NUL character')


class HealthResource:
    """GET /health: 200 when the database answers, 503 otherwise."""

    _HEALTH = obj({'is_ok': BOOL, 'status': STR, 'services': INT}, required=['is_ok', 'status'])
    openapi = {'get': operation('Health: 200 while the database answers, 503 otherwise', tags=['runtime'],
                                errors=(), response_schema=_HEALTH)}
    openapi['get']['responses']['503'] = {'description': 'Database unavailable',
                                          'content': {'application/json': {'schema': _HEALTH}}}

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        try:
            with self._runtime.engine.connect() as conn:
                conn.execute(text('SELECT 1'))
            db_ok = True
        except Exception:
            db_ok = False
        resp.status = falcon.HTTP_200 if db_ok else falcon.HTTP_503
        resp.media = {'is_ok': db_ok, 'status': 'ok' if db_ok else 'database unavailable',
                      'services': len(self._runtime.store.names())}


def make_app(runtime: Runtime, **kwargs: Any) -> falcon.App:
    """Build the WSGI app of a started runtime."""
    auth = admin.AdminAuth(runtime.settings.admin.username, admin_password(runtime.settings, create=True))
    # Metrics first: its process_response times every request, those the others refuse too.
    app = falcon.App(middleware=[runtime.metrics.http_middleware(), _CidMiddleware(), _NulGuard(), auth], **kwargs)
    app.req_options.strip_url_path_trailing_slash = False
    errors.install(app)
    app.add_route('/health', HealthResource(runtime))
    app.add_route('/metrics', MetricsResource(runtime))
    app.add_route('/openapi.json', OpenApiResource(runtime, app))
    admin.add_routes(app, runtime)
    for path, resource in pubsub_rest.routes(runtime).items():
        app.add_route(path, resource)
    app.add_sink(ChannelSink(runtime), prefix='/')
    return app
