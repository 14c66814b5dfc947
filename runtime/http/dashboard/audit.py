"""The audit page (/dashboard/audit): who changed what and when, from the dashboard, the API, the CLI or files.

The page script reads ``GET /dashboard/api/audit`` (filtered by kind, actor and source, a page at
a time) and shows each entry's object before and after the change side by side.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static
from runtime.observability.audit import SOURCES

register_static('audit.js')


class AuditPage(DashboardPage):
    """GET /dashboard/audit: the audit log, newest first."""

    template = 'audit.html'
    title = 'Audit log'
    nav = 'audit'
    scripts = ('audit.js',)

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        return {'sources': SOURCES}
