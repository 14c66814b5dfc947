"""Headers of every dashboard answer: a strict Content-Security-Policy, no framing, and the server time spent.

Scripts only from this server (no inline script, no eval), no plugins, no framing, forms and
fetches only to this server. Styles may be inline because plotly.js sets them on the charts it
draws. Pages and API answers are never cached (they hold CSRF tokens and live data); static files
set their own caching. ``Server-Timing: app;dur=<ms>`` says how long the server took, which
``bench/dashboard.py`` reads.
"""

from __future__ import annotations

import time
from typing import Any

import falcon

from runtime.http.auth import DASHBOARD
from runtime.http.dashboard.gate import PREFIX

#: The Content-Security-Policy of every dashboard answer.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "font-src 'self'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")


def _is_dashboard(req: falcon.Request, resource: Any) -> bool:
    return (getattr(resource, 'auth', None) == DASHBOARD or getattr(resource, 'dashboard', False)
            or req.path == PREFIX or req.path.startswith(PREFIX + '/'))


class DashboardHeaders:
    """Middleware: security headers and Server-Timing on every dashboard answer."""

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.started_at = time.perf_counter()

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         req_succeeded: bool) -> None:
        if not _is_dashboard(req, resource):
            return
        resp.set_header('Content-Security-Policy', CSP)
        resp.set_header('X-Frame-Options', 'DENY')
        resp.set_header('X-Content-Type-Options', 'nosniff')
        resp.set_header('Referrer-Policy', 'same-origin')
        if resp.get_header('Cache-Control') is None:
            resp.set_header('Cache-Control', 'no-store')
        started = getattr(req.context, 'started_at', None)
        if started is not None:
            resp.set_header('Server-Timing', f'app;dur={(time.perf_counter() - started) * 1000:.1f}')
