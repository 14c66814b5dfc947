"""The catalog: administration of topics and subscriptions (create, subscribe, pause, inspect).

Every change is one transaction that also bumps the ``pubsub`` sync key, so that the other
workers reload their registries at their next sync; this worker reloads at once (``changed``).
A subscription made with ``subscribe`` takes over the messages its topics kept for a subscriber
(``on_no_subs: keep``); ``subscribed`` then lets this worker's loop, if it delivers the new
subscription, see them at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from gevent.lock import Semaphore
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from runtime.cluster.sync import bump
from runtime.db.blocking import run_transaction
from runtime.db.models import Subscription
from runtime.errors import ConfigError, SubscriptionNotFound, TopicNotFound
from runtime.pubsub import statements
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.registry import (
    KIND_SERVICE,
    Registry,
    SubInfo,
    TopicInfo,
    check_topic_attributes,
    service_topic_name,
)
from runtime.pubsub.topics import validate_pattern, validate_topic_name

if TYPE_CHECKING:
    from runtime.config import PubSubSection
    from runtime.pubsub.kinds import Kinds

#: Sync key bumped whenever topics or subscriptions change.
SYNC_KEY = 'pubsub'


class Catalog:
    """Topics and subscriptions: creating, removing, pausing, and looking at their queues."""

    def __init__(self, engine: Engine, settings: PubSubSection, registry: Callable[[], Registry],
                 kinds: Kinds, changed: Callable[[], None],
                 subscribed: Callable[[], None]) -> None:
        self._engine = engine
        self._settings = settings
        #: The registry of this worker as it is now (the broker replaces it at each reload).
        self._registry = registry
        #: The subscriber kinds this worker has (a subscription of another kind is refused).
        self.kinds = kinds
        self._changed = changed
        self._subscribed = subscribed
        #: One implicit topic made at a time in this worker (see ensure_service_topic).
        self._ensuring = Semaphore()

    # Topics

    def create_topic(self, name: str, origin: str = 'api', **attrs: Any) -> TopicInfo:
        """Create a topic with the given attributes."""
        validate_topic_name(name)
        attrs = check_topic_attributes(attrs, f'topic {name!r}')

        def work(conn: Connection) -> None:
            statements.create_topic(conn, name, attrs, origin=origin)
            bump(conn, SYNC_KEY)
        try:
            run_transaction(self._engine, work)
        except IntegrityError:
            raise ConfigError(f'topic {name!r}', 'a topic of that name already exists') from None
        self._changed()
        topic = self._registry().topic(name)
        assert topic is not None
        return topic

    def ensure_service_topic(self, service: str) -> TopicInfo:
        """The implicit topic of a service and its subscription, made on first use."""
        name = service_topic_name(service)
        registry = self._registry()
        topic = registry.topic(name)
        if topic is not None and registry.service_subscription(service) is not None:
            return topic
        # Publishers that find the service's topic missing at the same moment wait for the first, and then
        # find what it made: two of them, each in a transaction of its own, made two subscriptions (seen
        # with ten publishing greenlets on PostgreSQL), and every message was delivered twice.
        with self._ensuring:
            return self._ensure_service_topic(service, name)

    def _ensure_service_topic(self, service: str, name: str) -> TopicInfo:
        registry = self._registry()
        topic = registry.topic(name)
        if topic is not None and registry.service_subscription(service) is not None:
            return topic
        settings = self._settings

        def work(conn: Connection) -> None:
            registry = statements.load_registry(conn, settings, self.kinds.options)
            if registry.topic(name) is None:
                statements.create_topic(conn, name, {'has_gd': True}, is_service_topic=True, origin='service')
                registry = statements.load_registry(conn, settings, self.kinds.options)
            if registry.service_subscription(service) is None:
                statements.create_subscription(conn, registry, self.kinds, name, KIND_SERVICE, service=service,
                                               origin='service')
            bump(conn, SYNC_KEY)
        try:
            run_transaction(self._engine, work)
        except IntegrityError:
            pass  # another worker made them at the same moment
        self._changed()
        topic = self._registry().topic(name)
        if topic is None:
            raise TopicNotFound(name)
        return topic

    # Subscriptions

    def check_subscription(self, kind: str, where: str, service: str = '', push_url: str = '',
                           options: Mapping[str, Any] | None = None) -> DeliveryOptions:
        """A new subscription's options typed over [pubsub]; ConfigError unless its kind has what it needs."""
        return self.kinds.check(self._settings, kind, where, service, push_url, options)

    def subscribe(self, pattern: str, kind: str = KIND_SERVICE, *, service: str = '', security: str = '',
                  push_url: str = '', options: dict[str, Any] | None = None, origin: str = 'api',
                  check: Callable[[Connection], None] | None = None, is_active: bool = True) -> SubInfo:
        """Subscribe to a topic or pattern; messages the topics held for a subscriber are handed over.

        ``is_active`` False makes it paused: nothing is delivered until it is resumed.

        ``check(conn)``, when given, runs first in the transaction that inserts the subscription (a
        limit counted there is counted with the insert); whatever it raises refuses the subscription.
        """
        validate_pattern(pattern)
        self.check_subscription(kind, f'subscription to {pattern!r}', service, push_url, options)

        def work(conn: Connection) -> str:
            # Topics only: loading every subscription here too made each subscribe cost O(subscriptions) twice.
            if check is not None:
                check(conn)
            registry = statements.load_topics(conn)
            _sub_id, sub_key = statements.create_subscription(conn, registry, self.kinds, pattern, kind,
                                                              service=service, security=security,
                                                              push_url=push_url, options=options, origin=origin,
                                                              is_active=is_active)
            bump(conn, SYNC_KEY)
            return sub_key
        sub_key = run_transaction(self._engine, work)
        self._changed()
        sub = self._registry().subs_by_key[sub_key]
        self._subscribed()  # the handed-over backlog, if this worker delivers it
        return sub

    def unsubscribe(self, sub_key: str) -> None:
        """Remove a subscription with its queue."""
        sub = self._registry().subs_by_key.get(sub_key)
        if sub is None:
            self._changed()
            sub = self._registry().subs_by_key.get(sub_key)
            if sub is None:
                raise SubscriptionNotFound()
        sub_id = sub.id

        def work(conn: Connection) -> None:
            statements.delete_subscription(conn, sub_id)
            bump(conn, SYNC_KEY)
        run_transaction(self._engine, work)
        self._changed()

    def set_active(self, sub_key: str, is_active: bool) -> None:
        """Pause or resume a subscription's delivery."""
        sub = self._sub(sub_key)

        def work(conn: Connection) -> None:
            conn.execute(Subscription.__table__.update().where(Subscription.id == sub.id).values(is_active=is_active))
            bump(conn, SYNC_KEY)
        run_transaction(self._engine, work)
        self._changed()

    # Queues

    def queue_depth(self, sub_key: str) -> int:
        """How many messages wait in a subscription's queue."""
        sub = self._sub(sub_key)
        return run_transaction(self._engine, lambda c: statements.queue_depth(c, sub.id), write=False)

    def dead_letters(self, sub_key: str) -> list[dict[str, Any]]:
        """A subscription's dead letters with their errors."""
        sub = self._sub(sub_key)
        return run_transaction(self._engine, lambda c: statements.dead_letters(c, sub.id), write=False)

    def _sub(self, sub_key: str) -> SubInfo:
        sub = self._registry().subs_by_key.get(sub_key)
        if sub is None:
            raise SubscriptionNotFound()
        return sub
