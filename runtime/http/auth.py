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

Failed sign-ins are throttled per (client address, user name) and per user name across addresses
(``SignInThrottle``): past ``auth_max_failures`` for the pair, or ``auth_max_failures_per_user`` for
the name, within ``auth_failure_window_secs``, a request carrying credentials for that name is
answered 429 with ``Retry-After`` before any password is checked. One user's wrong passwords thus
do not lock out the other users behind the same address (a proxy, a NAT), and rotating client
addresses does not renew the budget of a user name. The client address is the TCP peer: forwarded
headers are not trusted. A header whose user name cannot be read counts under the name ``''``.
"""

from __future__ import annotations

import hashlib
import secrets
import time
import unicodedata
from array import array
from typing import Any, Protocol

import falcon

from runtime.errors import ConduitError, ObjectNotFound, SessionRequired, TooManyRequests
from runtime.http.signin_log import FailedSignInLog
from runtime.security.basic_auth import SecurityRegistry, parse_basic_header

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

#: Buckets of each of the throttle's two tables unless configured (``[http] auth_throttle_buckets``).
DEFAULT_THROTTLE_BUCKETS = 65_536

#: How long an address that signed in as a name keeps its own budget for that name (not the name's).
KNOWN_ADDRESS_SECS = 86_400.0


def throttle_user_key(username: str) -> str:
    """The name a user name's failures are counted under: look-alike spellings share one budget."""
    return unicodedata.normalize('NFKC', username).casefold()


class _WindowCounts:
    """Failures per key in fixed windows, kept in a fixed number of buckets (a count-min sketch).

    A key is hashed, with a secret salt of this process, to two buckets; its count is the smaller
    of theirs. Memory is fixed whatever keys arrive (never-existing user names, rotating addresses),
    nothing is ever evicted (so no flood can reset a key's count), and sharing buckets can only
    over-count a key, and only when both of its buckets are shared: the salt keeps an attacker from
    choosing keys that collide with a victim's.
    """

    def __init__(self, buckets: int, window_secs: float) -> None:
        self._size = max(int(buckets), 2)
        self._window = window_secs
        self._starts = array('d', [0.0]) * self._size
        self._counts = array('I', [0]) * self._size
        self._salt = secrets.token_bytes(16)

    def _slots(self, key: str) -> tuple[int, int]:
        digest = hashlib.blake2b(key.encode('utf-8', 'surrogatepass'), key=self._salt, digest_size=16).digest()
        first = int.from_bytes(digest[:8], 'big') % self._size
        second = int.from_bytes(digest[8:], 'big') % self._size
        return first, second if second != first else (first + 1) % self._size

    def count(self, key: str, now: float) -> tuple[int, float]:
        """Failures of key in the current window and the seconds until that count drops to 0."""
        found, left = 0xFFFF_FFFF, self._window
        for slot in self._slots(key):
            slot_left = self._starts[slot] + self._window - now
            if slot_left <= 0 or self._counts[slot] == 0:
                return 0, 0.0
            found, left = min(found, self._counts[slot]), min(left, slot_left)
        return found, left

    def add(self, key: str, now: float) -> None:
        """Count one failure of key."""
        for slot in self._slots(key):
            if now - self._starts[slot] >= self._window or self._counts[slot] == 0:
                self._starts[slot], self._counts[slot] = now, 1
            elif self._counts[slot] < 0xFFFF_FFFF:
                self._counts[slot] += 1

    def nbytes(self) -> int:
        """Bytes its buckets take (fixed at construction)."""
        return self._starts.itemsize * len(self._starts) + self._counts.itemsize * len(self._counts)


class SignInThrottle:
    """Failed sign-ins per (client address, user name) and per user name; too many → TooManyRequests (429).

    Both tables have a fixed size (``buckets`` each) that never grows nor is emptied: when many
    keys are live, keys share buckets and may be refused a little early, never late. Known and
    unknown user names are counted alike (the throttle never asks which names exist). An address
    that signed in as a name within ``KNOWN_ADDRESS_SECS`` is not held to the name's budget across
    addresses (only to its own pair's), so that nobody can lock the admin out from elsewhere.
    """

    def __init__(self, max_failures: int, window_secs: float, max_failures_per_user: int = 0,
                 buckets: int = DEFAULT_THROTTLE_BUCKETS, clock: Any = time.monotonic) -> None:
        self._max = max_failures
        self._max_per_user = max_failures_per_user
        self._clock = clock
        self._pairs = _WindowCounts(buckets, window_secs)
        self._users = _WindowCounts(buckets, window_secs)
        self._known = _WindowCounts(buckets, KNOWN_ADDRESS_SECS)

    def nbytes(self) -> int:
        """Memory the throttle's tables hold: fixed, whatever the number of clients and names."""
        return self._pairs.nbytes() + self._users.nbytes() + self._known.nbytes()

    @staticmethod
    def _keys(client: str, username: str | None) -> tuple[str, str]:
        user = throttle_user_key(username or '')
        return f'{client}\x00{user}', user

    def check(self, client: str, username: str | None) -> None:
        """Raise TooManyRequests while this address's budget for the name, or the name's, is spent."""
        pair, user = self._keys(client, username)
        now = self._clock()
        per_user = self._max_per_user if self._known.count(pair, now)[0] == 0 else 0
        for limit, table, key in ((self._max, self._pairs, pair), (per_user, self._users, user)):
            if limit > 0:
                count, left = table.count(key, now)
                if count >= limit:
                    raise TooManyRequests(int(left) + 1)

    def failed(self, client: str, username: str | None) -> None:
        """Count one failed sign-in of the name from client."""
        pair, user = self._keys(client, username)
        now = self._clock()
        self._pairs.add(pair, now)
        self._users.add(user, now)

    def succeeded(self, client: str, username: str | None) -> None:
        """Remember that client signed in as the name: its budget is then its own, not the name's."""
        pair, _ = self._keys(client, username)
        now = self._clock()
        if self._known.count(pair, now)[0] == 0:
            self._known.add(pair, now)


def basic_username(header: str | None) -> str:
    """The user name of a Basic Auth header, or '' when it has none that can be read."""
    parsed = parse_basic_header(header)
    return parsed[0] if parsed is not None else ''


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
            self._throttle.check(req.remote_addr or '', basic_username(req.get_header('Authorization')))

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         params: dict[str, Any]) -> None:
        if resource is None:
            return  # the channel sink: each channel's own security applies
        policy = getattr(resource, 'auth', ADMIN)
        if policy == ADMIN:
            self._admin.authenticate(req.get_header('Authorization'), realm=ADMIN_REALM)
            req.context.auth_ok = True
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
            self._throttle.failed(req.remote_addr or '', basic_username(req.get_header('Authorization')))
            if self._failures_log is not None:
                self._failures_log.record(req.remote_addr or '', req.get_header('Authorization'), req.method, req.path)
        elif getattr(req.context, 'auth_ok', False):
            self._throttle.succeeded(req.remote_addr or '', basic_username(req.get_header('Authorization')))


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
