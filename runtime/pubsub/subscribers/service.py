"""Service subscribers: each message is the raw request of one invocation of the subscribed service.

Before a message reaches its subscriber (a service, or a REST push endpoint, which uses
``prepare`` too), the hook services of its topic and of the subscription run with
``{data, meta}``; each may answer ``{"action": "delete"}`` (the message is acked without being
delivered), ``{"action": "skip"}`` (delivered later: ``SkippedByHook``, retried as a failure) or
``{"data": ...}`` in place of the data. A message of a topic the subscription may no longer read
(a backlog handed to a pattern subscription, a permission withdrawn) is dropped, not delivered.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import gevent

from runtime.errors import ConfigError, UnrenderableMessage
from runtime.pubsub.delivery import Outcome
from runtime.pubsub.message import service_view
from runtime.pubsub.registry import KIND_SERVICE
from runtime.pubsub.subscribers.base import Context, Deliverer, KindHooks, KindTools, RunService

if TYPE_CHECKING:
    from runtime.pubsub.message import Delivery
    from runtime.pubsub.options import DeliveryOptions
    from runtime.pubsub.registry import SubInfo

_log = logging.getLogger(__name__)

#: Channel name services see when a message is delivered to them.
CHANNEL_PUBSUB = 'pubsub'
#: Channel name hook services see.
CHANNEL_HOOK = 'pubsub-hook'


class SkippedByHook(Exception):
    """A hook service asked for the message to be delivered later."""


R = TypeVar('R')


def render_batch(batch: list[Delivery], render: Callable[[Delivery], R | None],
                 block: bool) -> tuple[list[Outcome], list[tuple[Outcome, R]]]:
    """Each message of a batch made ready to send: (an outcome per message tried, the rendered ones with theirs).

    render(d) gives what is sent, or None when a hook deleted the message (acked, not sent). A message
    whose render fails gets a failed outcome; with block (err_should_block) the messages behind it are
    not tried and keep their place, except behind one that cannot be rendered at all: that one is
    dead-lettered at once, so it holds nothing back.
    """
    outcomes: list[Outcome] = []
    ready: list[tuple[Outcome, R]] = []
    for d in batch:
        try:
            rendered = render(d)
        except gevent.GreenletExit:
            raise
        except Exception as e:
            outcomes.append(Outcome(d, False, e))
            if block and not isinstance(e, UnrenderableMessage):
                break
            continue
        if rendered is None:
            outcomes.append(Outcome(d, True, drop=True))
            continue
        outcome = Outcome(d, True)
        outcomes.append(outcome)
        ready.append((outcome, rendered))
    return outcomes, ready


def prepare(ctx: Context, sub: SubInfo, d: Delivery, run_service: RunService) -> dict[str, Any] | None:
    """The message as the subscriber gets it, after the topic's and subscription's hook services.

    None when a hook deleted it (or the subscription may not read its topic); SkippedByHook when a
    hook wants it delivered later.
    """
    topic = ctx.topic(d.topic_name)
    if ctx.sub_allowed is not None and topic is not None and not ctx.sub_allowed(sub, topic):
        # A backlog handed to a pattern subscription is not filtered when handed over.
        _log.info('%s: message %s not delivered: no sub permission for %s', sub.label, d.msg_id, topic.name)
        return None
    meta = service_view(d, sub.sub_key, ctx.json_limits)
    for hook in (topic.hook_service if topic else '', sub.options.hook_service):
        if hook:
            answer = run_service(hook, {'data': meta['data'], 'meta': meta}, CHANNEL_HOOK, None) or {}
            action = answer.get('action', 'deliver') if isinstance(answer, dict) else 'deliver'
            if action == 'delete':
                _log.info('%s: message %s deleted by hook %s', sub.label, d.msg_id, hook)
                return None
            if action == 'skip':
                raise SkippedByHook(f'skipped by hook service {hook!r}')
            if isinstance(answer, dict) and 'data' in answer:
                meta['data'] = answer['data']
    return meta


class ServiceSubscriber(KindHooks):
    """Delivers each message to the subscribed service, one invocation per message."""

    kind = KIND_SERVICE
    delivered = True
    queue_limited = False  # the runtime drains them itself, and a message to a service must survive
    spread = True
    options = None

    @classmethod
    def build(cls, tools: KindTools) -> ServiceSubscriber:
        """The plug-in of a worker."""
        return cls(tools.run_service)

    def __init__(self, run_service: RunService) -> None:
        self._run = run_service

    @staticmethod
    def check(where: str, service: str, push_url: str, options: DeliveryOptions) -> None:
        """A service subscription names its service."""
        if not service:
            raise ConfigError('subscription', 'a service subscription needs the service to invoke')

    @staticmethod
    def refused_field(service: str, security: str, push_url: str) -> tuple[str, str] | None:
        """The service to invoke."""
        return None if service else ('service', 'is required for a service subscription')

    def wants_delivery(self, sub: SubInfo) -> bool:
        """Any worker may deliver a service subscription: each one competes for its lease."""
        return True

    def deliverer(self, ctx: Context, sub: SubInfo) -> Deliverer:
        """Invoke the service with each message; a failure raises, and the loop retries it."""
        def deliver(sub: SubInfo, d: Delivery) -> bool | None:
            meta = prepare(ctx, sub, d, self._run)
            if meta is None:
                return False
            self._run(sub.service, meta['data'], CHANNEL_PUBSUB, meta)
            return None
        return Deliverer(deliver=deliver)
