"""How the admin API shows a subscription with its queue, and what its kind adds to it.

The subscription resources, the queue resources and a topic's details all show subscriptions the
same way; they share these helpers rather than importing one another. Finding a subscription and
reading its queue is ``runtime.pubsub.subscription_admin`` and ``runtime.pubsub.queue_admin``'s
work; the fields a kind adds (a WebSocket subscription's client, a file subscription's target) are
the kind's (``KindHooks.admin_fields``). No view carries a sub_key: it is a secret, shown once, when
the subscription is made.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from runtime.http.openapi import BOOL, INT, NUM, STR, TIME, obj
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
from runtime.util.timefmt import iso

if TYPE_CHECKING:
    from runtime.pubsub.kinds import Kinds
    from runtime.pubsub.queue_admin import QueueAdmin
    from runtime.pubsub.registry import SubInfo

#: OpenAPI schema of a queue's oldest message (null for an empty queue).
OLDEST = {'oneOf': [{'type': 'null'}, obj({'msg_id': STR, 'pub_time_iso': TIME, 'age_secs': {'type': 'number'}},
                                          additional=True)]}
_NULLABLE_NUM = {'type': ['number', 'null']}
#: The client fields of a WebSocket subscription, as its kind shows them (``shown_client``).
CLIENT_FIELDS = {
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
CLIENT = {'oneOf': [{'type': 'null'}, obj(CLIENT_FIELDS, additional=True)]}
#: OpenAPI schema of a subscription as sub_view shows it.
SUBSCRIPTION = obj({'id': INT, 'topic': STR, 'kind': {'enum': list(SUBSCRIBER_KINDS.names)}, 'service': STR,
                    'security': STR, 'push_url': STR, 'is_active': BOOL, 'options': obj(additional=True), 'origin': STR,
                    'created_at_iso': TIME, 'queue_depth': INT, 'oldest_message': OLDEST, 'dead_letters': INT,
                    'client': {**CLIENT, 'description': 'WebSocket subscriptions only: the client, if it has a row'},
                    'target': {**STR, 'description': 'File subscriptions only: where files are written (push_url), '
                                                     'without credentials'}},
                   required=['id', 'topic', 'kind', 'is_active'], additional=True)


def _safe_url(url: str) -> str:
    """A push URL fit to show: a password in it replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition('@')[2]
    return urlunsplit(parts._replace(netloc=f'{parts.username}:***@{host}'))


def sub_view(sub: SubInfo, stats: dict[str, Any] | None, row: Any, fields: dict[str, Any] | None = None,
             kinds: Kinds = SUBSCRIBER_KINDS) -> dict[str, Any]:
    """A subscription with its queue statistics and the fields its kind adds, as the admin API shows it.

    Never the sub_key. fields: what the kind's ``admin_fields`` gave for sub (``kind_fields``).
    """
    stats = stats or {'depth': 0, 'oldest_message': None, 'dead_letters': 0}
    view = {'id': sub.id, 'topic': sub.pattern, 'kind': sub.kind, 'service': sub.service, 'security': sub.security,
            'push_url': _safe_url(sub.push_url), 'is_active': sub.is_active,
            'options': kinds.options.flat(sub.options),
            'origin': row.origin if row else 'api', 'created_at_iso': iso(row.created_at) if row else None,
            'queue_depth': stats['depth'], 'oldest_message': stats['oldest_message'],
            'dead_letters': stats['dead_letters']}
    return view | (fields or {})


def kind_fields(queues: QueueAdmin, subs: list[SubInfo], kinds: Kinds = SUBSCRIBER_KINDS) -> dict[int, dict[str, Any]]:
    """The fields each subscription's kind adds to its view, by subscription id."""
    by_kind: dict[str, list[SubInfo]] = {}
    for sub in subs:
        # A kind the server does not register has no plug-in to ask: its subscriptions get no extra field.
        if sub.kind in kinds:
            by_kind.setdefault(sub.kind, []).append(sub)
    fields: dict[int, dict[str, Any]] = {}
    for kind, of_kind in by_kind.items():
        # One call per kind, not per subscription, so that a kind reads what it shows of a page at once.
        shown = kinds.plugin(kind).admin_fields(queues.read, of_kind)
        fields.update((sub.id, shown[sub.id]) for sub in of_kind if sub.id in shown)
    return fields


def sub_views(queues: QueueAdmin, subs: list[SubInfo], stats: dict[int, dict[str, Any]],
              rows: dict[int, Any], kinds: Kinds = SUBSCRIBER_KINDS) -> list[dict[str, Any]]:
    """Subscriptions with their queue statistics; what their kinds add is read now."""
    fields = kind_fields(queues, subs, kinds)
    return [sub_view(s, stats.get(s.id), rows.get(s.id), fields.get(s.id), kinds) for s in subs]


def sub_details(queues: QueueAdmin, sub: SubInfo, kinds: Kinds = SUBSCRIBER_KINDS) -> dict[str, Any]:
    """A subscription's view with its queue statistics (and what its kind adds) read now."""
    stats, rows = queues.subscription_stats([sub.id])
    return sub_views(queues, [sub], stats, rows, kinds)[0]
