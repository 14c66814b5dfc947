"""The reference of the REST benchmark: a bare falcon app that answers a JSON body back.

Run by ``bench/rest.py`` under gunicorn's gevent worker, as Conduit is::

    gunicorn -k gevent -w 1 -b 127.0.0.1:8000 bench.bare_falcon_app:app
"""

from __future__ import annotations

import falcon


class Echo:
    """POST a JSON document, get it back."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Answer the request's JSON body."""
        resp.media = req.get_media()


app = falcon.App()
app.add_route('/api/echo', Echo())
