"""The admin API of dashboard sessions: ``GET`` and ``DELETE /admin/dashboard/sessions``.

``GET`` lists the live sessions (who signed in, as admin or viewer, from which address, when, and
when the session ends); never a token nor a CSRF token. ``DELETE`` ends every session at once, or
only those of one role with ``?role=admin|viewer``: each browser must sign in again. It is how an
operator who suspects a stolen cookie, or who changed a password without restarting every worker,
throws every session out. Ending them is audited like every admin change (kind ``dashboard``, action
``end-sessions``); the dashboard's security page and ``conduit dashboard end-sessions`` call it.
A session also ends by itself when the password it signed in with changes (runtime.security.dashboard_sessions).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import falcon

from runtime.errors import BadRequest, ConduitError, InvalidInput
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.body import read_body
from runtime.http.openapi import INT, NULLABLE_STR, NUM, STR, TIME, arr, integer, obj, operation, query
from runtime.security.dashboard_sessions import MAX_LISTED, ROLES
from runtime.util.timefmt import iso

if TYPE_CHECKING:
    from runtime.security.dashboard_sessions import SessionStore

_T = ['admin: dashboard']

#: Sessions listed when no limit is asked for.
DEFAULT_PAGE = 100

#: Largest body a DELETE may carry (it takes none; a few bytes of whitespace are forgiven).
MAX_DELETE_BODY = 64


class SessionsUnavailable(ConduitError):
    """This server was built without the dashboard's session store (an embedded app)."""

    http_status = 503

    def __init__(self) -> None:
        super().__init__('dashboard sessions are not available in this server')


_SESSION = obj({'actor': STR, 'role': {'enum': list(ROLES)}, 'client': STR, 'created_at': NUM,
                'created_at_iso': TIME, 'last_seen_at': NUM, 'last_seen_at_iso': TIME, 'expires_at': NUM,
                'expires_at_iso': TIME},
               required=['actor', 'role', 'client', 'created_at', 'last_seen_at', 'expires_at'])
_ROLE = query('role', {'enum': list(ROLES)}, 'Only the sessions of this role')


class DashboardSessionsResource(AdminResource):
    """GET /admin/dashboard/sessions: the live sessions; DELETE: end them all (or one role's)."""

    openapi = {
        'get': operation('List the live dashboard sessions (never their tokens)', tags=_T, errors=(400,),
                         params=[query('limit', integer(1, MAX_LISTED), f'Most sessions listed (default '
                                                                        f'{DEFAULT_PAGE}, newest first)')],
                         response={'total': INT, 'sessions': arr(_SESSION)}),
        'delete': operation('End every dashboard session (or those of one role): each user signs in again',
                            tags=_T, errors=(400,), params=[_ROLE],
                            response={'ended': INT, 'role': NULLABLE_STR}),
    }

    def __init__(self, parts: AdminParts) -> None:
        self._parts = parts

    @property
    def _sessions(self) -> SessionStore:
        if self._parts.dashboard_sessions is None:
            raise SessionsUnavailable()
        return self._parts.dashboard_sessions

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_LISTED) or DEFAULT_PAGE
        total, rows = self._sessions.live(limit)
        sessions = [{**r, 'created_at_iso': iso(r['created_at']), 'last_seen_at_iso': iso(r['last_seen_at']),
                     'expires_at_iso': iso(r['expires_at'])} for r in rows]
        resp.media = {'is_ok': True, 'total': total, 'sessions': sessions}

    def on_delete(self, req: falcon.Request, resp: falcon.Response) -> None:
        role = req.get_param('role')
        if role is not None and role not in ROLES:
            raise InvalidInput('role', f'must be one of {", ".join(ROLES)} (or left out: every session)')
        if read_body(req, MAX_DELETE_BODY).strip():
            raise BadRequest('DELETE /admin/dashboard/sessions takes no body: say ?role=admin or ?role=viewer '
                             'to end one role\'s sessions only')
        ended = self._sessions.end_all(role)
        resp.media = {'is_ok': True, 'ended': ended, 'role': role}
