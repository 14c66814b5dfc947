"""``self.pubsub``: the publish/subscribe API a service sees.

Services always may publish and receive their own messages: permissions (pub=/sub= patterns)
apply to REST clients, not to services.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from runtime.pubsub.registry import KIND_SERVICE
from runtime.pubsub.subscribers import KIND_PULL, pull

if TYPE_CHECKING:
    from runtime.pubsub.broker import Broker
    from runtime.pubsub.catalog import Catalog
    from runtime.pubsub.message import MsgId
    from runtime.service.base import Service


class PubSubAPI:
    """Publish, subscribe and read messages on behalf of one service."""

    __slots__ = ('_broker', '_catalog', '_find_service', '_service')

    def __init__(self, broker: Broker, catalog: Catalog, service: Service, find_service: Callable[[str], Any]) -> None:
        self._broker = broker
        self._catalog = catalog
        self._service = service
        #: The deployed service of a name, or ServiceNotFound.
        self._find_service = find_service

    def publish(self, topic_or_service: str, data: Any = None, *, priority: int = 5,
                expiration: float | None = None, has_gd: bool | None = None, correl_id: str | None = None,
                in_reply_to: str | None = None, ext_client_id: str | None = None,
                mime_type: str | None = None) -> MsgId:
        """Publish data to a topic, or to a service through its implicit topic; returns the msg_id."""
        return self._broker.publish(topic_or_service, data, priority=priority, expiration=expiration,
                                    has_gd=has_gd, correl_id=correl_id, in_reply_to=in_reply_to,
                                    ext_client_id=ext_client_id, mime_type=mime_type,
                                    publisher=f'service:{self._service.name}')

    def subscribe(self, topic_or_pattern: str, service: str | None = None, **options: Any) -> str:
        """Subscribe a service (pushed to it) or, without service, this service's pull queue; returns sub_key."""
        if service:
            self._find_service(service)  # ServiceNotFound early
            sub = self._catalog.subscribe(topic_or_pattern, KIND_SERVICE, service=service, options=options)
        else:
            sub = self._catalog.subscribe(topic_or_pattern, KIND_PULL, service=self._service.name, options=options)
        return sub.sub_key

    def unsubscribe(self, sub_key: str) -> None:
        """Remove a subscription and its queue."""
        self._catalog.unsubscribe(sub_key)

    def get_messages(self, sub_key: str, max_messages: int = 50) -> list[dict[str, Any]]:
        """Take messages from a pull subscription (each with its data and metadata)."""
        return pull.get_messages(self._broker, sub_key, max_messages)
