"""How the admin API shows a subscription with its queue.

The subscription resources, the queue resources and a topic's details all show subscriptions the
same way; they share these helpers rather than importing one another. Finding a subscription and
reading its queue is ``runtime.pubsub.topic_admin`` and ``runtime.pubsub.queue_admin``'s work.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from runtime.http.openapi import BOOL, INT, STR, TIME, obj
from runtime.pubsub.registry import KINDS
from runtime.timefmt import iso

if TYPE_CHECKING:
    from runtime.pubsub.queue_admin import QueueAdmin
    from runtime.pubsub.registry import SubInfo

#: OpenAPI schema of a queue's oldest message (null for an empty queue).
OLDEST = {'oneOf': [{'type': 'null'}, obj({'msg_id': STR, 'pub_time_iso': TIME, 'age_secs': {'type': 'number'}},
                                          additional=True)]}
#: OpenAPI schema of a subscription as sub_view shows it.
SUBSCRIPTION = obj({'id': INT, 'topic': STR, 'kind': {'enum': list(KINDS)}, 'service': STR, 'security': STR,
                    'push_url': STR, 'is_active': BOOL, 'options': obj(additional=True), 'origin': STR,
                    'created_at_iso': TIME, 'queue_depth': INT, 'oldest_message': OLDEST, 'dead_letters': INT},
                   required=['id', 'topic', 'kind', 'is_active'], additional=True)


def _safe_url(url: str) -> str:
    """A push URL fit to show: a password in it replaced by ***."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition('@')[2]
    return urlunsplit(parts._replace(netloc=f'{parts.username}:***@{host}'))


def sub_view(sub: SubInfo, stats: dict[str, Any] | None, row: Any) -> dict[str, Any]:
    """A subscription with its queue statistics, as the admin API shows it (never the sub_key)."""
    stats = stats or {'depth': 0, 'oldest_message': None, 'dead_letters': 0}
    return {'id': sub.id, 'topic': sub.pattern, 'kind': sub.kind, 'service': sub.service, 'security': sub.security,
            'push_url': _safe_url(sub.push_url), 'is_active': sub.is_active, 'options': asdict(sub.options),
            'origin': row.origin if row else 'api', 'created_at_iso': iso(row.created_at) if row else None,
            'queue_depth': stats['depth'], 'oldest_message': stats['oldest_message'],
            'dead_letters': stats['dead_letters']}


def sub_details(queues: QueueAdmin, sub: SubInfo) -> dict[str, Any]:
    """A subscription's view with its queue statistics read now."""
    stats, rows = queues.subscription_stats([sub.id])
    return sub_view(sub, stats.get(sub.id), rows.get(sub.id))
