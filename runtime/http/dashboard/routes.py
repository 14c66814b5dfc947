"""Every dashboard route: the pages, sign-in and sign-out, static files, and the API mirror.

``PAGES`` lists each page's path and class; a page module adds its entries here (one line each).
The **API mirror** mounts every admin route ``/admin/X`` (``runtime.http.admin.routes.ROUTES``)
again at ``/dashboard/api/X``: the same resource class, an instance whose ``auth`` is
``DASHBOARD``, so the session gate (not Basic Auth) admits it and the audit log records the
dashboard user. A new admin route is thereby in the dashboard at once. Unknown paths under
/dashboard/api answer 404 JSON, and other unknown dashboard paths a 404 page, both only after
the session check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import ObjectNotFound
from runtime.http.admin.base import ADMIN_PREFIX
from runtime.http.admin.routes import ROUTES as ADMIN_ROUTES
from runtime.http.auth import DASHBOARD, PUBLIC
from runtime.http.dashboard import (
    audit,
    channels,
    deployments,
    overview,
    pubsub_pages,
    scheduler,
    security,
    services,
    spark,
)
from runtime.http.dashboard.gate import PREFIX
from runtime.http.dashboard.page import DashboardPage, PageNotFound
from runtime.http.dashboard.sign_in import SignInPage, SignOut
from runtime.http.dashboard.static import StaticResource

if TYPE_CHECKING:
    from runtime.http.dashboard.parts import DashboardParts

#: Where the admin API is mirrored for the dashboard's pages.
API_PREFIX = PREFIX + '/api'

#: Every page: (path, page class).
PAGES: tuple[tuple[str, type[DashboardPage]], ...] = (
    (PREFIX + '/', overview.OverviewPage),
    (PREFIX + '/services', services.ServicesPage),
    (PREFIX + '/services/{name}', services.ServicePage),
    (PREFIX + '/deployments', deployments.DeploymentsPage),
    (PREFIX + '/topics', pubsub_pages.TopicsPage),
    (PREFIX + '/topics/{name:path}', pubsub_pages.TopicPage),
    (PREFIX + '/queues', pubsub_pages.QueuesPage),
    (PREFIX + '/queues/{sub_id:int}', pubsub_pages.QueuePage),
    (PREFIX + '/dead-letters', pubsub_pages.DeadLettersPage),
    (PREFIX + '/audit', audit.AuditPage),
    (PREFIX + '/security', security.SecurityPage),
    (PREFIX + '/channels', channels.ChannelsPage),
    (PREFIX + '/file-channels/{name}', channels.FileChannelPage),
    (PREFIX + '/scheduler', scheduler.SchedulerPage),
    (PREFIX + '/spark', spark.SparkPage),
)


class _ToOverview:
    """GET /dashboard: to /dashboard/ (relative links of the pages need the slash)."""

    auth = PUBLIC
    openapi_hidden = True
    dashboard = True

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_308
        resp.location = PREFIX + '/'


class ApiNotFound:
    """Every path under /dashboard/api that mirrors no admin route: 404 JSON, after the session check."""

    auth = DASHBOARD
    openapi_hidden = True

    def _not_found(self, req: falcon.Request, resp: falcon.Response, **_: Any) -> None:
        raise ObjectNotFound('dashboard API path', req.path)

    on_get = on_post = on_put = on_patch = on_delete = on_head = on_options = _not_found


def mirror_path(admin_path: str) -> str:
    """The dashboard API path of an admin path."""
    return API_PREFIX + admin_path[len(ADMIN_PREFIX):]


def add_routes(app: falcon.App, parts: DashboardParts) -> None:
    """Mount the dashboard: pages, sign-in and sign-out, static files and the API mirror (after the admin routes)."""
    app.add_route(PREFIX, _ToOverview())
    for path, page_class in PAGES:
        app.add_route(path, page_class(parts))
    app.add_route(PREFIX + '/sign-in', SignInPage(parts))
    app.add_route(PREFIX + '/sign-out', SignOut(parts))
    app.add_route(PREFIX + '/static/{name}', StaticResource())
    for path, resource_class in ADMIN_ROUTES:
        resource = resource_class(parts.admin)
        resource.auth = DASHBOARD
        # Documented once, at its admin path.
        resource.openapi_hidden = True  # type: ignore[attr-defined]
        app.add_route(mirror_path(path), resource)
    api_not_found = ApiNotFound()
    app.add_route(API_PREFIX, api_not_found)
    app.add_route(API_PREFIX + '/{rest:path}', api_not_found)
    app.add_route(PREFIX + '/{rest:path}', PageNotFound(parts))
