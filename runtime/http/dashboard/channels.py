"""The channels pages: the list (/dashboard/channels) and one inbound file channel (/dashboard/file-channels/{name}).

REST channels are listed searched and paged (``GET /dashboard/api/channels``) and an admin creates,
edits and deletes them here; they take effect without a restart. WebSocket subscriptions (with
whether a client is attached, at ``/pubsub/ws``) and inbound file channels are shown as the admin
API lists them; each file channel's name links to its own page.

A file channel's page shows its definition and its runs (the files it processed, most recent first,
paged and filtered by state, with the reason a file failed) through the API mirror of
``/admin/file-channels/{name}[/runs]``; the shell carries only the channel's name, and an unknown
one is a 404 page naming it, as on the other pages of one object.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.channels.rest import DATA_FORMATS
from runtime.errors import ObjectNotFound
from runtime.files.admin import KIND as FILE_CHANNEL_KIND
from runtime.files.admin import RUN_STATES
from runtime.files.definition import MAX_NAME_CHARS
from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static
from runtime.service.base import HTTP_VERBS

for _name in ('channels.js', 'file_channel.js'):
    register_static(_name)


class ChannelsPage(DashboardPage):
    """GET /dashboard/channels."""

    template = 'channels.html'
    title = 'Channels'
    nav = 'channels'
    scripts = ('channels.js',)

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        return {'data_formats': DATA_FORMATS, 'methods': sorted(HTTP_VERBS)}


class FileChannelPage(DashboardPage):
    """GET /dashboard/file-channels/{name}: an inbound file channel's definition and runs, with why files failed."""

    template = 'file_channel.html'
    title = 'File channel'
    nav = 'channels'
    # pubsub.js for PubSub.summary: the definition is shown as the topic and queue pages show theirs.
    scripts = ('pubsub.js', 'file_channel.js')

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        name: str = params['name']
        if len(name) > MAX_NAME_CHARS:
            # No channel can have such a name: not looked up, and not repeated in full on the 404 page.
            raise ObjectNotFound(FILE_CHANNEL_KIND, name[:60] + '…')
        channel = self.parts.admin.file_channel_admin.get(name)  # ObjectNotFound: a 404 page naming it
        return {'channel_name': channel.name, 'run_states': RUN_STATES, 'title': f'File channel {channel.name}'}
