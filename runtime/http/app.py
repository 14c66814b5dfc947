"""The falcon app of one worker: health, admin API and channels over a runtime."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import falcon
from sqlalchemy import text

from runtime.core import admin_password
from runtime.http import admin, errors
from runtime.http.channel_sink import ChannelSink
from runtime.invoke import new_cid

if TYPE_CHECKING:
    from runtime.core import Runtime

#: Response header carrying the request's correlation id.
CID_HEADER = 'X-Conduit-CID'


class _CidMiddleware:
    """Gives every request a cid and returns it in a header."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.cid = new_cid()
        resp.set_header(CID_HEADER, req.context.cid)


class HealthResource:
    """GET /health: 200 when the database answers, 503 otherwise."""

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
    app = falcon.App(middleware=[_CidMiddleware(), auth], **kwargs)
    app.req_options.strip_url_path_trailing_slash = False
    errors.install(app)
    app.add_route('/health', HealthResource(runtime))
    admin.add_routes(app, runtime)
    app.add_sink(ChannelSink(runtime), prefix='/')
    return app
