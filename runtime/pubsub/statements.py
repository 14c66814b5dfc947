"""Every SQL statement of the broker: topics, subscriptions, messages, queues, dead letters.

A subscriber kind's own tables are its own (the WebSocket kind's ``conduit_ws_client``:
``runtime.pubsub.subscribers.websocket.clients``).

Functions take an open ``Connection`` inside the caller's transaction, so that what must be
atomic (a message and its queue entries; a dead letter and the queue entry it replaces) is one
transaction. Nothing here decides policy: the broker and the delivery loop do.
"""

from __future__ import annotations

import json
import logging
import secrets
import time
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, and_, bindparam, delete, exists, func, insert, select, update

from runtime.config import PubSubSection
from runtime.db.models import Base, DeadLetter, Message, QueueEntry, Subscription, Topic
from runtime.errors import ConfigError
from runtime.pubsub import queue_sql
from runtime.pubsub.failure import MAX_TRACEBACK_CHARS
from runtime.pubsub.message import Delivery, Publication
from runtime.pubsub.options import DeliveryOptions, OptionTypes
from runtime.pubsub.registry import Registry, SubInfo, TopicInfo, parse_options
from runtime.pubsub.topics import matches, normalize

if TYPE_CHECKING:
    from runtime.pubsub.kinds import Kinds

#: Columns of a message handed to subscribers.
_MESSAGE_COLUMNS = (Message.id, Message.msg_id, Message.topic_name, Message.data, Message.mime_type,
                    Message.priority, Message.pub_time, Message.expiration_time, Message.publisher,
                    Message.correl_id, Message.in_reply_to, Message.ext_client_id, Message.has_gd, Message.size,
                    Message.topic_id, Message.ext_pub_time)

_log = logging.getLogger(__name__)

#: The tables whose rows reference a subscription (a kind's own, such as the WebSocket kind's client
#: rows): deleted with the subscription, whichever kind owns them.
_KIND_TABLES = tuple(t for t in Base.metadata.sorted_tables
                     if any(fk.column.table is Subscription.__table__ for fk in t.foreign_keys))

def new_sub_key() -> str:
    """A new secret subscription key: 160 bits of randomness."""
    return 'sk.' + secrets.token_hex(20)


@dataclass
class Settlement:
    """What became of a delivered batch, to be stored: acks, retries, dead letters, attempts taken back."""

    acked: list[int]
    retries: list[tuple[Delivery, float, str]]
    dead: list[tuple[Delivery, str, str]]
    uncount: list[int]


# Registry


def _topics(conn: Connection) -> list[TopicInfo]:
    return [TopicInfo(id=r.id, name=r.name, is_active=r.is_active, has_gd=r.has_gd,
                      is_api_sub_allowed=r.is_api_sub_allowed, on_no_subs=r.on_no_subs,
                      max_depth_gd=r.max_depth_gd, max_depth_non_gd=r.max_depth_non_gd,
                      on_max_depth=r.on_max_depth, depth_check_freq=r.depth_check_freq,
                      limit_retention=r.limit_retention, limit_message_expiry=r.limit_message_expiry,
                      limit_sub_inactivity=r.limit_sub_inactivity, hook_service=r.hook_service,
                      is_service_topic=r.is_service_topic)
            for r in conn.execute(select(Topic)).all()]


def load_registry(conn: Connection, settings: PubSubSection, option_types: OptionTypes) -> Registry:
    """Every topic and subscription, as a Registry (options typed by option_types, over settings)."""
    subs = []
    # Most subscriptions share a few option texts (every WebSocket client's is its window): each text is
    # checked once per load and kind, not once per subscription.
    parsed: dict[tuple[str, str], DeliveryOptions] = {}
    for r in conn.execute(select(Subscription)).all():
        options = parsed.get((r.kind, r.options))
        if options is None:
            try:
                options = option_types.typed(settings, r.kind, parse_options(r.options), f'subscription #{r.id}')
            except (ConfigError, ValueError) as e:
                # One subscription stored with options a newer version refuses must not stop all the others.
                _log.error('subscription #%d: stored delivery options are invalid (%s); server defaults apply',
                           r.id, e)
                options = option_types.typed(settings, r.kind, {}, f'subscription #{r.id}')
            else:
                parsed[(r.kind, r.options)] = options
        subs.append(SubInfo(id=r.id, sub_key=r.sub_key, pattern=r.pattern, kind=r.kind, service=r.service,
                            security=r.security, push_url=r.push_url, is_active=r.is_active, options=options))
    return Registry(_topics(conn), subs)


def load_topics(conn: Connection) -> Registry:
    """Every topic, as a Registry without subscriptions (what a new subscription's backlog hand-over needs)."""
    return Registry(_topics(conn))


def create_topic(conn: Connection, name: str, attrs: dict[str, Any], is_service_topic: bool = False,
                 origin: str = 'api') -> int:
    """Insert a topic; IntegrityError if one of that name (case-insensitively) exists."""
    return conn.execute(insert(Topic).values(name=name, name_key=normalize(name), created_at=time.time(),
                                             is_service_topic=is_service_topic, origin=origin, **attrs)
                        ).inserted_primary_key[0]


def create_subscription(conn: Connection, registry: Registry, kinds: Kinds, pattern: str, kind: str,
                        service: str = '', security: str = '', push_url: str = '',
                        options: dict[str, Any] | None = None, origin: str = 'api',
                        is_active: bool = True) -> tuple[int, str]:
    """Insert a subscription and hand it the messages its topics accepted with no subscriber.

    Its kind adds what it keeps beside it (``KindHooks.created``), in the same transaction.
    """
    sub_key = new_sub_key()
    now = time.time()
    sub_id = conn.execute(insert(Subscription).values(
        sub_key=sub_key, pattern=pattern, kind=kind, service=service, security=security, push_url=push_url,
        options=json.dumps(options or {}), origin=origin, created_at=now, is_active=is_active)).inserted_primary_key[0]
    kinds.plugin(kind).created(conn, sub_id, now)
    topic_ids = [t.id for t in registry.topics.values() if matches(pattern, t.name)]
    if topic_ids:
        hand_over_backlog(conn, sub_id, topic_ids)
    return sub_id, sub_key


def hand_over_backlog(conn: Connection, sub_id: int, topic_ids: list[int]) -> int:
    """Move messages waiting in these topics into a subscription's queue; returns how many."""
    now = time.time()
    rows = conn.execute(select(Message.id, Message.priority).where(
        Message.in_topic.is_(True), Message.topic_id.in_(topic_ids), Message.expiration_time > now)
        .order_by(Message.id)).all()
    if not rows:
        return 0
    conn.execute(insert(QueueEntry), [{'sub_id': sub_id, 'message_id': r.id, 'priority': -r.priority,
                                       'next_attempt_at': 0.0, 'recv_time': now, 'delivery_count': 0,
                                       'last_error': ''} for r in rows])
    conn.execute(update(Message).where(Message.id.in_([r.id for r in rows])).values(in_topic=False))
    notify_subscribers(conn, {sub_id})
    return len(rows)


def count_subscriptions(conn: Connection, kind: str, security: str) -> int:
    """How many subscriptions of a kind a security definition holds, counted under a lock held to the commit.

    Two workers subscribing for one definition at once must not both count one short of a limit and
    both insert: SQLite's write transactions (BEGIN IMMEDIATE) already exclude each other; PostgreSQL
    takes a transaction-scoped advisory lock keyed on the kind and definition, so the second count
    waits for the first insert's commit (each statement sees what was committed before it began).
    """
    if conn.dialect.name == 'postgresql':
        key = zlib.crc32(f'conduit_subscriptions:{kind}:{security}'.encode()) - 2**31
        conn.exec_driver_sql('SELECT pg_advisory_xact_lock(%s)', (key,))
    return conn.execute(select(func.count()).select_from(Subscription).where(
        Subscription.kind == kind, Subscription.security == security)).scalar_one()


def subscription_exists(conn: Connection, sub_key: str) -> bool:
    """Whether a subscription of that sub_key is stored (one indexed lookup, not a registry reload)."""
    return conn.execute(select(Subscription.id).where(Subscription.sub_key == sub_key)).first() is not None


def delete_subscription(conn: Connection, sub_id: int) -> None:
    """Remove a subscription with its queue, dead letters and the rows its kind keeps beside it."""
    for table in _KIND_TABLES:
        conn.execute(delete(table).where(table.c.sub_id == sub_id))
    conn.execute(delete(QueueEntry).where(QueueEntry.sub_id == sub_id))
    conn.execute(delete(DeadLetter).where(DeadLetter.sub_id == sub_id))
    conn.execute(delete(Subscription).where(Subscription.id == sub_id))


# Publishing


def insert_publications(conn: Connection, pubs: list[Publication]) -> None:
    """Store messages and their queue entries (on PostgreSQL one statement, on SQLite one per table).

    Must run in a write transaction (on SQLite: ``BEGIN IMMEDIATE``, as ``run_transaction`` does for
    writes): the message ids are taken first (see ``queue_sql.next_message_ids``) and the rows
    inserted with them. With RETURNING instead, SQLAlchemy runs a statement per row on SQLite (to
    keep parameter order), and on PostgreSQL a multi-row VALUES whose text differs with every batch
    size, which psycopg must parse anew each time; both made inserting the publisher's main cost.
    """
    if conn.dialect.name == 'postgresql':
        _publish_postgresql(conn, pubs)
        return
    ids = queue_sql.next_message_ids(conn, len(pubs))
    queue_sql.insert_messages(conn, [
        (message_id, p.msg_id, p.topic_id, p.topic_name, p.data, p.mime_type, p.priority, p.pub_time,
         p.expiration_time, p.publisher, p.correl_id, p.in_reply_to, p.ext_client_id, p.has_gd, p.size, p.in_topic,
         p.ext_pub_time)
        for p, message_id in zip(pubs, ids, strict=True)])
    entries = [(sub_id, message_id, -p.priority, 0.0, p.pub_time, 0, '')
               for p, message_id in zip(pubs, ids, strict=True) for sub_id in p.sub_ids]
    if entries:
        queue_sql.insert_entries(conn, entries)
        notify_subscribers(conn, {e[0] for e in entries})


def _publish_postgresql(conn: Connection, pubs: list[Publication]) -> None:
    """insert_publications in one statement, and so one round trip (see queue_sql.publish_statement)."""
    sql, params = publication_statement(pubs)
    conn.exec_driver_sql(sql, params)


def publication_statement(pubs: list[Publication]) -> tuple[str, tuple[Any, ...]]:
    """insert_publications on PostgreSQL as one statement to run: (sql, params)."""
    entries = [(sub_id, n, -p.priority, p.pub_time) for n, p in enumerate(pubs, 1) for sub_id in p.sub_ids]
    return queue_sql.publish_statement([
        (p.msg_id, p.topic_id, p.topic_name, p.data, p.mime_type, p.priority, p.pub_time, p.expiration_time,
         p.publisher, p.correl_id, p.in_reply_to, p.ext_client_id, p.has_gd, p.size, p.in_topic, p.ext_pub_time)
        for p in pubs], entries, _notify_payload({e[0] for e in entries}))


def _notify_payload(sub_ids: set[int]) -> tuple[str, str] | None:
    """The channel and payload that tell other workers which queues got entries, or None for none."""
    if not sub_ids:
        return None
    payload = ','.join(map(str, sorted(sub_ids)))
    return NOTIFY_CHANNEL, payload if len(payload) <= MAX_NOTIFY_PAYLOAD else '*'


#: PostgreSQL channel on which commits announce the subscriptions that got new queue entries.
NOTIFY_CHANNEL = 'conduit_queue'

#: Longest NOTIFY payload we send; past it we send '*' (wake every loop), as PostgreSQL caps payloads.
MAX_NOTIFY_PAYLOAD = 7000




def notify_subscribers(conn: Connection, sub_ids: set[int]) -> None:
    """On PostgreSQL, tell other workers (at commit) which queues got entries; a no-op on SQLite."""
    notify = _notify_payload(sub_ids)
    if notify is not None and conn.dialect.name == 'postgresql':
        conn.exec_driver_sql('SELECT pg_notify(%s, %s)', notify)


def topic_depth(conn: Connection, topic_id: int, has_gd: bool) -> int:
    """Messages waiting in a topic (accepted with no subscriber, not yet in any queue)."""
    return conn.execute(select(func.count()).select_from(Message).where(
        Message.topic_id == topic_id, Message.in_topic.is_(True), Message.has_gd.is_(has_gd))).scalar_one()


# Delivering


_NEXT_DUE = select(func.min(QueueEntry.next_attempt_at)).where(
    QueueEntry.sub_id == bindparam('sub_id'), QueueEntry.ack_id.is_(None))


def fetch_batch(conn: Connection, sub_id: int, limit: int, due_before: float | None = None) -> list[Delivery]:
    """The head of a queue: high priority first, then publication order.

    With due_before, only entries whose next attempt is due by then (err_should_block=false);
    without it, the head whether due or not (strict order: the caller waits for it).
    """
    batch = [Delivery(*row) for row in queue_sql.head(conn, sub_id, limit, due_before)]
    for d in batch:
        d.has_gd = bool(d.has_gd)  # SQLite answers 0 or 1
    return batch


def take_batch(conn: Connection, sub_id: int, limit: int, due_before: float | None = None) -> list[Delivery]:
    """fetch_batch, with the attempt of every entry taken counted (on PostgreSQL in the same statement)."""
    batch = [Delivery(*row) for row in queue_sql.take(conn, sub_id, limit, due_before)]
    for d in batch:
        d.has_gd = bool(d.has_gd)  # SQLite answers 0 or 1
    return batch


def next_due(conn: Connection, sub_id: int) -> float | None:
    """When the earliest waiting entry of a queue is due, or None for an empty queue."""
    return conn.execute(_NEXT_DUE, {'sub_id': sub_id}).scalar()


count_attempt = queue_sql.count_attempt
uncount_attempt = queue_sql.uncount_attempt
ack = queue_sql.ack


def schedule_retry(conn: Connection, entry_id: int, at: float, error: str, traceback: str = '') -> None:
    """Keep an entry for a later attempt, with the error (and traceback) of the last one."""
    conn.execute(update(QueueEntry).where(QueueEntry.id == entry_id)
                 .values(next_attempt_at=at, last_error=error[:4000],
                         last_traceback=traceback[-MAX_TRACEBACK_CHARS:] or None))


def dead_letter(conn: Connection, d: Delivery, reason: str, error: str) -> None:
    """Move an entry to its subscription's dead-letter queue.

    An in-memory (non-GD) entry has a negative id and no stored message: its message is stored
    now, so that the dead letter can be inspected and re-driven like any other.
    """
    message_id = d.message_id
    if d.entry_id < 0:
        message_id = conn.execute(insert(Message).values(
            msg_id=d.msg_id, topic_id=d.topic_id, topic_name=d.topic_name, data=d.data, mime_type=d.mime_type,
            priority=d.priority, pub_time=d.pub_time, expiration_time=d.expiration_time, publisher=d.publisher,
            correl_id=d.correl_id, in_reply_to=d.in_reply_to, ext_client_id=d.ext_client_id, has_gd=False,
            size=d.size, in_topic=False, ext_pub_time=d.ext_pub_time)).inserted_primary_key[0]
    traceback: Any = d.last_traceback[-MAX_TRACEBACK_CHARS:] or None
    if traceback is None and d.entry_id > 0:
        # Expired while waiting for its next attempt: the traceback of the last one is stored with the entry
        # (copied in the same statement: sweeping a large expired backlog costs no extra round trips).
        traceback = select(QueueEntry.last_traceback).where(QueueEntry.id == d.entry_id).scalar_subquery()
    conn.execute(insert(DeadLetter).values(sub_id=d.sub_id, message_id=message_id,
                                           delivery_count=d.delivery_count, last_error=error[:4000],
                                           last_traceback=traceback, reason=reason, dead_at=time.time()))
    if d.entry_id > 0:
        conn.execute(delete(QueueEntry).where(QueueEntry.id == d.entry_id))


def queue_depth(conn: Connection, sub_id: int) -> int:
    """How many messages wait in a subscription's queue."""
    return conn.execute(select(func.count()).select_from(QueueEntry).where(QueueEntry.sub_id == sub_id)
                        ).scalar_one()


def queue_depths(conn: Connection, sub_ids: list[int]) -> dict[int, int]:
    """How many messages wait in each of these queues; an empty queue is left out."""
    rows = conn.execute(select(QueueEntry.sub_id, func.count()).where(QueueEntry.sub_id.in_(sub_ids))
                        .group_by(QueueEntry.sub_id)).all()
    return {sub_id: count for sub_id, count in rows}


#: One index probe per subscription (PostgreSQL would otherwise scan a long queue table to find them).
_WITH_WORK_SQL = {
    'sqlite': 'SELECT s.id FROM conduit_subscription s '
              'WHERE EXISTS (SELECT 1 FROM conduit_queue q WHERE q.sub_id = s.id)',
    'postgresql': 'SELECT s.id FROM conduit_subscription s CROSS JOIN LATERAL '
                  '(SELECT 1 FROM conduit_queue q WHERE q.sub_id = s.id LIMIT 1) w',
}


def subs_with_work(conn: Connection) -> set[int]:
    """The subscriptions whose queues hold at least one entry."""
    return set(conn.exec_driver_sql(_WITH_WORK_SQL['sqlite' if conn.dialect.name == 'sqlite' else 'postgresql'])
               .scalars())


def dead_letters(conn: Connection, sub_id: int) -> list[dict[str, Any]]:
    """A subscription's dead letters, oldest first."""
    rows = conn.execute(select(DeadLetter.id, DeadLetter.delivery_count, DeadLetter.last_error,
                               DeadLetter.last_traceback, DeadLetter.reason,
                               DeadLetter.dead_at, Message.msg_id, Message.data, Message.mime_type)
                        .join(Message, Message.id == DeadLetter.message_id)
                        .where(DeadLetter.sub_id == sub_id).order_by(DeadLetter.id)).all()
    return [dict(r._mapping) for r in rows]


# Sweeping


def sweep(conn: Connection, now: float, limit: int = 10000) -> dict[str, int]:
    """Remove what nobody will read: expired topic messages, and messages no queue holds."""
    counts = {}
    expired_in_topic = select(Message.id).where(Message.in_topic.is_(True), Message.expiration_time <= now)
    counts['expired_in_topic'] = conn.execute(delete(Message).where(
        Message.id.in_(expired_in_topic.limit(limit).scalar_subquery()))).rowcount
    orphans = (select(Message.id).where(
        Message.in_topic.is_(False),
        ~exists().where(QueueEntry.message_id == Message.id),
        ~exists().where(DeadLetter.message_id == Message.id)).limit(limit))
    counts['consumed'] = conn.execute(delete(Message).where(Message.id.in_(orphans.scalar_subquery()))).rowcount
    return counts


def expired_entries(conn: Connection, now: float, limit: int = 1000,
                    skip_sub_ids: set[int] | None = None) -> list[Delivery]:
    """Queue entries whose message expired (they go to the dead-letter queue, never to subscribers).

    ``skip_sub_ids``: queues whose delivery loops handle expiry themselves (a loop may be
    delivering such an entry at this moment).
    """
    query = (select(QueueEntry.id, QueueEntry.sub_id, QueueEntry.delivery_count, QueueEntry.next_attempt_at,
                    QueueEntry.last_error, QueueEntry.recv_time, *_MESSAGE_COLUMNS)
             .join(Message, and_(Message.id == QueueEntry.message_id, Message.expiration_time <= now)))
    if skip_sub_ids:
        query = query.where(QueueEntry.sub_id.not_in(skip_sub_ids))
    query = query.limit(limit)
    return [Delivery(*row) for row in conn.execute(query).all()]


def retention_expired_in_topic(conn: Connection, topic_id: int, before: float) -> int:
    """Delete messages that waited in a topic longer than its retention."""
    return conn.execute(delete(Message).where(Message.topic_id == topic_id, Message.in_topic.is_(True),
                                              Message.pub_time < before)).rowcount
