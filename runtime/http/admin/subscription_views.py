"""How the admin API shows a subscription with its queue, and a WebSocket subscription with its client.

The subscription resources, the queue resources, a topic's details and the WebSocket list all show
subscriptions the same way; they share these helpers rather than importing one another. Finding a
subscription and reading its queue and client is ``runtime.pubsub.subscription_admin`` and
``runtime.pubsub.queue_admin``'s work. No view carries a sub_key: it is a secret, shown once, when
the subscription is made.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from runtime.http.openapi import BOOL, INT, NUM, STR, TIME, obj
from runtime.pubsub.subscribers import KIND_FILE, KIND_WEBSOCKET, SUBSCRIBER_KINDS
from runtime.util.timefmt import iso, iso_or_none
from runtime.util.urls import shown_target

if TYPE_CHECKING:
    from runtime.pubsub.queue_admin import QueueAdmin
    from runtime.pubsub.registry import SubInfo

#: OpenAPI schema of a queue's oldest message (null for an empty queue).
OLDEST = {'oneOf': [{'type': 'null'}, obj({'msg_id': STR, 'pub_time_iso': TIME, 'age_secs': {'type': 'number'}},
                                          additional=True)]}
_NULLABLE_NUM = {'type': ['number', 'null']}
#: The client fields of a WebSocket subscription, as client_fields shows them.
_CLIENT_FIELDS = {
    'connected': {**BOOL, 'description': 'Whether a client is attached to a worker now'},
    'owner': {**STR, 'description': "The worker holding the client ('' when none is attached)"},
    'peer': {**STR, 'description': "The client's address, as its worker saw it"},
    'window': {**INT, 'description': 'Most unacked messages the client may hold (delivery_batch_size)'},
    'in_flight': {**INT, 'description': "Unacked messages the client holds, as of its worker's last heartbeat"},
    'connected_at': _NULLABLE_NUM, 'connected_at_iso': TIME,
    'last_active_at': NUM, 'last_active_at_iso': TIME,
    'idle_secs': {**NUM, 'description': 'Seconds since the last activity (attach, ack, heartbeat while attached)'},
}
#: OpenAPI schema of the client of a WebSocket subscription (null in a view of another kind).
CLIENT = {'oneOf': [{'type': 'null'}, obj(_CLIENT_FIELDS, additional=True)]}
#: OpenAPI schema of a subscription as sub_view shows it.
SUBSCRIPTION = obj({'id': INT, 'topic': STR, 'kind': {'enum': list(SUBSCRIBER_KINDS.names)}, 'service': STR,
                    'security': STR, 'push_url': STR, 'is_active': BOOL, 'options': obj(additional=True), 'origin': STR,
                    'created_at_iso': TIME, 'queue_depth': INT, 'oldest_message': OLDEST, 'dead_letters': INT,
                    'client': {**CLIENT, 'description': 'WebSocket subscriptions only: the client, if it has a row'},
                    'target': {**STR, 'description': 'File subscriptions only: where files are written (push_url), '
                                                     'without credentials'}},
                   required=['id', 'topic', 'kind', 'is_active'], additional=True)
#: OpenAPI schema of a WebSocket subscription with its client, as websocket_view shows it.
WEBSOCKET = obj({'sub_id': INT, 'security': STR, 'pattern': STR, 'is_active': BOOL, 'queue_depth': INT,
                 **_CLIENT_FIELDS},
                required=['sub_id', 'security', 'pattern', 'connected', 'window', 'in_flight', 'queue_depth'],
                additional=True)


def _safe_url(url: str) -> str:
    """A push URL fit to show: a password in it replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition('@')[2]
    return urlunsplit(parts._replace(netloc=f'{parts.username}:***@{host}'))


def client_fields(client: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """A WebSocket client as the admin API shows it: times also in ISO 8601, and its idle time."""
    now = time.time() if now is None else now
    return {'connected': client['connected'], 'owner': client['owner'], 'peer': client['peer'],
            'window': client['window'], 'in_flight': client['in_flight'],
            'connected_at': client['connected_at'], 'connected_at_iso': iso_or_none(client['connected_at']),
            'last_active_at': client['last_active_at'], 'last_active_at_iso': iso(client['last_active_at']),
            'idle_secs': round(max(0.0, now - client['last_active_at']), 3)}


def websocket_view(client: dict[str, Any], now: float | None = None) -> dict[str, Any]:
    """A WebSocket subscription with its client, from a row of the kind's ``websocket_clients`` (never the sub_key)."""
    return {'sub_id': client['sub_id'], 'security': client['security'], 'pattern': client['pattern'],
            'is_active': client['is_active'], 'queue_depth': client['queue_depth'], **client_fields(client, now)}


def sub_view(sub: SubInfo, stats: dict[str, Any] | None, row: Any,
             client: dict[str, Any] | None = None) -> dict[str, Any]:
    """A subscription with its queue statistics, as the admin API shows it (never the sub_key).

    A WebSocket subscription also shows its client (``client``: null if its row is missing), and a file
    subscription its target (``target``: file:///dir or sftp://user@host:port/dir).
    """
    stats = stats or {'depth': 0, 'oldest_message': None, 'dead_letters': 0}
    view = {'id': sub.id, 'topic': sub.pattern, 'kind': sub.kind, 'service': sub.service, 'security': sub.security,
            'push_url': _safe_url(sub.push_url), 'is_active': sub.is_active,
            'options': SUBSCRIBER_KINDS.options.flat(sub.options),
            'origin': row.origin if row else 'api', 'created_at_iso': iso(row.created_at) if row else None,
            'queue_depth': stats['depth'], 'oldest_message': stats['oldest_message'],
            'dead_letters': stats['dead_letters']}
    if sub.kind == KIND_WEBSOCKET:
        view['client'] = client_fields(client) if client else None
    elif sub.kind == KIND_FILE:
        view['target'] = shown_target(sub.push_url)
    return view


def sub_views(queues: QueueAdmin, subs: list[SubInfo], stats: dict[int, dict[str, Any]],
              rows: dict[int, Any]) -> list[dict[str, Any]]:
    """Subscriptions with their queue statistics; the clients of the WebSocket ones are read now."""
    clients = queues.websocket_clients_of([s.id for s in subs if s.kind == KIND_WEBSOCKET])
    return [sub_view(s, stats.get(s.id), rows.get(s.id), clients.get(s.id)) for s in subs]


def sub_details(queues: QueueAdmin, sub: SubInfo) -> dict[str, Any]:
    """A subscription's view with its queue statistics (and, for a WebSocket one, its client) read now."""
    stats, rows = queues.subscription_stats([sub.id])
    return sub_views(queues, [sub], stats, rows)[0]
