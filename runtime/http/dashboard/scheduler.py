"""The scheduler page (/dashboard/scheduler): jobs, next runs, run history; run now, pause, resume, edit.

The page is a shell; ``scheduler.js`` reads and changes jobs through the API mirror of the
scheduler's admin routes (``/dashboard/api/jobs...``, ``runtime.http.admin.jobs``): a page of
jobs searched by the server, one job with its latest runs, and the changes an admin makes.
"""

from __future__ import annotations

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static

register_static('scheduler.js')


class SchedulerPage(DashboardPage):
    """GET /dashboard/scheduler."""

    template = 'scheduler.html'
    title = 'Scheduler'
    nav = 'scheduler'
    scripts = ('scheduler.js',)
