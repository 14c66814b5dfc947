"""``service_factory``: one service run through the real ``Invoker``, with no database and no server.

Like Nameko's ``worker_factory``, it gives a test the service alone, its collaborators replaced:

    def test_create_contact():
        sut = service_factory(CreateContact, responses={'crm.contact.store': {'id': 7}})
        assert sut.invoke({'name': 'Ada', 'email': 'a@x'}) == {'contact_id': 7}
        assert sut.invocations[0].name == 'crm.contact.store'
        assert sut.publications[0].topic == 'billing.account.open'

What runs is production's: input validation, ``accept``, hooks, output checks, and errors exactly
as a caller would see them (``InvalidInput``, ``InvalidOutput``, the service's own exception).

- ``self.invoke``, ``self.invoke_async`` and ``self.patterns`` reach the ``other_services`` given,
  which run for real; any other name is answered from ``responses`` (a payload, or a callable
  taking the request payload and returning the response payload, or raising) and recorded in
  ``invocations``. A name in neither raises ``ServiceNotFound``, as in production.
- ``self.publish`` and ``self.pubsub.publish`` record a ``RecordedPublication`` (topic, data, the keyword
  arguments given) and return a msg_id of the broker's shape; ``self.pubsub.subscribe`` records a
  ``Subscription`` and returns a sub_key; ``get_messages`` of a pull subscription hands over the
  publications of the test to its topics, rendered as the broker renders them.
- ``self.config`` is the ``config`` given.

Background work (``invoke_async``, patterns) runs in greenlets of the kit's own: ``wait()`` waits
for them to end.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import gevent

from runtime.errors import ServiceNotFound, SubscriptionNotFound
from runtime.pubsub.api import PubSubAPI
from runtime.pubsub.message import MSG_ID_PREFIX, Delivery, MsgId, encode_data, service_view
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.statements import new_sub_key
from runtime.pubsub.subscribers import KIND_PULL
from runtime.pubsub.topics import matches, validate_pattern
from runtime.service.base import Response, Service
from runtime.service.invoke import CHANNEL_INVOKE, Invoker
from runtime.service.store import ServiceStore
from runtime.util.random_ids import random_hex
from runtime.util.spawn import Spawner

#: A stand-in's answer: the response payload, or a callable from the request payload to it.
Answer = Any | Callable[[Any], Any]

#: Lifetime of a recorded publication that names no expiration (the topics' default limit).
_DEFAULT_EXPIRATION_SECS = 31536000.0


@dataclass(frozen=True)
class Invocation:
    """One run of a service answered from ``responses``: which, with what, on which channel."""

    name: str
    payload: Any
    channel: str
    cid: str


@dataclass(frozen=True)
class RecordedPublication:
    """One message published by a service of the test."""

    topic: str
    data: Any
    #: The keyword arguments given to publish (priority, expiration, correl_id...), as given.
    kwargs: dict[str, Any]
    msg_id: str
    #: The name of the service that published it.
    publisher: str
    pub_time: float = field(default_factory=time.time)


@dataclass(frozen=True)
class Subscription:
    """One subscription made by a service of the test."""

    pattern: str
    #: The service pushed to; '' for the publisher's own pull queue.
    service: str
    options: dict[str, Any]
    sub_key: str
    #: The service that subscribed.
    subscriber: str


class _KitStore(ServiceStore):
    """The given services, and a stand-in service for every name of ``responses``."""

    def __init__(self, responses: Mapping[str, Answer], record: Callable[[Invocation], None]) -> None:
        super().__init__()
        self._responses = responses
        self._record = record
        self._stand_ins: dict[str, type[Service]] = {}

    def get(self, name_or_class: str | type[Service]) -> type[Service]:
        """The given class, else a stand-in answering from responses; ServiceNotFound otherwise."""
        try:
            return super().get(name_or_class)
        except ServiceNotFound:
            name = name_or_class if isinstance(name_or_class, str) else getattr(name_or_class, 'name', '')
            if not name or name not in self._responses:
                raise
            return self._stand_in(name)

    def has(self, name: str) -> bool:
        """Whether a service of this name is given or answered from responses."""
        return super().has(name) or name in self._responses

    def _stand_in(self, name: str) -> type[Service]:
        cls = self._stand_ins.get(name)
        if cls is None:
            answer, record = self._responses[name], self._record

            def handle(svc: Service) -> None:
                record(Invocation(svc.name, svc.request.payload, svc.channel, svc.cid))
                svc.response.payload = answer(svc.request.payload) if callable(answer) else answer

            cls = type(f'StandIn[{name}]', (Service,), {'name': name, 'handle': handle, '__module__': __name__})
            cls._prepare('')
            self._stand_ins[name] = cls
        return cls


class _RecordingPubSub:
    """``self.pubsub`` of a service under test: records what it publishes and subscribes."""

    __slots__ = ('_kit', '_service')

    def __init__(self, kit: ServiceUnderTest, service: Service) -> None:
        self._kit = kit
        self._service = service

    def publish(self, topic_or_service: str, data: Any = None, **kwargs: Any) -> MsgId:
        """Record the publication; returns its msg_id (a TypeError for arguments publish does not take)."""
        inspect.signature(PubSubAPI.publish).bind(self, topic_or_service, data, **kwargs)
        pub = RecordedPublication(topic_or_service, data, dict(kwargs), MsgId(MSG_ID_PREFIX + random_hex(12)),
                          self._service.name)
        self._kit.publications.append(pub)
        return MsgId(pub.msg_id)

    def subscribe(self, topic_or_pattern: str, service: str | None = None, **options: Any) -> str:
        """Record the subscription; returns its sub_key (ServiceNotFound for an unknown service)."""
        validate_pattern(topic_or_pattern)
        if service:
            self._kit._store.get(service)
        sub = Subscription(topic_or_pattern, service or '', dict(options), new_sub_key(), self._service.name)
        self._kit.subscriptions.append(sub)
        return sub.sub_key

    def unsubscribe(self, sub_key: str) -> None:
        """Remove a recorded subscription."""
        self._kit.subscriptions[:] = [s for s in self._kit.subscriptions if s.sub_key != sub_key]

    def get_messages(self, sub_key: str, max_messages: int = 50) -> list[dict[str, Any]]:
        """Hand over the publications made since a pull subscription, to the topics it matches."""
        found = [(n, s) for n, s in enumerate(self._kit.subscriptions) if s.sub_key == sub_key and not s.service]
        if not found:
            raise SubscriptionNotFound('pull subscription')
        n, sub = found[0]
        taken = self._kit._handed_over.setdefault(sub_key, set())
        info = SubInfo(n + 1, sub_key, sub.pattern, KIND_PULL, service=sub.subscriber)
        out = []
        for pub in self._kit.publications:
            if len(out) >= max(1, min(max_messages, 1000)):
                break
            if pub.msg_id in taken or not matches(sub.pattern, pub.topic):
                continue
            taken.add(pub.msg_id)
            out.append(service_view(_delivery(pub, info, len(taken)), sub_key))
        return out


def _delivery(pub: RecordedPublication, sub: SubInfo, entry_id: int) -> Delivery:
    """A recorded publication as the broker would hand it to a puller."""
    text, mime = encode_data(pub.data, pub.kwargs.get('mime_type'))
    expiration = pub.kwargs.get('expiration') or _DEFAULT_EXPIRATION_SECS
    return Delivery(entry_id=entry_id, sub_id=sub.id, delivery_count=1, next_attempt_at=0.0, last_error='',
                    recv_time=pub.pub_time, message_id=entry_id, msg_id=pub.msg_id, topic_name=pub.topic, data=text,
                    mime_type=mime, priority=pub.kwargs.get('priority', 5), pub_time=pub.pub_time,
                    expiration_time=pub.pub_time + expiration, publisher=f'service:{pub.publisher}',
                    correl_id=pub.kwargs.get('correl_id'), in_reply_to=pub.kwargs.get('in_reply_to'),
                    ext_client_id=pub.kwargs.get('ext_client_id'), has_gd=pub.kwargs.get('has_gd') is not False,
                    size=len(text.encode()))


class ServiceUnderTest:
    """One service ready to be invoked, with what it invoked, published and subscribed recorded."""

    __test__ = False  # not a pytest test class

    def __init__(self, service_class: type[Service], other_services: tuple[type[Service], ...],
                 config: Mapping[str, Any] | None, responses: Mapping[str, Answer] | None) -> None:
        #: Runs of services answered from responses, in order.
        self.invocations: list[Invocation] = []
        #: Messages published, in order.
        self.publications: list[RecordedPublication] = []
        #: Subscriptions made (and not removed), in order.
        self.subscriptions: list[Subscription] = []
        #: The finished instance of the last invoke(): its request, response, cid.
        self.last: Service | None = None
        self._handed_over: dict[str, set[str]] = {}
        self._spawner = Spawner()
        self._store = _KitStore(dict(responses or {}), self.invocations.append)
        self.name = self._store.register(service_class)
        for other in other_services:
            self._store.register(other)
        self.service_class = service_class
        self.invoker = Invoker(self._store, self._spawner.spawn, pubsub=lambda svc: _RecordingPubSub(self, svc),
                               config={self.name: dict(config or {})})

    def invoke(self, payload: Any = None, channel: str = CHANNEL_INVOKE, **kwargs: Any) -> Any:
        """Run the service once (``kwargs``: cid, raw_request, http) and return its response payload."""
        self.last = None
        self.last = self.invoker.run(self.service_class, payload, channel=channel, **kwargs)
        return self.last.response.payload

    @property
    def response(self) -> Response:
        """The full response of the last invoke(): payload, status_code, headers, content_type."""
        if self.last is None:
            raise AssertionError(f'{self.name} has not answered an invoke() yet')
        return self.last.response

    def wait(self, timeout: float = 5.0) -> None:
        """Wait for background work (invoke_async, patterns) to end; AssertionError naming it on timeout."""
        deadline = time.monotonic() + timeout
        while len(self._spawner):
            if time.monotonic() > deadline:
                raise AssertionError(f'still running after {timeout:g} s: {", ".join(self._spawner.running())}')
            gevent.sleep(0.005)

    def reset(self) -> None:
        """Forget what was recorded, and kill background work still running."""
        self._spawner.stop(timeout=1.0)
        self.invocations.clear()
        self.publications.clear()
        self.subscriptions.clear()
        self._handed_over.clear()
        self.last = None


def service_factory(service_class: type[Service], *other_services: type[Service],
                    config: Mapping[str, Any] | None = None,
                    responses: Mapping[str, Answer] | None = None) -> ServiceUnderTest:
    """Ready service_class to run alone: other_services for real, other names answered from responses."""
    return ServiceUnderTest(service_class, other_services, config, responses)

