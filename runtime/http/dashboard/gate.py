"""The dashboard's session gate: who may reach a resource whose ``auth`` is ``DASHBOARD``.

``RouteAuth`` (runtime.http.auth) calls ``SessionGate.check`` after routing. A request passes when:

- it carries the ``conduit_session`` cookie of a live session, signed in with the admin's or
  viewer's password of now (runtime.security.dashboard_sessions; else a page answers 303 to the
  sign-in form, with the page to come back to in ``next``, and anything else 401 JSON);
- for an unsafe method (anything but GET, HEAD, OPTIONS): its ``Origin`` (or, without one, its
  ``Referer``) names this server when it is sent at all; it carries the session's CSRF token in the
  ``X-CSRF-Token`` header or a ``csrf_token`` form field; and the session's role is ``admin`` (a
  ``viewer`` gets 403, except on the resources that say ``viewer_may_post``: signing out).

Then ``req.context.dashboard_user`` holds the user (actor, role, CSRF token). Origins are compared
by host and port only: behind a proxy that ends TLS the server sees http while the browser says https.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import falcon

from runtime.errors import BadRequest, Forbidden, SessionRequired
from runtime.http.body import read_body
from runtime.security.dashboard_sessions import SignedIn, csrf_matches

if TYPE_CHECKING:
    from runtime.security.dashboard_sessions import SessionStore

#: The cookie holding the session's token.
COOKIE = 'conduit_session'

#: Where every dashboard path lives.
PREFIX = '/dashboard'

#: The sign-in form.
SIGN_IN_PATH = PREFIX + '/sign-in'

#: Methods that change nothing: no CSRF token, origin or role check.
SAFE_METHODS = frozenset({'GET', 'HEAD', 'OPTIONS'})

#: Header and form field carrying the CSRF token.
CSRF_HEADER = 'X-CSRF-Token'
CSRF_FIELD = 'csrf_token'

#: Largest form body the dashboard reads (sign-in, sign-out): a form of a few fields.
MAX_FORM_BYTES = 16 * 1024

#: Longest ``next`` target kept.
MAX_NEXT_CHARS = 2000


@dataclass(frozen=True, slots=True)
class DashboardUser:
    """The signed-in user of a request (``req.context.dashboard_user``)."""

    actor: str
    role: str
    csrf_token: str

    @property
    def can_write(self) -> bool:
        """Whether the user may change anything (an admin; a viewer only looks)."""
        return self.role == 'admin'


def read_form(req: falcon.Request) -> dict[str, str]:
    """The URL-encoded form of a request (first value of each field), read once and kept on the request."""
    cached = getattr(req.context, 'dashboard_form', None)
    if cached is not None:
        return cached
    form: dict[str, str] = {}
    if (req.content_type or '').split(';')[0].strip().lower() == falcon.MEDIA_URLENCODED:
        raw = read_body(req, MAX_FORM_BYTES)
        try:
            text = raw.decode('utf-8')
            fields = parse_qs(text, keep_blank_values=True, max_num_fields=32, strict_parsing=False)
        except (UnicodeDecodeError, ValueError):
            raise BadRequest('the form is not URL-encoded UTF-8 text of at most 32 fields') from None
        form = {k: v[0] for k, v in fields.items()}
        if any('\x00' in k or '\x00' in v for k, v in form.items()):
            raise BadRequest('the form contains a NUL character')
    req.context.dashboard_form = form
    return form


def same_origin(req: falcon.Request) -> bool:
    """Whether the request's Origin (or, without one, its Referer) names this server; True when neither is sent."""
    host = (req.get_header('Host') or '').lower()
    origin = req.get_header('Origin')
    if origin is not None:
        if origin == 'null':
            return False
        return urlsplit(origin).netloc.lower() == host
    referer = req.get_header('Referer')
    if referer is not None:
        return urlsplit(referer).netloc.lower() == host
    return True


#: Session cookie values looked up at most per request.
MAX_COOKIES_TRIED = 2


def safe_next(target: str | None) -> str:
    """A place to go after signing in: a path inside the dashboard, else the overview."""
    home = PREFIX + '/'
    # ASCII only: the target goes into a Location header as it is (a browser sends non-ASCII percent-encoded).
    if (not target or len(target) > MAX_NEXT_CHARS or not target.isascii() or not target.isprintable()
            or '\\' in target):
        return home
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(home) or parts.path.startswith(SIGN_IN_PATH):
        return home
    segments = parts.path[len(home):].split('/')
    # No dot segments (plain or encoded) and no empty ones: the browser must land where the path says,
    # inside the dashboard. An encoded slash stays inside its segment (a topic named /customer/new).
    if '' in segments[:-1] or any(unquote(s) in ('.', '..') or '\\' in unquote(s) for s in segments):
        return home
    return target


def sign_in_url(target: str) -> str:
    """The sign-in form that comes back to target."""
    return f'{SIGN_IN_PATH}?next={quote(safe_next(target), safe="/")}'


class SessionGate:
    """Checks the session, the CSRF token, the origin and the role of every DASHBOARD request."""

    def __init__(self, sessions: SessionStore) -> None:
        self._sessions = sessions

    def session_of(self, req: falcon.Request) -> tuple[str, SignedIn] | None:
        """(the cookie's token, its live session), or None."""
        # At most two values are looked up: each lookup is a query, and an anonymous request with hundreds of
        # session cookies must not cost hundreds of queries. Two, because a browser may send a stale cookie
        # of another path beside the live one.
        for token in (req.get_cookie_values(COOKIE) or [])[:MAX_COOKIES_TRIED]:
            session = self._sessions.lookup(token)
            if session is not None:
                return token, session
        return None

    def check(self, req: falcon.Request, resp: falcon.Response, resource: Any) -> None:
        """Return when the request may reach the resource; raise otherwise."""
        found = self.session_of(req)
        if found is None:
            if getattr(resource, 'dashboard_page', False) and req.method in ('GET', 'HEAD'):
                # The URI as sent (gunicorn's RAW_URI): falcon's is decoded, which would turn an encoded
                # slash in a name into a separator.
                raw = req.env.get('RAW_URI')
                raise falcon.HTTPSeeOther(sign_in_url(raw if isinstance(raw, str) else req.relative_uri))
            raise SessionRequired('sign in to the dashboard first: no session, or it has ended')
        _, session = found
        user = DashboardUser(session.actor, session.role, session.csrf_token)
        req.context.dashboard_user = user
        if req.method not in SAFE_METHODS:
            if not same_origin(req):
                raise Forbidden('a change from another site is refused (its Origin or Referer is not this server)')
            sent = req.get_header(CSRF_HEADER)
            if sent is None:
                sent = read_form(req).get(CSRF_FIELD)
            if not csrf_matches(session, sent):
                raise Forbidden('the CSRF token is missing or wrong: reload the page and try again')
            if not user.can_write and not getattr(resource, 'viewer_may_post', False):
                raise Forbidden(f'{user.actor!r} signed in as a viewer, who may look but not change anything')
        self._sessions.touch(session)
