"""Pull subscriptions read by REST clients: taking messages, and acknowledging them.

A pull takes the head of one or several queues of one caller, merged into one order (priority
high first, then publication; the same message queued for two of the caller's subscriptions is
handed over once), up to ``max_messages`` and ``max_len`` characters of data in total. The first
message that does not fit ends the batch, so a message larger than ``max_len`` at the head stays
queued and nothing is returned.

Two ways to acknowledge:

- ``auto`` (Zato's behaviour): what is handed over leaves the queue in the same transaction.
- ``manual``: the entries are leased to the caller for ``ack_deadline`` seconds under an ``ack_id``
  (``QueueEntry.ack_id``, with the deadline in ``next_attempt_at``) and their attempt is counted
  at once. ``ack`` removes them. An entry whose lease ran out is simply due again: the next pull
  hands it over with a new ack_id and its attempt counted, so nothing is lost if the client dies.
  An entry handed over ``max_attempts`` times without an ack goes to the dead-letter queue.

Entries of topics the caller may no longer read (a pattern subscription that inherited a topic's
backlog, a permission withdrawn after publication) are dead-lettered with reason
``no_permission``, never handed over. Expired messages are left to the sweeper.

Nothing is acked or leased before it is rendered: each message chosen is turned into its final
JSON text (``Pulled.text``, within the broker's JSON limits) in the transaction that acks or
leases it, and the answer is composed of those texts, so that nothing can fail once they are
gone from the queue. A message that cannot be rendered (stored data that is not JSON within the
limits, NaN, text that is not Unicode) is dead-lettered with reason ``unrenderable`` and the rest
of the batch is handed over.

On PostgreSQL, concurrent pulls of one queue lock what they take (``FOR UPDATE SKIP LOCKED``) and
so never hand one entry to two callers; SQLite serialises write transactions anyway.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, delete, func, select, update
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from runtime import json_limits
from runtime.db.blocking import run_transaction
from runtime.db.models import Message, QueueEntry
from runtime.errors import StorageUnavailable, UnrenderableMessage
from runtime.json_limits import DEFAULT_LIMITS, JsonLimits
from runtime.pubsub import store
from runtime.pubsub.dead_letters import Moves
from runtime.pubsub.retry import REASON_UNRENDERABLE
from runtime.pubsub.store import Delivery

if TYPE_CHECKING:
    from runtime.pubsub.broker import Broker
    from runtime.pubsub.registry import SubInfo

_log = logging.getLogger(__name__)

#: Messages one pull hands over unless told otherwise, and at most.
DEFAULT_MAX_MESSAGES = 50
MAX_MESSAGES = 1000

#: Characters of data one pull hands over unless told otherwise, and at most.
DEFAULT_MAX_LEN_CHARS = 20_000_000

#: How long a manual-ack pull leases its messages unless told otherwise, and at most.
DEFAULT_ACK_DEADLINE_SECS = 30.0
MAX_ACK_DEADLINE_SECS = 12 * 3600.0

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

#: The columns of a queue entry with its message, in the order of Delivery's fields.
_DELIVERY_COLUMNS = (QueueEntry.id, QueueEntry.sub_id, QueueEntry.delivery_count, QueueEntry.next_attempt_at,
                     QueueEntry.last_error, QueueEntry.recv_time, Message.id, Message.msg_id, Message.topic_name,
                     Message.data, Message.mime_type, Message.priority, Message.pub_time, Message.expiration_time,
                     Message.publisher, Message.correl_id, Message.in_reply_to, Message.ext_client_id,
                     Message.has_gd, Message.size, Message.topic_id, Message.ext_pub_time)


@dataclass
class Pulled:
    """One message handed over: its delivery (attempt counted), the subscription, and its ack_id in manual mode."""

    delivery: Delivery
    sub: SubInfo
    ack_id: str | None = None
    #: The message as the UTF-8 JSON text of ``{data, meta}``, rendered before it was acked or leased.
    text: bytes = b''


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn a database that cannot be reached (or is locked) into StorageUnavailable (503)."""
    try:
        yield
    except (OperationalError, InterfaceError, PoolTimeout) as e:
        # The class name only: a driver's message may quote statement parameters, i.e. message data.
        cause = type(getattr(e, 'orig', None) or e).__name__
        _log.error('database unavailable: %s', cause)
        raise StorageUnavailable(f'storage unavailable, nothing was changed ({cause})') from None


def new_ack_id() -> str:
    """A new lease id (128 random bits)."""
    return ACK_ID_PREFIX + os.urandom(16).hex()


def is_ack_id(value: str) -> bool:
    """Whether value has the form of an ack_id this server makes."""
    return len(value) == _ACK_ID_LEN and value.startswith(ACK_ID_PREFIX) and _is_hex(value[len(ACK_ID_PREFIX):])


def _is_hex(text: str) -> bool:
    return all(c in '0123456789abcdef' for c in text)


def _candidates(conn: Connection, sub_id: int, limit: int, now: float) -> list[Any]:
    """The due head of one queue, without the data itself (only its length)."""
    query = (select(QueueEntry.id, QueueEntry.sub_id, QueueEntry.message_id, QueueEntry.priority,
                    QueueEntry.delivery_count, QueueEntry.ack_id, Message.topic_name,
                    func.length(Message.data).label('chars'))
             .join(Message, Message.id == QueueEntry.message_id)
             .where(QueueEntry.sub_id == sub_id, QueueEntry.next_attempt_at <= now, Message.expiration_time > now)
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


def take(broker: Broker, subs: list[SubInfo], max_messages: int, max_len: int, lease_secs: float | None,
         may_read: Callable[[SubInfo, str], bool]) -> list[Pulled]:
    """Hand over the heads of subs' queues as one queue; lease_secs None acks them at once (auto)."""
    by_id = {s.id: s for s in subs}
    limits = broker.json_limits

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
            moves.add(conn, full[row.id], reason, error, by_id[row.sub_id], log=True)
        pulled, chars, unrenderable = [], 0, False
        for row in chosen:
            entries = [row, *twins[row.message_id]]
            d = full[row.id]
            p = Pulled(d, by_id[row.sub_id], None if lease_secs is None else new_ack_id())
            d.delivery_count += 1
            try:
                p.text = render(p, now, limits)
            except UnrenderableMessage as e:
                d.delivery_count -= 1  # never handed over
                unrenderable = True
                for entry in entries:
                    moves.add(conn, full[entry.id], REASON_UNRENDERABLE, str(e), by_id[entry.sub_id], log=True)
                continue
            if lease_secs is None:
                store.ack(conn, [e.id for e in entries])
            else:
                conn.execute(update(QueueEntry).where(QueueEntry.id.in_([e.id for e in entries])).values(
                    ack_id=p.ack_id, next_attempt_at=now + lease_secs,
                    delivery_count=QueueEntry.delivery_count + 1))
            pulled.append(p)
            chars += row.chars
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

    with storage_errors():
        pulled = broker.dead_letterer.run(lambda w: run_transaction(broker.engine, w), work)
    if lease_secs is None:
        for p in pulled:
            broker.observers.emit('after_deliver', p.sub, p.delivery, True, None, 0.0)
    return pulled


def ack(broker: Broker, subs: list[SubInfo], ack_ids: list[str]) -> set[str]:
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
        acked = run_transaction(broker.engine, work)
    for _ack_id, d in acked:
        broker.observers.emit('after_deliver', by_id[d.sub_id], d, True, None, 0.0)
    return {ack_id for ack_id, _d in acked}


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


def meta_dict(p: Pulled, now: float) -> dict[str, Any]:
    """A pulled message's meta as the REST API returns it (Zato 4.1's keys, plus ours)."""
    d = p.delivery
    meta: dict[str, Any] = {
        'topic_name': d.topic_name, 'size': d.size, 'priority': d.priority,
        'expiration': round(d.expiration_time - d.pub_time), 'msg_id': d.msg_id, 'sub_key': p.sub.sub_key,
        'pub_time_iso': d.ext_pub_time or _iso(d.pub_time), 'recv_time_iso': _iso(d.recv_time),
        'expiration_time_iso': _iso(d.expiration_time),
        'time_since_pub': str(timedelta(seconds=max(0.0, now - d.pub_time))),
        'time_since_recv': str(timedelta(seconds=max(0.0, now - d.recv_time))),
        'delivery_count': d.delivery_count,
    }
    for name in ('correl_id', 'in_reply_to', 'ext_client_id'):
        value = getattr(d, name)
        if value:
            meta[name] = value
    if d.mime_type != 'application/json':
        meta['mime_type'] = d.mime_type  # text as it was published, or base64 ('...;base64') for bytes
    if p.ack_id is not None:
        meta['ack_id'] = p.ack_id
    return meta


def message_dict(p: Pulled, now: float, limits: JsonLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """A pulled message as the REST API returns it: {data, meta}; UnrenderableMessage if its data is not JSON."""
    d = p.delivery
    data: Any = d.data
    if d.mime_type == 'application/json':
        try:
            data = json_limits.loads(d.data, limits)
        except json_limits.InvalidJson as e:
            raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
    return {'data': data, 'meta': meta_dict(p, now)}


def render(p: Pulled, now: float, limits: JsonLimits = DEFAULT_LIMITS) -> bytes:
    """The UTF-8 JSON text of message_dict(p, now); UnrenderableMessage if the message cannot be rendered.

    Stored JSON data is checked against the limits and then used as it is stored (it was written
    by json.dumps at publication): it is not parsed into objects only to be written out again.
    """
    d = p.delivery
    try:
        if d.mime_type == 'application/json':
            json_limits.loads(d.data, limits)
            data = d.data.strip()
        else:
            data = json.dumps(d.data, ensure_ascii=False)
        meta = json.dumps(meta_dict(p, now), ensure_ascii=False, separators=(',', ':'), allow_nan=False)
        return f'{{"data":{data},"meta":{meta}}}'.encode()
    except json_limits.InvalidJson as e:
        raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
    except UnicodeEncodeError:
        raise UnrenderableMessage(d.msg_id, 'it has text that is not valid Unicode (a lone surrogate)') from None
    except (TypeError, ValueError, RecursionError) as e:
        raise UnrenderableMessage(d.msg_id, f'it cannot be rendered as JSON ({type(e).__name__})') from None
