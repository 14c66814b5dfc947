"""The falcon app of one worker: health, admin API, dashboard and channels over a runtime.

``make_app`` is given the parts it serves (``AppParts``) by the composition root
(``runtime.core.Runtime.make_app``); it does not know the runtime itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import BadRequest
from runtime.http import auth, errors, pubsub_rest
from runtime.http.admin.audit import AdminWrites
from runtime.http.admin.routes import add_routes as add_admin_routes
from runtime.http.body import InputLimits
from runtime.http.channel_sink import ChannelSink
from runtime.http.dashboard.gate import SessionGate
from runtime.http.dashboard.headers import DashboardHeaders
from runtime.http.dashboard.parts import DashboardParts
from runtime.http.dashboard.routes import add_routes as add_dashboard_routes
from runtime.http.dashboard.sign_in import REALM as DASHBOARD_REALM
from runtime.http.dashboard.sign_in import VIEWER_DEFINITION
from runtime.http.metrics import HttpMetrics, MetricsResource
from runtime.http.openapi import BOOL, INT, STR, OpenApiResource, obj, operation
from runtime.http.signin_log import FailedSignInLog
from runtime.http.websocket.resource import WebSocketResource
from runtime.http.websocket.session import SignIn, WebSocketParts
from runtime.security.admin_credentials import admin_password, viewer_password
from runtime.security.basic_auth import BasicAuth, SecurityRegistry, hash_password
from runtime.service.invoke import new_cid
from runtime.util import json_limits
from runtime.util.json_limits import JsonLimits

if TYPE_CHECKING:

    from runtime.channels.rest import ChannelRouter
    from runtime.config import Settings
    from runtime.http.admin.parts import AdminParts
    from runtime.http.pubsub_access import PubSubParts
    from runtime.observability.metrics import Metrics
    from runtime.pubsub.subscribers.websocket import WebSocketHub
    from runtime.security.dashboard_sessions import SessionStore
    from runtime.service.invoke import Invoker
    from runtime.service.store import ServiceStore

#: Response header carrying the request's correlation id.
CID_HEADER = 'X-Conduit-CID'

#: Name of the admin credentials' definition (never shown: admin failures name no definition).
ADMIN_DEFINITION = 'conduit.admin'


@dataclass(frozen=True, slots=True)
class AppParts:
    """The parts of a runtime the falcon app serves."""

    settings: Settings
    #: Whether the database answers (GET /health).
    database_answers: Callable[[], bool]
    store: ServiceStore
    invoker: Invoker
    #: The Basic Auth definitions of channels and pub/sub clients (reloaded in place).
    security: SecurityRegistry
    #: The channel router now: it is replaced whole when channels change.
    router: Callable[[], ChannelRouter]
    metrics: Metrics
    #: What the admin API works with.
    admin: AdminParts
    #: What the pub/sub REST API works with.
    pubsub_rest: PubSubParts
    #: WebSocket subscriptions and their attachment to this worker's connections.
    ws_hub: WebSocketHub
    #: The dashboard's sessions (None: no dashboard).
    sessions: SessionStore | None = None


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

    def __init__(self, ping: Callable[[], bool], store: ServiceStore) -> None:
        #: Whether the database answers now; never raises.
        self._ping = ping
        self._store = store

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        db_ok = self._ping()
        resp.status = falcon.HTTP_200 if db_ok else falcon.HTTP_503
        resp.media = {'is_ok': db_ok, 'status': 'ok' if db_ok else 'database unavailable',
                      'services': len(self._store.names())}


def make_app(parts: AppParts, **kwargs: Any) -> falcon.App:
    """Build the WSGI app of a started runtime's parts (kwargs go to falcon.App)."""
    http = parts.settings.http
    throttle = auth.SignInThrottle(http.auth_max_failures, http.auth_failure_window_secs,
                                   http.auth_max_failures_per_user, http.auth_throttle_buckets)
    failures_log = FailedSignInLog(parts.settings.logging.auth_failures_per_minute)
    admin_secret = admin_password(parts.settings, create=True)
    gate = SessionGate(parts.sessions) if parts.sessions is not None and parts.settings.dashboard.enabled else None
    if gate is not None and parts.sessions is not None:
        # A session signed in with another password than this worker's (a restart with a new one) has ended.
        # The hashes it answers with are the ones sign-ins are checked against: no scrypt spent twice.
        hashes = parts.sessions.bind_credentials({
            'admin': (parts.settings.admin.username, admin_secret),
            'viewer': (parts.settings.dashboard.viewer_username, viewer_password(parts.settings, create=True))})
        admin_hash, viewer_hash = hashes['admin'], hashes['viewer']
    else:
        admin_hash, viewer_hash = hash_password(admin_secret), ''
    route_auth = auth.RouteAuth(_admin_credentials(parts.settings, admin_hash), parts.security, throttle, failures_log,
                                dashboard=gate)
    # Metrics first: its process_response times every request, those the others refuse too.
    app = falcon.App(middleware=[HttpMetrics(parts.metrics), DashboardHeaders(), _CidMiddleware(), _NulGuard(),
                                 InputLimits.from_settings(http), route_auth, AdminWrites(parts.admin)], **kwargs)
    app.req_options.strip_url_path_trailing_slash = False
    # Answers rendered by orjson (the standard library for what it refuses): runtime.util.json_limits.render.
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = falcon.media.JSONHandler(dumps=json_limits.render)
    errors.install(app)
    app.add_route('/health', HealthResource(parts.database_answers, parts.store))
    # Topic, definition and channel names are in both documents: admin-only unless configured public.
    app.add_route('/metrics', MetricsResource(parts.metrics, auth.PUBLIC if http.metrics_public else auth.ADMIN))
    app.add_route('/openapi.json', OpenApiResource(app, parts.router,
                                                   auth.PUBLIC if http.openapi_public else auth.ADMIN))
    add_admin_routes(app, parts.admin)
    if gate is not None and parts.sessions is not None:
        add_dashboard_routes(app, DashboardParts(
            settings=parts.settings, admin=parts.admin, sessions=parts.sessions, gate=gate,
            credentials=_dashboard_credentials(parts.settings, admin_hash, viewer_hash), throttle=throttle,
            failures_log=failures_log, metrics=parts.metrics))
    for path, resource in pubsub_rest.routes(parts.pubsub_rest).items():
        app.add_route(path, resource)
    websocket = WebSocketParts(settings=parts.settings.websocket, rest=parts.pubsub_rest, hub=parts.ws_hub,
                               counters=parts.metrics, json_limits=JsonLimits.from_settings(http))
    app.add_route('/pubsub/ws', WebSocketResource(websocket, SignIn(parts.security, throttle, failures_log)))
    app.add_sink(ChannelSink(parts.router, parts.security, parts.store, parts.invoker), prefix='/')
    auth.check_routes(app)
    return app


def _admin_credentials(settings: Settings, password_hash: str) -> SecurityRegistry:
    """The admin credentials as a one-definition registry: hashed, cached and compared like any other."""
    registry = SecurityRegistry()
    registry.replace_all([BasicAuth(ADMIN_DEFINITION, settings.admin.username, password_hash, auth.ADMIN_REALM)])
    return registry


def _dashboard_credentials(settings: Settings, admin_hash: str, viewer_hash: str) -> SecurityRegistry:
    """Who may sign in to the dashboard: the admin, and the read-only viewer (never valid for /admin)."""
    registry = SecurityRegistry()
    registry.replace_all([
        BasicAuth(ADMIN_DEFINITION, settings.admin.username, admin_hash, DASHBOARD_REALM),
        BasicAuth(VIEWER_DEFINITION, settings.dashboard.viewer_username, viewer_hash, DASHBOARD_REALM)])
    return registry
