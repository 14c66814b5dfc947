"""The admin API of WebSocket subscribers: ``GET /admin/pubsub/websockets``.

Every WebSocket subscription of every worker, with its client: whether one is attached and to
which worker (``owner``, the worker's lease-owner id), the client's address, its window (most
unacked messages it may hold), the unacked messages it holds, its queue depth and its last
activity (times as UNIX seconds and ISO 8601, and ``idle_secs``). ``?security=`` keeps one
security definition's, ``?connected=true|false`` those with or without a client attached;
``totals`` counts what is listed. ``definitions`` counts each security definition's subscriptions
(``?security=`` applies, ``?connected=`` does not: the count is what the limit is checked against),
and ``max_per_definition`` is that limit (``[websocket] max_subscriptions_per_definition``; 0: none).

The rows are what the workers last wrote (``runtime.pubsub.queue_admin.QueueAdmin.websocket_clients``
says how fresh). No sub_key is shown: it is a secret, given once to the client that subscribed
(the numeric ``sub_id`` names the subscription in ``/admin/subscriptions/{id}`` and ``/admin/queues/{id}``).
"""

from __future__ import annotations

import time
from typing import Any

import falcon

from runtime.errors import InvalidInput
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import has_bad_chars
from runtime.http.admin.subscription_views import CLIENT_FIELDS
from runtime.http.openapi import BOOL, INT, STR, arr, obj, operation, query, string
from runtime.pubsub.subscribers import shown_client

_T = ['admin: pub/sub']

#: OpenAPI schema of a WebSocket subscription with its client, as websocket_view shows it.
WEBSOCKET = obj({'sub_id': INT, 'security': STR, 'pattern': STR, 'is_active': BOOL, 'queue_depth': INT,
                 **CLIENT_FIELDS},
                required=['sub_id', 'security', 'pattern', 'connected', 'window', 'in_flight', 'queue_depth'],
                additional=True)


def websocket_view(client: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """A WebSocket subscription with its client, from a row of the kind's ``websocket_clients`` (never the sub_key)."""
    return {'sub_id': client['sub_id'], 'security': client['security'], 'pattern': client['pattern'],
            'is_active': client['is_active'], 'queue_depth': client['queue_depth'], **shown_client(client, now)}


class WebSocketsResource(AdminResource):
    """GET /admin/pubsub/websockets: every WebSocket subscription with its client, and totals."""

    openapi = {'get': operation(
        'List WebSocket subscriptions with their client: connected, worker, peer, window, in flight, last activity',
        tags=_T, errors=(400,),
        params=[query('security', string(200), 'Only the subscriptions of this security definition'),
                query('connected', BOOL, 'Only those with a client attached (true) or without one (false)')],
        response={'websockets': arr(WEBSOCKET),
                  'totals': obj({'subscriptions': INT, 'connected': INT}, required=['subscriptions', 'connected']),
                  'definitions': arr(obj({'security': string(200), 'subscriptions': INT, 'connected': INT},
                                         required=['security', 'subscriptions', 'connected'])),
                  'max_per_definition': INT})}

    def __init__(self, parts: AdminParts) -> None:
        self._queues = parts.queue_admin
        self._limit = parts.settings.websocket.max_subscriptions_per_definition

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        security = req.get_param('security')
        if security is not None and (len(security) > 200 or has_bad_chars(security)):
            raise InvalidInput('security', 'must be a security definition name: at most 200 characters, '
                                           'without control characters')
        connected = req.get_param_as_bool('connected')
        now = time.time()
        clients = self._queues.websocket_clients(security)
        definitions: dict[str, dict[str, Any]] = {}
        for c in clients:
            counts = definitions.setdefault(c['security'], {'security': c['security'], 'subscriptions': 0,
                                                           'connected': 0})
            counts['subscriptions'] += 1
            counts['connected'] += bool(c['connected'])
        views = [websocket_view(c, now) for c in clients if connected is None or c['connected'] == connected]
        resp.media = {'is_ok': True, 'websockets': views,
                      'totals': {'subscriptions': len(views), 'connected': sum(v['connected'] for v in views)},
                      'definitions': sorted(definitions.values(), key=lambda d: (-d['subscriptions'], d['security'])),
                      'max_per_definition': self._limit}
