"""The overview page (/dashboard/): a placeholder until the overview of servers, totals and rates lands."""

from __future__ import annotations

from runtime.http.dashboard.page import DashboardPage


class OverviewPage(DashboardPage):
    """GET /dashboard/: where the dashboard starts."""

    template = 'overview.html'
    title = 'Overview'
    nav = 'overview'
