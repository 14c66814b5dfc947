"""Administration of topics and subscriptions: finding them, changing their attributes, deleting topics.

Creating topics and subscribing, unsubscribing, pausing and resuming belong to the catalog (the
broker's methods of those names); this module holds the rest of what an operator does to them.

Every change is one transaction that bumps the ``pubsub`` sync key (``runtime.cluster.sync.write_and_reload``),
so every worker of every server reloads it within ``sync.interval_secs``; this worker reloads at
once. A lookup that misses reloads first: the object may have been made by another worker since
the last sync. Nothing here knows HTTP.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, delete, select, update

from runtime.cluster.sync import write_and_reload
from runtime.db.blocking import run_transaction
from runtime.db.models import Message, Subscription, Topic
from runtime.errors import SubscriptionNotFound, TopicNotFound
from runtime.objects.checks import topic_missing
from runtime.pubsub import statements
from runtime.pubsub.catalog import SYNC_KEY
from runtime.pubsub.queue_statements import subscription_rows
from runtime.pubsub.registry import parse_options
from runtime.pubsub.topics import matching_names, normalize

if TYPE_CHECKING:
    from runtime.pubsub.registry import Registry, SubInfo, TopicInfo


def update_topic(conn: Connection, topic_id: int, attrs: dict[str, Any]) -> None:
    """Change a topic's attributes (already validated)."""
    conn.execute(update(Topic).where(Topic.id == topic_id).values(**attrs))


def delete_topic(conn: Connection, topic_id: int, name: str) -> dict[str, int]:
    """Remove a topic, the subscriptions to exactly it (with their queues) and the messages waiting in it.

    Pattern subscriptions stay (they may match other topics); messages already in their queues stay too.
    """
    key = normalize(name)
    exact = [r.id for r in conn.execute(select(Subscription.id, Subscription.pattern)).all()
             if normalize(r.pattern) == key]
    for sub_id in exact:
        statements.delete_subscription(conn, sub_id)
    waiting = conn.execute(delete(Message).where(Message.topic_id == topic_id, Message.in_topic.is_(True))).rowcount
    conn.execute(delete(Topic).where(Topic.id == topic_id))
    return {'subscriptions_deleted': len(exact), 'messages_deleted': waiting}


def update_subscription(conn: Connection, sub_id: int, values: dict[str, Any]) -> None:
    """Change a subscription's stored columns (already validated)."""
    conn.execute(update(Subscription).where(Subscription.id == sub_id).values(**values))


class TopicAdmin:
    """Finds topics and subscriptions, changes their attributes and deletes topics.

    ``registry`` returns this worker's current topics and subscriptions (a reload replaces them),
    and ``reload`` reloads them from the database.
    """

    def __init__(self, engine: Engine, registry: Callable[[], Registry], reload: Callable[[], None]) -> None:
        self._engine = engine
        self._registry = registry
        self._reload = reload

    # Lookups

    def topics(self) -> list[TopicInfo]:
        """Every topic this worker knows, by name (case-insensitive)."""
        return sorted(self._registry().topics.values(), key=lambda t: t.name.lower())

    def topic_matches(self, pattern: str, limit: int, offset: int = 0) -> tuple[int, list[str]]:
        """(how many topics this worker knows the pattern matches, a page of their names by name)."""
        return matching_names(pattern, (t.name for t in self.topics()), limit, offset)

    def known_topic(self, name: str) -> bool:
        """Whether this worker's copy holds a topic of that name (the database is not asked)."""
        return self._registry().topic(name) is not None

    def topic(self, name: str) -> TopicInfo:
        """A topic by name, or TopicNotFound."""
        topic = self._registry().topic(name)
        if topic is None:
            self._reload()  # made by another worker since the last sync
            topic = self._registry().topic(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    def subscribers(self, topic_name: str) -> list[SubInfo]:
        """The subscriptions receiving a topic's messages (exact and pattern ones)."""
        return self._registry().all_subscribers(topic_name)

    def subscriptions(self, topic: str | None = None, kind: str | None = None) -> list[SubInfo]:
        """Subscriptions by id: all, or those matching a topic name or pattern, and of a kind."""
        registry = self._registry()
        subs = registry.all_subscribers(topic) if topic else list(registry.subs.values())
        return sorted((s for s in subs if not kind or s.kind == kind), key=lambda s: s.id)

    def subscription(self, sub_id: int) -> SubInfo:
        """A subscription by id, or SubscriptionNotFound naming the id."""
        sub = self._registry().subs.get(sub_id)
        if sub is None:
            self._reload()  # made by another worker since the last sync
            sub = self._registry().subs.get(sub_id)
        if sub is None:
            raise SubscriptionNotFound(f'subscription #{sub_id}')
        return sub

    def topic_missing(self, pattern: str) -> bool:
        """Whether a subscription to pattern would name no topic (a plain name no topic has)."""
        return run_transaction(self._engine, lambda c: topic_missing(c, pattern), write=False)

    def stored_options(self, sub_id: int) -> dict[str, Any]:
        """A subscription's delivery options as given (not merged with the defaults); {} if it went."""
        row = run_transaction(self._engine, lambda c: subscription_rows(c, [sub_id]), write=False).get(sub_id)
        return parse_options(row.options) if row else {}

    # Changes

    def update_topic(self, topic_id: int, attrs: dict[str, Any]) -> None:
        """Change a topic's attributes (already validated); nothing is written when there are none."""
        if attrs:
            write_and_reload(self._engine, SYNC_KEY, lambda c: update_topic(c, topic_id, attrs), self._reload)

    def delete_topic(self, topic: TopicInfo) -> dict[str, int]:
        """Delete a topic with the subscriptions to exactly it and the messages waiting in it; counts of both."""
        return write_and_reload(self._engine, SYNC_KEY, lambda c: delete_topic(c, topic.id, topic.name),
                                self._reload)

    def update_subscription(self, sub_id: int, values: dict[str, Any]) -> None:
        """Change a subscription's stored columns (already validated); nothing is written when there are none."""
        if values:
            write_and_reload(self._engine, SYNC_KEY, lambda c: update_subscription(c, sub_id, values), self._reload)
