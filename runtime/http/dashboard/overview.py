"""The overview page (/dashboard/): servers and workers, totals, live rates of the last hour, deepest queues.

A shell: ``overview.js`` fills it from the API mirror (``/workers``, ``/stats/totals``,
``/stats/rates``, ``/queues/deepest``) and refreshes it with ``Dash.poll``; the chart is drawn by
plotly.js, served from the installed ``plotly`` package.
"""

from __future__ import annotations

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static


class OverviewPage(DashboardPage):
    """GET /dashboard/: where the dashboard starts."""

    template = 'overview.html'
    title = 'Overview'
    nav = 'overview'
    scripts = ('plotly.min.js', 'overview.js')


register_static('overview.js')
