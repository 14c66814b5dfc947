"""Administration of subscriptions: list, read, change, delete, and whether a pattern names a topic.

What the admin API and the dashboard do with subscriptions, without HTTP; topics are
``runtime.pubsub.topic_admin``'s. Subscribing, pausing and resuming stay the catalog's
(``Catalog.subscribe``, ``Catalog.set_active``): a service, a pull client and a WebSocket client
subscribe through it too, and the admin API's checks of a new subscription's kind and endpoint
need the catalog's kinds anyway. ``delete`` is the catalog's ``unsubscribe`` of a subscription
named by its id, as an operator names it (the sub_key is a secret).

Every change is one transaction that bumps the ``pubsub`` sync key (``runtime.cluster.sync.write_and_reload``),
so every worker of every server reloads it within ``sync.interval_secs``; this worker reloads at
once. A lookup that misses reloads first: the subscription may have been made by another worker
since the last sync.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, update

from runtime.cluster.sync import write_and_reload
from runtime.db.blocking import run_transaction
from runtime.db.models import Subscription
from runtime.errors import SubscriptionNotFound
from runtime.objects.checks import topic_missing
from runtime.pubsub.catalog import SYNC_KEY
from runtime.pubsub.queue_statements import subscription_rows
from runtime.pubsub.registry import parse_options

if TYPE_CHECKING:
    from runtime.pubsub.catalog import Catalog
    from runtime.pubsub.registry import Registry, SubInfo


def update_subscription(conn: Connection, sub_id: int, values: dict[str, Any]) -> None:
    """Change a subscription's stored columns (already validated)."""
    conn.execute(update(Subscription).where(Subscription.id == sub_id).values(**values))


class SubscriptionAdmin:
    """Finds subscriptions, changes their stored columns and deletes them.

    ``registry`` returns this worker's current topics and subscriptions (a reload replaces them),
    ``reload`` reloads them from the database, and ``catalog`` unsubscribes.
    """

    def __init__(self, engine: Engine, registry: Callable[[], Registry], reload: Callable[[], None],
                 catalog: Catalog) -> None:
        self._engine = engine
        self._registry = registry
        self._reload = reload
        self._catalog = catalog

    # Lookups

    def list(self, topic: str | None = None, kind: str | None = None) -> list[SubInfo]:
        """Subscriptions by id: all, or those matching a topic name or pattern, and of a kind."""
        registry = self._registry()
        subs = registry.all_subscribers(topic) if topic else list(registry.subs.values())
        return sorted((s for s in subs if not kind or s.kind == kind), key=lambda s: s.id)

    def get(self, sub_id: int) -> SubInfo:
        """A subscription by id, or SubscriptionNotFound naming the id."""
        sub = self._registry().subs.get(sub_id)
        if sub is None:
            self._reload()  # made by another worker since the last sync
            sub = self._registry().subs.get(sub_id)
        if sub is None:
            raise SubscriptionNotFound(f'subscription #{sub_id}')
        return sub

    def stored_options(self, sub_id: int) -> dict[str, Any]:
        """A subscription's delivery options as given (not merged with the defaults); {} if it went."""
        row = run_transaction(self._engine, lambda c: subscription_rows(c, [sub_id]), write=False).get(sub_id)
        return parse_options(row.options) if row else {}

    def topic_missing(self, pattern: str) -> bool:
        """Whether a subscription to pattern would name no topic (a plain name no topic has)."""
        return run_transaction(self._engine, lambda c: topic_missing(c, pattern), write=False)

    # Changes

    def update(self, sub_id: int, values: dict[str, Any]) -> None:
        """Change a subscription's stored columns (already validated); nothing is written when there are none."""
        if values:
            write_and_reload(self._engine, SYNC_KEY, lambda c: update_subscription(c, sub_id, values), self._reload)

    def delete(self, sub_id: int) -> SubInfo:
        """Unsubscribe (the subscription goes with its queue and dead letters); what it was. SubscriptionNotFound."""
        sub = self.get(sub_id)
        self._catalog.unsubscribe(sub.sub_key)
        return sub
