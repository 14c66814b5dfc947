"""Subscriber kinds as plug-ins: what the broker and the catalog need to know of each kind.

A kind is one module here with one class implementing ``Subscriber``: its ``kind`` name (the
``Subscription.kind`` value), whether workers deliver it under a lease (``delivered``: service,
REST push, WebSocket and file subscribers) or its clients read it themselves (pull), ``wants_delivery``
(whether this worker should compete for a subscription's lease now: always for service, REST
push and file, only while its client is attached here for WebSocket), ``check`` for the fields
and options a new subscription of the kind must have, and, for delivered kinds, ``deliverer``, which builds
what the subscription's ``DeliveryLoop`` calls (a ``Deliver`` for one message at a time or a
``DeliverBatch`` for whole batches, see ``runtime.pubsub.delivery``) and what closes it when the
loop ends; ``queue_limited`` says whether its queues obey the topics' max depths. The broker
knows no kind by name: it asks the plug-in of a subscription's kind.

A kind declares its own delivery options (``options``: a ``runtime.pubsub.options.KindOptions``
dataclass, checked by the kind; REST push's ``push_*``, the file subscriber's ``file_*``), and how
a worker makes its plug-in (``build``, from the ``KindTools`` every kind is offered). The broker,
the catalog and the registry name no kind's options: they type them through ``Kinds``.

Adding a kind is one new module with its ``Subscriber`` class, imported here and added to
``SUBSCRIBER_KINDS`` below; nothing else changes (``tests/pubsub/test_example_kind.py`` registers
the example kind ``tests/example_kind/memo.py`` so).
"""

from __future__ import annotations

from runtime.pubsub.kinds import Kinds
from runtime.pubsub.subscribers.base import Context, Deliverer, KindTools, RunService, Subscriber
from runtime.pubsub.subscribers.file import KIND_FILE, FileSubscriber
from runtime.pubsub.subscribers.pull import KIND_PULL, PullSubscriber
from runtime.pubsub.subscribers.rest_push import KIND_REST_PUSH, RestPushSubscriber
from runtime.pubsub.subscribers.service import ServiceSubscriber
from runtime.pubsub.subscribers.websocket import KIND_WEBSOCKET, Attachments, WebSocketSubscriber, shown_client

__all__ = ['KIND_FILE', 'KIND_PULL', 'KIND_REST_PUSH', 'KIND_WEBSOCKET', 'SUBSCRIBER_KINDS', 'Attachments',
           'Context', 'Deliverer', 'KindTools', 'RunService', 'Subscriber', 'shown_client', 'standard_subscribers']

#: Every subscriber kind Conduit has, in the order errors and the API list them: the one place a kind is registered.
SUBSCRIBER_KINDS = Kinds([ServiceSubscriber, PullSubscriber, RestPushSubscriber, WebSocketSubscriber, FileSubscriber])


def standard_subscribers(tools: KindTools, kinds: Kinds = SUBSCRIBER_KINDS) -> list[Subscriber]:
    """One worker's plug-in of every kind, each made from what the worker offers."""
    return [kinds.plugin(name).build(tools) for name in kinds.names]
