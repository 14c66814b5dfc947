"""The security page (/dashboard/security): Basic Auth definitions, their pub/sub permissions, a pattern tester.

The page script lists definitions (searched and paged by ``GET /dashboard/api/security``); for the
one picked it shows and edits its ``pub=``/``sub=`` permissions, changes its password and
activates or deactivates it (an admin only); the pattern tester asks
``GET /dashboard/api/pubsub/topic-matches`` which existing topics a pattern matches.
"""

from __future__ import annotations

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static

register_static('security.js')


class SecurityPage(DashboardPage):
    """GET /dashboard/security."""

    template = 'security.html'
    title = 'Security'
    nav = 'security'
    scripts = ('security.js',)
