"""What every subscriber plug-in implements, and what the broker lends it (see the package's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from runtime.util.json_limits import DEFAULT_LIMITS, JsonLimits

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from runtime.pubsub.delivery import Deliver, DeliverBatch, Outcome
    from runtime.pubsub.options import DeliveryOptions, KindOptions
    from runtime.pubsub.registry import Registry, SubInfo, TopicInfo

#: Runs a named service with data: run(service, data, channel, raw_request) -> its response payload.
RunService = Callable[[str, Any, str, 'dict[str, Any] | None'], Any]
#: Runs work in one read-only transaction of its own: read(work) -> what work(conn) returned.
Read = Callable[[Callable[['Connection'], Any]], Any]


@dataclass(frozen=True)
class Context:
    """What the broker lends its subscriber plug-ins when they build a delivery."""

    #: The topic of a name, as the broker's registry has it now (None if there is none).
    topic: Callable[[str], TopicInfo | None]
    #: Whether a subscription may receive a topic's messages (pub/sub permissions); None allows all.
    sub_allowed: Callable[[SubInfo, TopicInfo], bool] | None = None
    #: What JSON data may hold when rendered for subscribers.
    json_limits: JsonLimits = DEFAULT_LIMITS


@dataclass(frozen=True)
class KindTools:
    """What a worker gives its subscriber plug-ins when it makes them (each takes what it needs)."""

    #: Runs the topic's and subscription's hook services, and a service subscriber's service.
    run_service: RunService
    #: This worker's WebSocket connections and the subscriptions attached to them (a
    #: ``runtime.pubsub.subscribers.websocket.Attachments``: that module imports this one).
    attachments: Any
    #: [pubsub] push_allow_hosts: the hosts REST push may reach although the outbound policy refuses their addresses.
    push_allow_hosts: str = ''


class Deliverer(NamedTuple):
    """What a subscription's delivery loop calls: one of deliver and deliver_batch, what closes it, and
    what it tells of its wake-ups (new messages may be waiting)."""

    deliver: Deliver | None = None
    deliver_batch: DeliverBatch | None = None
    close: Callable[[], None] | None = None
    wake: Callable[[], None] | None = None
    #: Given the loop's ``DeliveryLoop.settled``: a batch deliverer tells it of each message done
    #: before the batch ends (a REST push's request answered 2xx), so that its ack is stored at once.
    progress: Callable[[Callable[[Outcome], None]], None] | None = None


class KindHooks:
    """What a kind adds to the core's handling of its subscriptions: by default nothing.

    Every kind's class derives from it and overrides what it needs: the fields a new subscription
    must have, as the admin API names them; rows kept beside each subscription and their sweep (the
    WebSocket kind: its clients' rows); what the admin API shows of them beside the common fields.
    Static methods: the admin API, the catalog and the sweeper call them on a kind's plug-in.
    """

    @staticmethod
    def refused_field(service: str, security: str, push_url: str) -> tuple[str, str] | None:
        """The field a new subscription of the kind lacks or has malformed, and why (the admin API's
        400 names it; the object files get the kind's ``check``); None when none is."""
        return None

    @staticmethod
    def created(conn: Connection, sub_id: int, now: float) -> None:
        """Add what the kind keeps beside a new subscription, in the transaction that inserted it."""

    @staticmethod
    def undelivered(conn: Connection) -> set[int]:
        """The kind's subscriptions that no delivery loop delivers now: the sweeper expires their messages."""
        return set()

    @staticmethod
    def sweep(conn: Connection, registry: Registry, subs: list[SubInfo], now: float,
              dead_owner_secs: float) -> list[tuple[SubInfo, str]]:
        """Delete the kind's subscriptions (of subs) nobody uses any more, with their queues; each with why.

        dead_owner_secs: how long a worker's heartbeat must have stopped before it is taken as dead.
        """
        return []

    @staticmethod
    def admin_fields(read: Read, subs: list[SubInfo]) -> dict[int, dict[str, Any]]:
        """The fields the admin API adds to the views of the kind's subscriptions (subs), by subscription id.

        subs is a whole page of them: a kind that reads what it shows reads it for all of them with one
        call of read, rather than one per subscription. A subscription left out gets no extra field.
        """
        return {}


class Subscriber(Protocol):
    """One kind of subscriber (its class derives from ``KindHooks``)."""

    #: The kind's name, as subscriptions store it.
    kind: str
    #: Whether a worker delivers the kind's subscriptions under a lease (else their clients read them).
    delivered: bool
    #: Whether the kind's queues obey their topics' max depths (``runtime.pubsub.limits``).
    queue_limited: bool
    #: Whether the kind's delivery leases are shared out among the live workers (``runtime.pubsub.leases``).
    spread: bool
    #: The delivery options the kind declares for its own subscriptions (None: only the common ones).
    options: type[KindOptions] | None

    @classmethod
    def build(cls, tools: KindTools) -> Subscriber:
        """The kind's plug-in of one worker."""

    @staticmethod
    def check(where: str, service: str, push_url: str, options: DeliveryOptions) -> None:
        """ConfigError unless a new subscription of this kind has what it needs (its options already typed).

        A static method: the object files are checked before any worker has made its plug-ins.
        """

    def wants_delivery(self, sub: SubInfo) -> bool:
        """Whether this worker should try to hold sub's delivery lease now (and so run its delivery loop)."""

    def deliverer(self, ctx: Context, sub: SubInfo) -> Deliverer:
        """What a delivery loop of sub calls (delivered kinds only)."""

    @staticmethod
    def refused_field(service: str, security: str, push_url: str) -> tuple[str, str] | None:
        """See ``KindHooks.refused_field``."""

    @staticmethod
    def created(conn: Connection, sub_id: int, now: float) -> None:
        """See ``KindHooks.created``."""

    @staticmethod
    def undelivered(conn: Connection) -> set[int]:
        """See ``KindHooks.undelivered``."""

    @staticmethod
    def sweep(conn: Connection, registry: Registry, subs: list[SubInfo], now: float,
              dead_owner_secs: float) -> list[tuple[SubInfo, str]]:
        """See ``KindHooks.sweep``."""

    @staticmethod
    def admin_fields(read: Read, subs: list[SubInfo]) -> dict[int, dict[str, Any]]:
        """See ``KindHooks.admin_fields``."""
