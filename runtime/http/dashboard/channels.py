"""The channels page (/dashboard/channels): REST channels, WebSocket subscribers and file channels.

REST channels are listed searched and paged (``GET /dashboard/api/channels``) and an admin creates,
edits and deletes them here; they take effect without a restart. WebSocket subscriptions (with
whether a client is attached, at ``/pubsub/ws``) and inbound file channels are shown as the admin
API lists them.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.channels import DATA_FORMATS
from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static
from runtime.service import HTTP_VERBS

register_static('channels.js')


class ChannelsPage(DashboardPage):
    """GET /dashboard/channels."""

    template = 'channels.html'
    title = 'Channels'
    nav = 'channels'
    scripts = ('channels.js',)

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        return {'data_formats': DATA_FORMATS, 'methods': sorted(HTTP_VERBS)}
