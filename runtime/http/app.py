"""The falcon app of one worker: health, admin API and channels over a runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import falcon
from sqlalchemy import text

from runtime.core import admin_password
from runtime.errors import BadRequest
from runtime.http import auth, errors, pubsub_rest
from runtime.http.admin.audit import AdminWrites
from runtime.http.admin.parts import admin_parts
from runtime.http.admin.routes import add_routes as add_admin_routes
from runtime.http.body import InputLimits
from runtime.http.channel_sink import ChannelSink
from runtime.http.openapi import BOOL, INT, STR, OpenApiResource, obj, operation
from runtime.http.signin_log import FailedSignInLog
from runtime.invoke import new_cid
from runtime.metrics import MetricsResource
from runtime.security import BasicAuth, SecurityRegistry, hash_password

if TYPE_CHECKING:
    from runtime.core import Runtime

#: Response header carrying the request's correlation id.
CID_HEADER = 'X-Conduit-CID'

#: Name of the admin credentials' definition (never shown: admin failures name no definition).
ADMIN_DEFINITION = 'conduit.admin'


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

    auth = auth.PUBLIC

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
    http = runtime.settings.http
    throttle = auth.SignInThrottle(http.auth_max_failures, http.auth_failure_window_secs)
    failures_log = FailedSignInLog(runtime.settings.logging.auth_failures_per_minute)
    route_auth = auth.RouteAuth(_admin_credentials(runtime), runtime.security, throttle, failures_log)
    admin = admin_parts(runtime)
    # Metrics first: its process_response times every request, those the others refuse too.
    app = falcon.App(middleware=[runtime.metrics.http_middleware(), _CidMiddleware(), _NulGuard(),
                                 InputLimits.from_settings(http), route_auth, AdminWrites(admin)], **kwargs)
    app.req_options.strip_url_path_trailing_slash = False
    errors.install(app)
    app.add_route('/health', HealthResource(runtime))
    # Topic, definition and channel names are in both documents: admin-only unless configured public.
    app.add_route('/metrics', MetricsResource(runtime, auth.PUBLIC if http.metrics_public else auth.ADMIN))
    app.add_route('/openapi.json', OpenApiResource(runtime, app, auth.PUBLIC if http.openapi_public else auth.ADMIN))
    add_admin_routes(app, admin)
    for path, resource in pubsub_rest.routes(runtime).items():
        app.add_route(path, resource)
    app.add_sink(ChannelSink(runtime), prefix='/')
    auth.check_routes(app)
    return app


def _admin_credentials(runtime: Runtime) -> SecurityRegistry:
    """The admin credentials as a one-definition registry: hashed, cached and compared like any other."""
    settings = runtime.settings
    registry = SecurityRegistry()
    password_hash = hash_password(admin_password(settings, create=True))
    registry.replace_all([BasicAuth(ADMIN_DEFINITION, settings.admin.username, password_hash, auth.ADMIN_REALM)])
    return registry
