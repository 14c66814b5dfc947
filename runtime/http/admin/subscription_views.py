"""How the admin API finds a subscription by id and shows it with its queue.

The subscription resources, the queue resources and a topic's details all show subscriptions the
same way; they share these helpers rather than importing one another.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import select

from runtime.db.blocking import run_transaction
from runtime.db.models import Subscription
from runtime.errors import SubscriptionNotFound
from runtime.http.openapi import BOOL, INT, STR, TIME, obj
from runtime.pubsub import admin_ops
from runtime.pubsub.registry import KINDS

if TYPE_CHECKING:
    from runtime.core import Runtime
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
            'origin': row.origin if row else 'api', 'created_at_iso': admin_ops.iso(row.created_at) if row else None,
            'queue_depth': stats['depth'], 'oldest_message': stats['oldest_message'],
            'dead_letters': stats['dead_letters']}


def sub_rows(conn: Any, ids: list[int] | None = None) -> dict[int, Any]:
    """Stored columns the registry does not hold (origin, creation time, options as given), by id."""
    query_ = select(Subscription.id, Subscription.origin, Subscription.created_at, Subscription.options)
    if ids is not None:
        if not ids:
            return {}
        query_ = query_.where(Subscription.id.in_(ids))
    return {r.id: r for r in conn.execute(query_).all()}


def find_sub(runtime: Runtime, sub_id: int) -> SubInfo:
    """A subscription by id, or SubscriptionNotFound naming the id."""
    broker = runtime.broker
    sub = broker.registry.subs.get(sub_id)
    if sub is None:
        broker.reload()  # made by another worker since the last sync
        sub = broker.registry.subs.get(sub_id)
    if sub is None:
        raise SubscriptionNotFound(f'subscription #{sub_id}')
    return sub


def sub_details(runtime: Runtime, sub: SubInfo) -> dict[str, Any]:
    """A subscription's view with its queue statistics read now."""
    stats, rows = run_transaction(runtime.engine, lambda c: (admin_ops.queue_stats(c, [sub.id]),
                                                             sub_rows(c, [sub.id])), write=False)
    return sub_view(sub, stats.get(sub.id), rows.get(sub.id))
