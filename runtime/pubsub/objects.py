"""The pub/sub sections of the object files: ``pubsub_topic`` and ``pubsub_subscription``.

Topics are matched by name, service subscriptions by (service, topic); objects the files no
longer declare are removed if the files made them. A subscription's delivery options (e.g.
``max_attempts``, ``wait_non_sock_err``, ``err_should_block``) sit beside its other keys.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Connection, delete, select, update

from runtime.config import PubSubSection
from runtime.db.models import Subscription, Topic
from runtime.errors import ConfigError
from runtime.objects import SectionHandler
from runtime.pubsub import store
from runtime.pubsub.broker import SYNC_KEY
from runtime.pubsub.registry import (
    KIND_PULL,
    KIND_SERVICE,
    TOPIC_ATTRIBUTES,
    DeliveryOptions,
    TopicInfo,
    check_topic_attributes,
)
from runtime.pubsub.topics import InvalidTopicName, normalize, validate_pattern, validate_topic_name

#: Keys of a pubsub_subscription item that are not delivery options.
_SUB_KEYS = {'name', 'service', 'push_service', 'security', 'topic_list', 'delivery_type', 'is_active',
             'push_rest_endpoint', 'rest_push_endpoint', '_file'}


_DEFAULT_TOPIC = TopicInfo(0, '')


def _where(item: dict[str, Any], section: str) -> str:
    return f'{item["_file"]} [{section}] {item.get("name", "?")!r}'


def apply_topics(conn: Connection, items: list[dict[str, Any]]) -> None:
    """Section pubsub_topic."""
    declared = set()
    for item in items:
        where = _where(item, 'pubsub_topic')
        name = item.get('name')
        try:
            validate_topic_name(name)
        except InvalidTopicName as e:
            raise ConfigError(where, str(e)) from None
        given = check_topic_attributes({k: v for k, v in item.items() if k not in ('name', '_file')}, where)
        # Attributes left out of the file return to their defaults when the file is re-applied.
        attrs = {k: getattr(_DEFAULT_TOPIC, k) for k in TOPIC_ATTRIBUTES} | given
        key = normalize(name)
        if key in declared:
            raise ConfigError(where, 'topic declared twice')
        declared.add(key)
        exists = conn.execute(select(Topic.id).where(Topic.name_key == key)).first()
        if exists:
            conn.execute(update(Topic).where(Topic.name_key == key).values(name=name, origin='config', **attrs))
        else:
            store.create_topic(conn, name, attrs, origin='config')
    conn.execute(delete(Topic).where(Topic.origin == 'config', Topic.name_key.not_in(declared)))


def make_apply_subscriptions(settings: PubSubSection):  # type: ignore[no-untyped-def]
    """The handler of section pubsub_subscription (it validates options against the server defaults)."""

    def apply_subscriptions(conn: Connection, items: list[dict[str, Any]]) -> None:
        registry = store.load_registry(conn, settings)
        declared: set[int] = set()
        for item in items:
            where = _where(item, 'pubsub_subscription')
            service = item.get('service') or item.get('push_service') or ''
            delivery_type = item.get('delivery_type', 'push' if service else 'pull')
            if delivery_type == 'push' and not service:
                raise ConfigError(where, 'REST push subscriptions are configured through the REST pub/sub API; '
                                         'give push_service for a service subscription')
            kind = KIND_SERVICE if delivery_type == 'push' else KIND_PULL
            if kind == KIND_PULL and not item.get('security'):
                raise ConfigError(where, 'a pull subscription needs the security definition of its client')
            topics = item.get('topic_list') or []
            if isinstance(topics, str):
                topics = [topics]
            if not topics:
                raise ConfigError(where, 'topic_list is required')
            options = {k: v for k, v in item.items() if k not in _SUB_KEYS}
            DeliveryOptions.from_settings(settings, options, where)
            for pattern in topics:
                try:
                    validate_pattern(pattern)
                except InvalidTopicName as e:
                    raise ConfigError(where, str(e)) from None
                existing = conn.execute(select(Subscription.id).where(
                    Subscription.kind == kind, Subscription.service == (service if kind == KIND_SERVICE else ''),
                    Subscription.security == str(item.get('security') or ''), Subscription.pattern == pattern)
                ).first()
                values = {'options': json.dumps(options), 'is_active': bool(item.get('is_active', True))}
                if existing:
                    conn.execute(update(Subscription).where(Subscription.id == existing.id)
                                 .values(origin='config', **values))
                    declared.add(existing.id)
                else:
                    sub_id, _ = store.create_subscription(
                        conn, registry, pattern, kind, service=service if kind == KIND_SERVICE else '',
                        security=str(item.get('security') or ''), options=options, origin='config')
                    declared.add(sub_id)
        for row in conn.execute(select(Subscription.id).where(Subscription.origin == 'config')).all():
            if row.id not in declared:
                store.delete_subscription(conn, row.id)

    return apply_subscriptions


def section_handlers(settings: PubSubSection) -> list[SectionHandler]:
    """Handlers to register with the ObjectsApplier, in order."""
    return [SectionHandler('pubsub_topic', apply_topics, (SYNC_KEY,)),
            SectionHandler('pubsub_subscription', make_apply_subscriptions(settings), (SYNC_KEY,))]
