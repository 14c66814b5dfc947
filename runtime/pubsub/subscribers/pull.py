"""Pull subscriptions: queues their readers take messages from, a service or a REST client alike.

There is one pull path: a service's ``self.pubsub.get_messages`` (``get_messages``) and a REST
client's ``POST /pubsub/messages/get`` (``take``) run the same transaction, with the same expiry
handling, dead-lettering, limits and observers; only the view differs (``service_view`` for a
service, the REST API's ``{data, meta}`` JSON text for a client, see ``runtime.pubsub.message``).
Workers do not deliver pull subscriptions: ``PullSubscriber`` is the kind's plug-in.

A pull takes the head of one or several queues of one caller, merged into one order (priority
high first, then publication; the same message queued for two of the caller's subscriptions is
handed over once), up to ``max_messages`` and ``max_len`` characters of data in total. The first
message that does not fit ends the batch, so a message larger than ``max_len`` at the head stays
queued and nothing is returned.

Two ways to acknowledge:

- ``auto`` (Zato's behaviour): what is handed over leaves the queue. A service's pull
  (``get_messages``) removes it in the same transaction. A REST client's pull (``hold``) leases it
  under hold ids that are never shown for ``HOLD_SECS``; the HTTP layer removes it (``Held.settle``)
  once the answer was written to the client's socket, and puts it back as it was (``Held.release``)
  when the answer could not be written or the client was gone. A client that stops reading therefore
  loses nothing; if the server dies in between, the hold runs out and the messages are due again.
- ``manual``: the entries are leased to the caller for ``ack_deadline`` seconds under an ``ack_id``
  (``QueueEntry.ack_id``, with the deadline in ``next_attempt_at``) and their attempt is counted
  at once. ``ack`` removes them. An entry whose lease ran out is simply due again: the next pull
  hands it over with a new ack_id and its attempt counted, so nothing is lost if the client dies.
  An entry handed over ``max_attempts`` times without an ack goes to the dead-letter queue.

Entries of topics the caller may no longer read (a pattern subscription that inherited a topic's
backlog, a permission withdrawn after publication) are dead-lettered with reason
``no_permission``, never handed over. Expired messages met at the head of a queue are dead-lettered
with reason ``expired``, never handed over (the sweeper takes those nobody pulls).

Nothing is acked or leased before it is rendered: each message chosen is turned into its final
view (``Pulled.rendered``: for a REST client the JSON text, within the broker's JSON limits) in the
transaction that acks or leases it, and the answer is composed of those, so that nothing can fail once they are
gone from the queue. A message that cannot be rendered (stored data that is not JSON within the
limits, NaN, text that is not Unicode) is dead-lettered with reason ``unrenderable`` and the rest
of the batch is handed over.

On PostgreSQL, concurrent pulls of one queue lock what they take (``FOR UPDATE SKIP LOCKED``) and
so never hand one entry to two callers; SQLite serialises write transactions anyway.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from sqlalchemy import Connection, delete, func, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import Message, QueueEntry
from runtime.db.unavailable import storage_errors
from runtime.errors import SubscriptionNotFound, UnrenderableMessage
from runtime.pubsub import statements
from runtime.pubsub.dead_letters import DeadLetterer, Moves
from runtime.pubsub.message import Delivery, render_pull, service_view
from runtime.pubsub.retry import REASON_UNRENDERABLE
from runtime.pubsub.subscribers.base import KindHooks
from runtime.util.json_limits import DEFAULT_LIMITS, JsonLimits
from runtime.util.random_ids import random_hex

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from runtime.pubsub.observers import Observers
    from runtime.pubsub.options import DeliveryOptions
    from runtime.pubsub.registry import Registry, SubInfo
    from runtime.pubsub.subscribers.base import Context, Deliverer, KindTools

_log = logging.getLogger(__name__)

#: The kind's name, as subscriptions store it.
KIND_PULL = 'pull'

#: Messages one pull hands over unless told otherwise, and at most.
DEFAULT_MAX_MESSAGES = 50
MAX_MESSAGES = 1000

#: Characters of data one pull hands over unless told otherwise, and at most.
DEFAULT_MAX_LEN_CHARS = 20_000_000

#: How long a manual-ack pull leases its messages unless told otherwise, and at most.
DEFAULT_ACK_DEADLINE_SECS = 30.0
MAX_ACK_DEADLINE_SECS = 12 * 3600.0

#: How long an auto-ack REST pull holds what it hands over while its answer is written: past it (the
#: server died before it could settle or release them) the messages are due again.
HOLD_SECS = 60.0

#: Most ack_ids one acknowledgement may name.
MAX_ACK_IDS = 1000

#: Most times one pull looks again for messages in place of those it dead-lettered on the way.
MAX_REFILLS = 10

#: ack_ids are this prefix and 32 hex digits.
ACK_ID_PREFIX = 'ack.'
_ACK_ID_LEN = len(ACK_ID_PREFIX) + 32

ACK_AUTO = 'auto'
ACK_MANUAL = 'manual'
ACK_MODES = (ACK_AUTO, ACK_MANUAL)

#: Dead-letter reasons of pulls.
REASON_NO_PERMISSION = 'no_permission'
REASON_MAX_ATTEMPTS = 'max_attempts'
REASON_EXPIRED = 'expired'

#: The columns of a queue entry with its message, in the order of Delivery's fields.
_DELIVERY_COLUMNS = (QueueEntry.id, QueueEntry.sub_id, QueueEntry.delivery_count, QueueEntry.next_attempt_at,
                     QueueEntry.last_error, QueueEntry.recv_time, Message.id, Message.msg_id, Message.topic_name,
                     Message.data, Message.mime_type, Message.priority, Message.pub_time, Message.expiration_time,
                     Message.publisher, Message.correl_id, Message.in_reply_to, Message.ext_client_id,
                     Message.has_gd, Message.size, Message.topic_id, Message.ext_pub_time)


class PullSource(Protocol):
    """What a pull needs of the broker: storage, dead-lettering, observers, limits, subscriptions."""

    engine: Engine
    json_limits: JsonLimits
    dead_letterer: DeadLetterer
    observers: Observers
    registry: Registry


@dataclass
class Pulled:
    """One message handed over: its delivery (attempt counted), the subscription, and its ack_id in manual mode."""

    delivery: Delivery
    sub: SubInfo
    ack_id: str | None = None
    #: The message as its reader gets it, rendered before it was acked or leased (see the renderers below).
    rendered: Any = b''
    #: The id it is leased under: its ack_id in manual mode, a hold id nobody sees in a held auto pull.
    lease_id: str | None = None

    @property
    def text(self) -> bytes:
        """The UTF-8 JSON text of ``{data, meta}`` of a message rendered for a REST client."""
        return self.rendered


#: Renders a message being handed over: (pulled, now, limits) -> what its reader gets; UnrenderableMessage.
Renderer = Callable[[Pulled, float, JsonLimits], Any]


def render(p: Pulled, now: float, limits: JsonLimits = DEFAULT_LIMITS) -> bytes:
    """A message as a REST client pulls it: the UTF-8 JSON text of ``{data, meta}``."""
    return render_pull(p.delivery, p.sub.sub_key, now, p.ack_id, limits)


def render_for_service(p: Pulled, now: float, limits: JsonLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """A message as a service pulls it: its data decoded, with its metadata (``service_view``)."""
    return service_view(p.delivery, p.sub.sub_key, limits)


def _allow_all(_sub: SubInfo, _topic: str) -> bool:
    return True


def new_ack_id() -> str:
    """A new lease id (128 random bits)."""
    return ACK_ID_PREFIX + random_hex(16)


def is_ack_id(value: str) -> bool:
    """Whether value has the form of an ack_id this server makes."""
    return len(value) == _ACK_ID_LEN and value.startswith(ACK_ID_PREFIX) and _is_hex(value[len(ACK_ID_PREFIX):])


def _is_hex(text: str) -> bool:
    return all(c in '0123456789abcdef' for c in text)


def _candidates(conn: Connection, sub_id: int, limit: int, now: float) -> list[Any]:
    """The due head of one queue, without the data itself (only its length)."""
    query = (select(QueueEntry.id, QueueEntry.sub_id, QueueEntry.message_id, QueueEntry.priority,
                    QueueEntry.delivery_count, QueueEntry.ack_id, Message.topic_name,
                    func.length(Message.data).label('chars'), Message.expiration_time)
             .join(Message, Message.id == QueueEntry.message_id)
             .where(QueueEntry.sub_id == sub_id, QueueEntry.next_attempt_at <= now)
             .order_by(QueueEntry.priority, QueueEntry.message_id)
             .limit(limit))
    if conn.dialect.name == 'postgresql':
        query = query.with_for_update(of=QueueEntry, skip_locked=True)
    return list(conn.execute(query).all())


def _deliveries(conn: Connection, entry_ids: list[int]) -> dict[int, Delivery]:
    if not entry_ids:
        return {}
    rows = conn.execute(select(*_DELIVERY_COLUMNS).join(Message, Message.id == QueueEntry.message_id)
                        .where(QueueEntry.id.in_(entry_ids))).all()
    return {row[0]: Delivery(*row) for row in rows}


def take(source: PullSource, subs: list[SubInfo], max_messages: int, max_len: int, lease_secs: float | None,
         may_read: Callable[[SubInfo, str], bool], renderer: Renderer = render) -> list[Pulled]:
    """Hand over the heads of subs' queues as one queue; lease_secs None acks them at once (auto).

    StorageUnavailable when the database cannot be reached.
    """
    with storage_errors():
        return _take(source, subs, max_messages, max_len, lease_secs, may_read, renderer)


@dataclass
class Held:
    """An auto-ack pull's messages, leased under hold ids until its answer was written (settle) or not (release)."""

    source: PullSource
    subs: list[SubInfo]
    pulled: list[Pulled]
    settled: bool = False

    def settle(self) -> None:
        """The answer reached the client's socket: remove the messages from their queues (delivered).

        StorageUnavailable when the database cannot be reached: the hold then runs out and they come again.
        """
        if not self.settled:
            self.settled = True
            ack(self.source, self.subs, [p.lease_id for p in self.pulled if p.lease_id])

    def release(self) -> None:
        """The answer was not written: put the messages back as they were, due at once, the attempt not counted.

        StorageUnavailable when the database cannot be reached: the hold then runs out and they come again.
        """
        if not self.settled:
            self.settled = True
            ids = [p.lease_id for p in self.pulled if p.lease_id]
            if not ids:
                return
            sub_ids = [s.id for s in self.subs]

            def work(conn: Connection) -> None:
                conn.execute(update(QueueEntry).where(QueueEntry.sub_id.in_(sub_ids), QueueEntry.ack_id.in_(ids))
                             .values(ack_id=None, next_attempt_at=time.time(),
                                     delivery_count=QueueEntry.delivery_count - 1))

            with storage_errors():
                run_transaction(self.source.engine, work)


def hold(source: PullSource, subs: list[SubInfo], max_messages: int, max_len: int,
         may_read: Callable[[SubInfo, str], bool], renderer: Renderer = render) -> Held:
    """An auto-ack pull whose messages stay held until the answer is written: ``take`` with a hidden lease.

    StorageUnavailable when the database cannot be reached.
    """
    with storage_errors():
        pulled = _take(source, subs, max_messages, max_len, HOLD_SECS, may_read, renderer, hidden=True)
    return Held(source, subs, pulled)


def get_messages(source: PullSource, sub_key: str, max_messages: int = DEFAULT_MAX_MESSAGES) -> list[dict[str, Any]]:
    """Take up to max_messages from a service's pull subscription (acked as they are handed over)."""
    sub = source.registry.subs_by_key.get(sub_key)
    if sub is None or sub.kind != KIND_PULL:
        raise SubscriptionNotFound('pull subscription')
    # Services always may read their own subscriptions, and take whole messages whatever their size.
    pulled = _take(source, [sub], max(1, min(max_messages, MAX_MESSAGES)), sys.maxsize, None, _allow_all,
                   render_for_service)
    return [p.rendered for p in pulled]


def _take(source: PullSource, subs: list[SubInfo], max_messages: int, max_len: int, lease_secs: float | None,
          may_read: Callable[[SubInfo, str], bool], renderer: Renderer, hidden: bool = False) -> list[Pulled]:
    """The one pull transaction; hidden leases without showing the lease id (``hold``)."""
    by_id = {s.id: s for s in subs}
    limits = source.json_limits

    def one_round(conn: Connection, moves: Moves, now: float, room: int,
                  budget: int) -> tuple[list[Pulled], int, bool]:
        """Up to room messages of up to budget characters; with their characters, and whether any was dead-lettered."""
        rows = [r for sub in subs for r in _candidates(conn, sub.id, room, now)]
        rows.sort(key=lambda r: (r.priority, r.message_id, r.id))
        chosen: list[Any] = []
        twins: dict[int, list[Any]] = {}  # message_id -> the same message's entries in the caller's other queues
        doomed: list[tuple[Any, str, str]] = []
        total = 0
        for row in rows:
            sub = by_id[row.sub_id]
            if row.message_id in twins:
                twins[row.message_id].append(row)
                continue
            if row.expiration_time <= now:  # never handed over: dead-lettered, as the sweeper does
                doomed.append((row, REASON_EXPIRED, ''))
                continue
            if not may_read(sub, row.topic_name):
                doomed.append((row, REASON_NO_PERMISSION, f'security definition {sub.security!r} has no sub '
                                                          f'permission for topic {row.topic_name!r}'))
                continue
            if row.ack_id is not None and row.delivery_count >= sub.options.max_attempts:
                doomed.append((row, REASON_MAX_ATTEMPTS, f'handed over {row.delivery_count} times without an ack'))
                continue
            if len(chosen) >= room or total + row.chars > budget:
                break  # in order: nothing behind a message that does not fit
            total += row.chars
            chosen.append(row)
            twins[row.message_id] = []
        ids = [r.id for r in chosen] + [t.id for ts in twins.values() for t in ts] + [r.id for r, _, _ in doomed]
        full = _deliveries(conn, ids)
        for row, reason, error in doomed:
            d = full[row.id]
            if reason == REASON_EXPIRED:
                moves.add(conn, d, reason, d.last_error or 'the message expired unread', by_id[row.sub_id])
            else:
                moves.add(conn, d, reason, error, by_id[row.sub_id], log=True)
        pulled, chars, unrenderable = [], 0, False
        acked: list[int] = []
        for row in chosen:
            entries = [row, *twins[row.message_id]]
            d = full[row.id]
            lease_id = None if lease_secs is None else new_ack_id()
            p = Pulled(d, by_id[row.sub_id], None if hidden else lease_id, lease_id=lease_id)
            d.delivery_count += 1
            try:
                p.rendered = renderer(p, now, limits)
            except UnrenderableMessage as e:
                d.delivery_count -= 1  # never handed over
                unrenderable = True
                for entry in entries:
                    moves.add(conn, full[entry.id], REASON_UNRENDERABLE, str(e), by_id[entry.sub_id], log=True)
                continue
            if lease_secs is None:
                acked += [e.id for e in entries]
            else:
                conn.execute(update(QueueEntry).where(QueueEntry.id.in_([e.id for e in entries])).values(
                    ack_id=lease_id, next_attempt_at=now + lease_secs,
                    delivery_count=QueueEntry.delivery_count + 1))
            pulled.append(p)
            chars += row.chars
        if lease_secs is None:
            statements.ack(conn, acked)  # before the next round looks at the queues again
        return pulled, chars, bool(doomed) or unrenderable

    def work(conn: Connection, moves: Moves) -> list[Pulled]:
        now = time.time()
        pulled: list[Pulled] = []
        budget = max_len
        for _round in range(1 + MAX_REFILLS):
            got, chars, dropped = one_round(conn, moves, now, max_messages - len(pulled), budget)
            pulled += got
            budget -= chars
            # What was dead-lettered on the way is gone from the queues: look again for what comes after it.
            if not dropped or len(pulled) >= max_messages:
                break
        return pulled

    pulled = source.dead_letterer.run(lambda w: run_transaction(source.engine, w), work)
    if lease_secs is None:  # handed over and acked: delivered
        for p in pulled:
            source.observers.emit('after_deliver', p.sub, p.delivery, True, None, 0.0)
    return pulled


def ack(source: PullSource, subs: list[SubInfo], ack_ids: list[str]) -> set[str]:
    """Remove the entries leased under ack_ids from subs' queues; returns the ack_ids that were found."""
    by_id = {s.id: s for s in subs}

    def work(conn: Connection) -> list[tuple[str, Delivery]]:
        rows = conn.execute(select(QueueEntry.id, QueueEntry.ack_id).where(
            QueueEntry.sub_id.in_(list(by_id)), QueueEntry.ack_id.in_(ack_ids))).all()
        found = _deliveries(conn, [r.id for r in rows])
        if rows:
            conn.execute(delete(QueueEntry).where(QueueEntry.id.in_([r.id for r in rows])))
        return [(r.ack_id, found[r.id]) for r in rows]

    with storage_errors():
        acked = run_transaction(source.engine, work)
    for _ack_id, d in acked:
        source.observers.emit('after_deliver', by_id[d.sub_id], d, True, None, 0.0)
    return {ack_id for ack_id, _d in acked}


class PullSubscriber(KindHooks):
    """Pull subscriptions: read by their clients (``take``, ``get_messages``), never delivered by a worker."""

    kind = KIND_PULL
    delivered = False
    queue_limited = True
    spread = False  # no delivery lease: clients read their queues
    options = None

    @classmethod
    def build(cls, tools: KindTools) -> PullSubscriber:
        """The plug-in of a worker."""
        return cls()

    @staticmethod
    def check(where: str, service: str, push_url: str, options: DeliveryOptions) -> None:
        """A pull subscription needs nothing more: its reader is its service or security definition."""

    @staticmethod
    def refused_field(service: str, security: str, push_url: str) -> tuple[str, str] | None:
        """Its reader: a security definition, or a service for a service pull queue."""
        if security or service:
            return None
        return 'security', 'is required for a pull subscription (or service, for a service pull queue)'

    def wants_delivery(self, sub: SubInfo) -> bool:
        """Never: no worker delivers a pull subscription."""
        return False

    def deliverer(self, ctx: Context, sub: SubInfo) -> Deliverer:
        """Never asked: workers do not deliver pull subscriptions."""
        raise TypeError('pull subscriptions are read by their clients, not delivered')
