"""Who may reach a resource: decided by the resource falcon routed to, never by the raw path.

Every resource class declares ``auth``, one of:

- ``ADMIN``: the admin credentials are checked here, before the responder runs;
- ``CALLER``: the resource authenticates the caller against the security definitions itself
  (pub/sub REST, where the definition is the subscriber's identity); methods falcon answers on
  the resource's behalf (OPTIONS) are authenticated here;
- ``PUBLIC``: no credentials (``/health``; ``/metrics`` and ``/openapi.json`` only when configured so);
- ``DASHBOARD``: a signed-in dashboard session, checked by the gate ``RouteAuth`` is given (the
  dashboard's ``SessionGate``: its cookie, CSRF token, origin and role); without a gate, refused.

The check runs in ``process_resource``, i.e. after routing, so every spelling of a path that
reaches an admin resource (``//admin/status``, ``/%2Fadmin/...``, an absolute-form request line)
meets the same check as the canonical one. ``/admin`` and everything under it that no admin route
serves is routed to ``AdminNotFound`` (itself ``ADMIN``), so an anonymous caller learns nothing
about which admin paths exist. Paths routed nowhere go to the channel sink, which authenticates
by the channel it finds. A resource without ``auth`` is refused at start-up (``check_routes``) and
treated as ``ADMIN`` if one is ever added later.

Failed sign-ins are throttled per client address (``SignInThrottle``): past ``auth_max_failures``
within ``auth_failure_window_secs``, a request carrying credentials is answered 429 with
``Retry-After`` before any password is checked. The client address is the TCP peer: forwarded
headers are not trusted, so behind a proxy all clients share the proxy's budget.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import falcon

from runtime.errors import ConduitError, ObjectNotFound, SessionRequired, TooManyRequests
from runtime.http.signin_log import FailedSignInLog
from runtime.security import SecurityRegistry

#: Auth policies a resource may declare in its ``auth`` attribute.
ADMIN = 'admin'
CALLER = 'caller'
PUBLIC = 'public'
DASHBOARD = 'dashboard'
POLICIES = (ADMIN, CALLER, PUBLIC, DASHBOARD)

#: Realm of the admin API's Basic Auth challenge.
ADMIN_REALM = 'Conduit admin'

#: Realm of the challenge of CALLER resources (the pub/sub API's).
CALLER_REALM = 'Conduit pub/sub'

#: Client addresses the throttle remembers at most; past it, the oldest windows are dropped.
MAX_TRACKED_CLIENTS = 100_000


class SignInThrottle:
    """Failed sign-ins per client address in a fixed window; too many → TooManyRequests (429)."""

    def __init__(self, max_failures: int, window_secs: float, clock: Any = time.monotonic) -> None:
        self._max = max_failures
        self._window = window_secs
        self._clock = clock
        #: client -> (start of its window, failures in it)
        self._failures: dict[str, tuple[float, int]] = {}

    def __len__(self) -> int:
        """How many clients are tracked (bounded by MAX_TRACKED_CLIENTS)."""
        return len(self._failures)

    def check(self, client: str) -> None:
        """Raise TooManyRequests while client is over its budget."""
        entry = self._failures.get(client)
        if entry is None or self._max <= 0:
            return
        started, count = entry
        left = started + self._window - self._clock()
        if left <= 0:
            del self._failures[client]
        elif count >= self._max:
            raise TooManyRequests(int(left) + 1)

    def failed(self, client: str) -> None:
        """Count one failed sign-in of client."""
        now = self._clock()
        started, count = self._failures.get(client, (now, 0))
        if now - started >= self._window:
            started, count = now, 0
        if client not in self._failures and len(self._failures) >= MAX_TRACKED_CLIENTS:
            self._forget_expired(now)
        self._failures[client] = (started, count + 1)

    def _forget_expired(self, now: float) -> None:
        self._failures = {c: e for c, e in self._failures.items() if now - e[0] < self._window}
        if len(self._failures) >= MAX_TRACKED_CLIENTS:
            # Still full of live windows: an address-rotating attack. Dropping them all keeps
            # memory bounded; each address then needs a fresh round of failures to be blocked.
            self._failures.clear()


class Gate(Protocol):
    """What checks a DASHBOARD resource's request (runtime.http.dashboard.gate.SessionGate)."""

    def check(self, req: falcon.Request, resp: falcon.Response, resource: Any) -> None:
        """Return when the request may reach the resource; raise a ConduitError otherwise."""


class RouteAuth:
    """Middleware: the routed resource's ``auth`` policy, and the sign-in throttle of every request."""

    def __init__(self, admin: SecurityRegistry, callers: SecurityRegistry, throttle: SignInThrottle,
                 failures_log: FailedSignInLog | None = None, dashboard: Gate | None = None) -> None:
        self._admin = admin
        self._dashboard = dashboard
        self._callers = callers
        self._throttle = throttle
        self._failures_log = failures_log

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        # Only a request that carries credentials can cost a password check.
        if req.get_header('Authorization') is not None:
            self._throttle.check(req.remote_addr or '')

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         params: dict[str, Any]) -> None:
        if resource is None:
            return  # the channel sink: each channel's own security applies
        policy = getattr(resource, 'auth', ADMIN)
        if policy == ADMIN:
            self._admin.authenticate(req.get_header('Authorization'), realm=ADMIN_REALM)
        elif policy == CALLER and not callable(getattr(resource, f'on_{req.method.lower()}', None)):
            # falcon answers OPTIONS itself for such a resource, which would skip the responder's check.
            self._callers.authenticate(req.get_header('Authorization'), realm=CALLER_REALM)
        elif policy == DASHBOARD:
            if self._dashboard is None:
                raise SessionRequired('the dashboard is not enabled on this server')
            self._dashboard.check(req, resp, resource)
        elif policy not in POLICIES:  # unknown: as strict as ADMIN
            self._admin.authenticate(req.get_header('Authorization'), realm=ADMIN_REALM)

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         req_succeeded: bool) -> None:
        if getattr(req.context, 'auth_failed', False) and req.get_header('Authorization') is not None:
            self._throttle.failed(req.remote_addr or '')
            if self._failures_log is not None:
                self._failures_log.record(req.remote_addr or '', req.get_header('Authorization'), req.method, req.path)


class AdminNotFound:
    """Every path under /admin that no admin resource serves: 404, but only to the admin."""

    auth = ADMIN
    openapi_hidden = True

    def _not_found(self, req: falcon.Request, resp: falcon.Response, **_: Any) -> None:
        raise ObjectNotFound('admin path', req.path)

    on_get = on_post = on_put = on_patch = on_delete = on_head = on_options = _not_found


def check_routes(app: falcon.App) -> None:
    """Refuse an app with a routed resource that does not declare an auth policy."""
    for template, resource in routed_resources(app):
        policy = getattr(resource, 'auth', None)
        if policy not in POLICIES:
            raise ConduitError(f'route {template} ({type(resource).__name__}) declares no auth policy '
                               f'(auth = one of {", ".join(POLICIES)})')


def routed_resources(app: falcon.App) -> list[tuple[str, Any]]:
    """Every (URI template, resource) the app's router holds."""
    found: list[tuple[str, Any]] = []
    stack = list(app._router._roots)  # falcon keeps no public list of resource instances
    while stack:
        node = stack.pop()
        if node.resource is not None:
            found.append((node.uri_template, node.resource))
        stack.extend(node.children)
    return sorted(found, key=lambda item: item[0])
