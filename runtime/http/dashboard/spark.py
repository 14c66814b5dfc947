"""The Spark page (/dashboard/spark): pipelines and submitting one; jobs, their status, outputs and logs.

The page is a shell; ``spark.js`` works through the API mirror of the Spark admin routes
(``/dashboard/api/spark/...``, ``runtime.http.admin.spark``): the pipelines that can be
submitted, a page of jobs filtered by status and pipeline, one job with the tail of its driver
log, and submit and kill for an admin.
"""

from __future__ import annotations

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static

register_static('spark.js')


class SparkPage(DashboardPage):
    """GET /dashboard/spark."""

    template = 'spark.html'
    title = 'Spark'
    nav = 'spark'
    scripts = ('spark.js',)
