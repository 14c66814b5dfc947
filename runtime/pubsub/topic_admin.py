"""Administration of topics: list, page, read, create, change, delete, and which subscriptions receive one.

What the admin API and the dashboard do with topics, without HTTP; subscriptions are
``runtime.pubsub.subscription_admin``'s. Creating a topic is the catalog's work (``Catalog.create_topic``,
which publishing on first use and Spark also call): ``create`` adds the checks an operator's request
needs and names a taken name ``ObjectExists``.

Every change is one transaction that bumps the ``pubsub`` sync key (``runtime.cluster.sync.write_and_reload``),
so every worker of every server reloads it within ``sync.interval_secs``; this worker reloads at
once. A lookup that misses reloads first: the topic may have been made by another worker since
the last sync. Lists are this worker's copy (the registry), not the database.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, delete, select, update

from runtime.cluster.sync import write_and_reload
from runtime.db.models import Message, Subscription, Topic
from runtime.errors import ConfigError, ObjectExists, TopicNotFound
from runtime.pubsub import statements
from runtime.pubsub.catalog import SYNC_KEY
from runtime.pubsub.registry import check_topic_attributes
from runtime.pubsub.topics import matching_names, normalize, validate_topic_name

if TYPE_CHECKING:
    from runtime.pubsub.catalog import Catalog
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


class TopicAdmin:
    """Finds, creates, changes and deletes topics.

    ``registry`` returns this worker's current topics and subscriptions (a reload replaces them),
    ``reload`` reloads them from the database, and ``catalog`` creates topics.
    """

    def __init__(self, engine: Engine, registry: Callable[[], Registry], reload: Callable[[], None],
                 catalog: Catalog) -> None:
        self._engine = engine
        self._registry = registry
        self._reload = reload
        self._catalog = catalog

    # Lookups

    def list(self) -> list[TopicInfo]:
        """Every topic this worker knows, by name (case-insensitive)."""
        return sorted(self._registry().topics.values(), key=lambda t: t.name.lower())

    def page(self, search: str = '', limit: int | None = None, offset: int = 0) -> tuple[int, list[TopicInfo]]:
        """(how many topics match, a page of them by name); search: part of the name, any case; no limit: all."""
        term = search.lower()
        listed = [t for t in self.list() if term in t.name.lower()]
        return len(listed), listed[offset:None if limit is None else offset + limit]

    def matches(self, pattern: str, limit: int, offset: int = 0) -> tuple[int, list[str]]:
        """(how many topics this worker knows the pattern matches, a page of their names by name)."""
        return matching_names(pattern, (t.name for t in self.list()), limit, offset)

    def exists(self, name: str) -> bool:
        """Whether this worker's copy holds a topic of that name (the database is not asked)."""
        return self._registry().topic(name) is not None

    def get(self, name: str) -> TopicInfo:
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

    # Changes

    def create(self, name: str, origin: str = 'api', **attrs: Any) -> TopicInfo:
        """Create a topic through the catalog; its info. ObjectExists when the name is taken.

        InvalidTopicName for a bad name, ConfigError for a bad attribute.
        """
        # Checked here first so that a ConfigError from the catalog afterwards can only be the name clash.
        validate_topic_name(name)
        attrs = check_topic_attributes(attrs, f'topic {name!r}')
        if self.exists(name):
            raise ObjectExists('topic', name)
        try:
            return self._catalog.create_topic(name, origin=origin, **attrs)
        except ConfigError:
            raise ObjectExists('topic', name) from None  # made by another worker since the last sync

    def update(self, topic: int | str, attrs: dict[str, Any]) -> None:
        """Change a topic's attributes (already validated; topic: its id or name); nothing is written when none."""
        topic_id = self.get(topic).id if isinstance(topic, str) else topic
        if attrs:
            write_and_reload(self._engine, SYNC_KEY, lambda c: update_topic(c, topic_id, attrs), self._reload)

    def delete(self, topic: TopicInfo) -> dict[str, int]:
        """Delete a topic with the subscriptions to exactly it and the messages waiting in it; counts of both."""
        return write_and_reload(self._engine, SYNC_KEY, lambda c: delete_topic(c, topic.id, topic.name),
                                self._reload)
