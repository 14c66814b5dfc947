"""WebSocket subscriptions: messages sent over a connection the client keeps open, and acknowledged by it.

A WebSocket subscription is delivered only while a client is attached to it, and by the worker
that holds that client's connection: ``Attachments`` is this worker's record of them, and
``wants_delivery`` is true only for the subscriptions attached here, so the delivery lease follows
the client (``runtime.pubsub.subscribers.websocket.hub`` attaches, detaches and moves them). The delivery loop
hands each batch (at most ``delivery_batch_size`` messages: the client's window) to the attached
connection, which sends it and waits for the acks; it answers one ``Outcome`` per message sent:

- acknowledged: delivered, the message leaves the queue;
- the client left first (socket closed, subscription detached or resumed on another connection):
  ``ClientGone``, due again at once with the attempt counted;
- not acknowledged within the ack deadline: ``AckTimeout``, retried after the usual wait.

After ``max_attempts`` the message goes to the dead-letter queue, as for every kind. A message the
client still holds from an earlier batch is answered ``held`` (``Outcome.held``: its attempt stands);
messages the connection did not send are left out of its answer, and the loop takes their attempt back.
A message answered held whose connection is no longer the subscription's when the loop comes back
with it (the client left, or resumed the subscription on another connection of this worker, between
two of the loop's takes) is answered ``ClientGone`` there: that attempt counts, and the next one goes
to the new connection, if any.

Before a batch is sent, as for REST push: a message of a topic the subscription may no longer
read is dropped (acked without being sent), and the topic's and the subscription's hook services
run when there are any (the client then gets the data the hook gave). This module does no I/O
and no SQL (its table is ``clients``'s): the HTTP side (``runtime.http.websocket``) implements
``Attached``.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

import gevent

from runtime.errors import ConfigError, UnrenderableMessage
from runtime.pubsub.delivery import Outcome
from runtime.pubsub.subscribers.base import Context, Deliverer, KindHooks, KindTools, RunService
from runtime.pubsub.subscribers.service import prepare
from runtime.pubsub.subscribers.websocket import clients
from runtime.util import json_limits

if TYPE_CHECKING:
    from runtime.pubsub.message import Delivery
    from runtime.pubsub.options import DeliveryOptions
    from runtime.pubsub.registry import SubInfo

_log = logging.getLogger(__name__)

#: The kind's name, as subscriptions store it.
KIND_WEBSOCKET = 'websocket'

class ClientGone(Exception):
    """The client left before acknowledging the message: it is due again at once, its attempt counted."""

    #: runtime.pubsub.retry.decide: no wait (max_attempts and expiry still dead-letter it).
    retry_at_once = True

    def __init__(self, message: str = 'the WebSocket client left before acknowledging the message') -> None:
        super().__init__(message)


class AckTimeout(Exception):
    """The client did not acknowledge the message within the ack deadline: retried after the usual wait."""

    def __init__(self, deadline_secs: float) -> None:
        self.deadline_secs = deadline_secs
        super().__init__(f'not acknowledged within {deadline_secs:g} s')


class Attached(Protocol):
    """One client connection as the delivery loop of a subscription attached to it sees it."""

    def deliver_batch(self, sub: SubInfo, batch: list[Delivery]) -> list[Outcome]:
        """Send the batch and wait for its acks (or close, detach, deadline); one Outcome per message sent."""
        ...

    @property
    def in_flight(self) -> int:
        """Messages the client holds unacknowledged now."""
        ...

    def taken_over(self, sub_id: int) -> None:
        """This connection no longer holds the subscription: stop using it and tell the client."""
        ...

    def wake(self) -> None:
        """New messages may be waiting: a deliver_batch waiting for acks returns, so the loop takes them."""
        ...


class Attachments:
    """The WebSocket subscriptions attached to this worker's connections: no I/O, no SQL."""

    def __init__(self) -> None:
        self._by_sub: dict[int, Attached] = {}

    def attach(self, sub_id: int, attached: Attached) -> Attached | None:
        """Attach a subscription to a connection; returns the connection it was attached to before, if another."""
        previous = self._by_sub.get(sub_id)
        self._by_sub[sub_id] = attached
        return previous if previous is not attached else None

    def detach(self, sub_id: int, attached: Attached) -> bool:
        """Detach a subscription from a connection, only if still attached to that one; whether it was."""
        if self._by_sub.get(sub_id) is not attached:
            return False
        del self._by_sub[sub_id]
        return True

    def get(self, sub_id: int) -> Attached | None:
        """The connection a subscription is attached to here, if any."""
        return self._by_sub.get(sub_id)

    def items(self) -> list[tuple[int, Attached]]:
        """Every (sub_id, connection) attached here, as a list (safe to change the attachments meanwhile)."""
        return list(self._by_sub.items())

    def __contains__(self, sub_id: object) -> bool:
        return sub_id in self._by_sub

    def __len__(self) -> int:
        return len(self._by_sub)


class _Holding:
    """What a subscription's connection answered held last (one per delivery loop): on which, which entries."""

    __slots__ = ('entries', 'on')

    def __init__(self) -> None:
        self.on: Attached | None = None
        self.entries: set[int] = set()


class WebSocketSubscriber(KindHooks):
    """WebSocket subscriptions: delivered by the worker their client is attached to, while it is."""

    kind = KIND_WEBSOCKET
    delivered = True
    queue_limited = True
    spread = False  # the lease follows the client, to the worker holding its socket
    options = None
    # Each subscription's client row, its sweep of the idle ones, and the client the admin API shows (``clients``).
    created = staticmethod(clients.add)
    undelivered = staticmethod(clients.unattached)
    sweep = staticmethod(clients.sweep_inactive)
    admin_fields = staticmethod(clients.admin_fields)

    @classmethod
    def build(cls, tools: KindTools) -> WebSocketSubscriber:
        """The plug-in of a worker, with its attachments."""
        return cls(tools.run_service, tools.attachments)

    def __init__(self, run_service: RunService, attachments: Attachments) -> None:
        #: Runs the topic's and subscription's hook services.
        self._run = run_service
        self._attachments = attachments

    @staticmethod
    def check(where: str, service: str, push_url: str, options: DeliveryOptions) -> None:
        """A WebSocket subscription belongs to a security definition: it names no service and no URL."""
        if service:
            raise ConfigError(where, 'a WebSocket subscription takes no service')
        if push_url:
            raise ConfigError(where, 'a WebSocket subscription takes no push_url')

    @staticmethod
    def refused_field(service: str, security: str, push_url: str) -> tuple[str, str] | None:
        """Its security definition: only the one owning it may resume it over a WebSocket (subscribe {sub_key})."""
        return None if security else ('security', 'is required for a websocket subscription')

    def wants_delivery(self, sub: SubInfo) -> bool:
        """Only while a client of this worker is attached to it."""
        return sub.id in self._attachments

    def deliverer(self, ctx: Context, sub: SubInfo) -> Deliverer:
        """Batches to whichever connection the subscription is attached to at the time."""
        holding = _Holding()

        def deliver_batch(sub: SubInfo, batch: list[Delivery]) -> list[Outcome]:
            return self._deliver_batch(ctx, sub, batch, holding)

        def wake() -> None:
            attached = self._attachments.get(sub.id)
            if attached is not None:
                attached.wake()
        return Deliverer(deliver_batch=deliver_batch, wake=wake)

    def _deliver_batch(self, ctx: Context, sub: SubInfo, batch: list[Delivery],
                       holding: _Holding) -> list[Outcome]:
        attached = self._attachments.get(sub.id)
        outcomes: list[Outcome] = []
        if holding.entries and holding.on is not attached:
            # Held by a connection that has lost the subscription since: that attempt is over.
            outcomes = [Outcome(d, False, ClientGone()) for d in batch if d.entry_id in holding.entries]
            batch = [d for d in batch if d.entry_id not in holding.entries]
        holding.on, holding.entries = attached, set()
        if attached is None:
            # The client has just left and the hub is stopping this loop: nothing is sent, the loop
            # takes the other attempts back and waits (runtime.pubsub.delivery: UNTRIED_WAIT_SECS).
            return outcomes
        sending: list[Delivery] = []
        originals: dict[int, Delivery] = {}  # id of what is sent -> the loop's own delivery
        for d in batch:
            try:
                sent = self._prepare(ctx, sub, d)
            except gevent.GreenletExit:
                raise
            except Exception as e:
                outcomes.append(Outcome(d, False, e))
                # Strict order: nothing behind a held-back message goes first. A message that cannot be
                # rendered is dead-lettered at once, so it holds nothing back.
                if sub.options.err_should_block and not isinstance(e, UnrenderableMessage):
                    break
                continue
            if sent is None:
                outcomes.append(Outcome(d, True, drop=True))
                continue
            originals[id(sent)] = d
            sending.append(sent)
        if sending:
            for o in attached.deliver_batch(sub, sending):
                # The loop settles (and keeps in memory, for non-GD messages) its own objects.
                o.delivery = originals.get(id(o.delivery), o.delivery)
                outcomes.append(o)
                if o.held:
                    holding.entries.add(o.delivery.entry_id)
        return outcomes

    def _prepare(self, ctx: Context, sub: SubInfo, d: Delivery) -> Delivery | None:
        """The message as it is sent, or None to drop it (no permission, or a hook deleted it)."""
        topic = ctx.topic(d.topic_name)
        if not ((topic.hook_service if topic else '') or sub.options.hook_service):
            # The common case, without decoding the data: the permission is all prepare() would check.
            if ctx.sub_allowed is not None and topic is not None and not ctx.sub_allowed(sub, topic):
                _log.info('%s: message %s not delivered: no sub permission for %s', sub.label, d.msg_id, topic.name)
                return None
            return d
        meta = prepare(ctx, sub, d, self._run)
        if meta is None:
            return None
        data = meta['data']
        if isinstance(data, bytes):
            return d  # binary data travels as its stored base64 text
        try:
            text = json_limits.dumps(data, ctx.json_limits)
        except json_limits.InvalidJson as e:
            raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
        return replace(d, data=text, mime_type='application/json')
