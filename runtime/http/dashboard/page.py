"""The base of every dashboard page: a server-rendered shell (layout, nav, user) that a page script fills.

A page subclasses ``DashboardPage``, sets ``template`` (a file in templates/ extending
``layout.html``), ``title``, ``nav`` (the key of the NAV entry it lights) and ``scripts`` (static
files it needs after ``dashboard.js``), and overrides ``context`` for its own template variables.
Every template gets ``user``, ``can_write``, ``csrf_token``, ``nav``, ``active``, ``title`` and
``scripts``. A ``ConduitError`` raised by ``context`` (an unknown topic...) is shown as an error
page with its status and message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import ConduitError, ObjectNotFound
from runtime.http.auth import DASHBOARD
from runtime.http.dashboard.static import static_url
from runtime.http.dashboard.templating import render

if TYPE_CHECKING:
    from runtime.http.dashboard.gate import DashboardUser
    from runtime.http.dashboard.parts import DashboardParts

#: The navigation: (key, label, path), in the order shown.
NAV: tuple[tuple[str, str, str], ...] = (
    ('overview', 'Overview', '/dashboard/'),
    ('services', 'Services', '/dashboard/services'),
    ('topics', 'Topics', '/dashboard/topics'),
    ('queues', 'Queues', '/dashboard/queues'),
    ('dead-letters', 'Dead letters', '/dashboard/dead-letters'),
    ('security', 'Security', '/dashboard/security'),
    ('channels', 'Channels', '/dashboard/channels'),
    ('scheduler', 'Scheduler', '/dashboard/scheduler'),
    ('spark', 'Spark', '/dashboard/spark'),
    ('deployments', 'Deployments', '/dashboard/deployments'),
    ('audit', 'Audit', '/dashboard/audit'),
)

#: HTML content type of every page.
HTML = 'text/html; charset=utf-8'


def base_context(user: DashboardUser, title: str, active: str = '', scripts: tuple[str, ...] = ()) -> dict[str, Any]:
    """The variables every page template gets."""
    return {'user': user, 'can_write': user.can_write, 'csrf_token': user.csrf_token, 'nav': NAV,
            'active': active, 'title': title,
            'scripts': [static_url(name) for name in ('dashboard.js', *scripts)]}


class DashboardPage:
    """Base of every page: GET renders ``template`` with the base context and ``context()``."""

    auth = DASHBOARD
    openapi_hidden = True
    #: Without a session, a GET is sent to the sign-in form (not answered 401).
    dashboard_page = True
    template = ''
    title = ''
    nav = ''
    scripts: tuple[str, ...] = ()

    def __init__(self, parts: DashboardParts) -> None:
        self.parts = parts

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        """This page's own template variables (params: the route's URI fields)."""
        return {}

    def on_get(self, req: falcon.Request, resp: falcon.Response, **params: Any) -> None:
        user: DashboardUser = req.context.dashboard_user
        resp.content_type = HTML
        try:
            extra = self.context(req, **params)
        except ConduitError as e:
            resp.status = falcon.code_to_http_status(e.http_status)
            resp.text = render('error.html', **base_context(user, 'Error', self.nav), status=resp.status,
                               message=e.details)
            return
        context = base_context(user, extra.pop('title', self.title), self.nav, self.scripts)
        context.update(extra)
        resp.text = render(self.template, **context)


class PageNotFound(DashboardPage):
    """Every /dashboard path nothing else serves: a 404 page, shown only to a signed-in user."""

    title = 'Not found'

    def on_get(self, req: falcon.Request, resp: falcon.Response, **params: Any) -> None:
        user: DashboardUser = req.context.dashboard_user
        resp.content_type = HTML
        resp.status = falcon.HTTP_404
        resp.text = render('error.html', **base_context(user, 'Not found'), status=resp.status,
                           message=f'there is no dashboard page at {req.path}')

    def _json_404(self, req: falcon.Request, resp: falcon.Response, **params: Any) -> None:
        raise ObjectNotFound('dashboard page', req.path)

    on_post = on_put = on_patch = on_delete = _json_404
