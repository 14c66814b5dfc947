"""Signing in to the dashboard with a form, and signing out.

``GET /dashboard/sign-in`` shows the form; ``POST`` checks the user name and password against
the admin credentials (role ``admin``) and the viewer's (role ``viewer``), with the same hashing,
caches and per-client throttle as every Basic Auth sign-in. A wrong user name or password
answers the form again saying that the two do not match, never which one was wrong; a failed
attempt is counted by ``SignInThrottle`` and logged by ``FailedSignInLog`` (never the password).
A right one starts a session (``runtime.security.dashboard_sessions``): its token goes into the
``conduit_session`` cookie (HttpOnly, SameSite=Strict, Path=/dashboard, Secure over TLS, expiring
with the session), and the browser is sent to ``next`` if that is a dashboard page.

``POST /dashboard/sign-out`` (with the CSRF token, a viewer too) ends the session.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import Forbidden, TooManyRequests, Unauthorized
from runtime.http.auth import DASHBOARD, PUBLIC
from runtime.http.dashboard.gate import COOKIE, PREFIX, SIGN_IN_PATH, read_form, safe_next, same_origin
from runtime.http.dashboard.page import HTML
from runtime.http.dashboard.templating import render

if TYPE_CHECKING:
    from runtime.http.dashboard.parts import DashboardParts

#: Name of the viewer's credentials' definition (the admin's is runtime.http.app.ADMIN_DEFINITION).
VIEWER_DEFINITION = 'conduit.viewer'

#: Realm given to the credentials' definitions (never sent: the form asks, not a Basic Auth challenge).
REALM = 'Conduit dashboard'

#: Longest user name and password the form accepts.
MAX_FIELD_CHARS = 1000

#: What a failed sign-in says, whichever part was wrong.
WRONG = 'The user name and password do not match. Try again.'


def _basic(username: str, password: str) -> str:
    return 'Basic ' + base64.b64encode(f'{username}:{password}'.encode()).decode('ascii')


class SignInPage:
    """GET/POST /dashboard/sign-in: the form, and starting a session."""

    auth = PUBLIC
    openapi_hidden = True
    dashboard = True

    def __init__(self, parts: DashboardParts) -> None:
        self._parts = parts

    def _form(self, resp: falcon.Response, next_target: str, message: str = '', username: str = '',
              status: str = falcon.HTTP_200) -> None:
        resp.status = status
        resp.content_type = HTML
        resp.text = render('sign_in.html', title='Sign in', message=message, username=username,
                           next=next_target)

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        target = safe_next(req.get_param('next'))
        if self._parts.gate.session_of(req) is not None:
            raise falcon.HTTPSeeOther(target)
        self._form(resp, target)

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        form = read_form(req)
        target = safe_next(form.get('next'))
        if not same_origin(req):
            raise Forbidden('a sign-in from another site is refused (its Origin or Referer is not this server)')
        client = req.remote_addr or ''
        username = form.get('username', '').strip()[:MAX_FIELD_CHARS]
        password = form.get('password', '')
        try:
            self._parts.throttle.check(client, username)
        except TooManyRequests as e:
            resp.set_header('Retry-After', str(e.retry_after_secs))
            self._form(resp, target, f'Too many failed sign-ins for this user name: try again in '
                                     f'{e.retry_after_secs} s.', username, falcon.HTTP_429)
            return
        role = self._role(username, password)
        if role is None:
            self._parts.throttle.failed(client, username)
            self._parts.failures_log.record(client, _basic(username, ''), req.method, req.path)
            self._form(resp, target, WRONG, username)
            return
        self._parts.throttle.succeeded(client, username)
        sessions = self._parts.sessions
        sessions.purge_expired()
        token, _ = sessions.create(username, role, client)
        resp.set_cookie(COOKIE, token, max_age=int(sessions.ttl_secs), path=PREFIX, secure=req.scheme == 'https',
                        http_only=True, same_site='Strict')
        resp.status = falcon.HTTP_303
        resp.location = target

    def _role(self, username: str, password: str) -> str | None:
        """'admin', 'viewer', or None when the credentials match neither."""
        if not username or ':' in username or len(password) > MAX_FIELD_CHARS:
            return None
        try:
            definition = self._parts.credentials.authenticate(_basic(username, password), realm=REALM)
        except Unauthorized:
            return None
        return 'viewer' if definition.name == VIEWER_DEFINITION else 'admin'


class SignOut:
    """POST /dashboard/sign-out: ends the session (the gate checked its CSRF token); back to the form."""

    auth = DASHBOARD
    openapi_hidden = True
    viewer_may_post = True

    def __init__(self, parts: DashboardParts) -> None:
        self._parts = parts

    def on_post(self, req: falcon.Request, resp: falcon.Response, **_: Any) -> None:
        found = self._parts.gate.session_of(req)
        if found is not None:
            self._parts.sessions.delete(found[0])
        resp.unset_cookie(COOKIE, path=PREFIX, same_site='Strict')
        resp.status = falcon.HTTP_303
        resp.location = SIGN_IN_PATH
