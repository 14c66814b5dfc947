"""Table columns that several command groups print: subscriptions with their queues.

``topic show``, ``sub list`` and ``queue list`` show subscriptions the same way.
"""

from __future__ import annotations

from typing import Any

#: (title, key) columns of a subscription table.
SUB_COLUMNS = [('id', 'id'), ('topic', 'topic'), ('kind', 'kind'), ('subscriber', 'subscriber'),
               ('active', 'is_active'), ('depth', 'queue_depth'), ('oldest', 'oldest_message.pub_time_iso'),
               ('dead', 'dead_letters')]
#: Columns of subscription tables users copy from: never shortened.
SUB_NAMES = ('id', 'topic', 'subscriber')


def with_subscriber(subs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Subscriptions with one 'subscriber' column: the service, security definition or push URL."""
    return [{**s, 'subscriber': s.get('service') or s.get('security') or s.get('push_url') or None} for s in subs]
