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

Adding a kind is one new module with its ``Subscriber`` class, registered in
``standard_subscribers`` below, and its name added to ``runtime.pubsub.registry.KINDS`` (the kinds
stored subscriptions may have); broker.py does not change. The file subscriber (``file``) was
added so.
"""

from __future__ import annotations

from runtime.pubsub.subscribers.base import Context, Deliverer, RunService, Subscriber
from runtime.pubsub.subscribers.file import FileSubscriber
from runtime.pubsub.subscribers.pull import PullSubscriber
from runtime.pubsub.subscribers.rest_push import OutboundPolicy, RestPushSubscriber
from runtime.pubsub.subscribers.service import ServiceSubscriber
from runtime.pubsub.subscribers.websocket import Attachments, WebSocketSubscriber

__all__ = ['Attachments', 'Context', 'Deliverer', 'RunService', 'Subscriber', 'standard_subscribers']


def standard_subscribers(run_service: RunService, attachments: Attachments,
                         push_allow_hosts: str = '') -> list[Subscriber]:
    """Every subscriber kind Conduit has: the one place a new kind is registered.

    attachments: this worker's WebSocket connections and the subscriptions attached to them;
    push_allow_hosts: [pubsub] push_allow_hosts, the hosts REST push may reach although the outbound
    policy refuses their addresses.
    """
    return [ServiceSubscriber(run_service), RestPushSubscriber(run_service, OutboundPolicy(push_allow_hosts)),
            PullSubscriber(),
            WebSocketSubscriber(run_service, attachments), FileSubscriber(run_service)]
