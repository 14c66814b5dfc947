"""The statements of queue administration: runtime details, browsing, editing, purging, re-driving.

Each takes an open ``Connection`` inside the caller's transaction (as ``runtime.pubsub.statements``
does): ``runtime.pubsub.queue_admin.QueueAdmin`` runs them one transaction per operation, and the
metrics and the dashboard's overview combine the reads in transactions of their own.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, tuple_, update

from runtime.db.models import DeadLetter, Message, QueueEntry, Subscription, Topic
from runtime.pubsub import statements
from runtime.pubsub.message import admin_view
from runtime.pubsub.topics import matches, normalize
from runtime.util.timefmt import iso

#: Most rows one browse returns.
MAX_PAGE = 1000

_MSG = (Message.id.label('message_id'), Message.msg_id, Message.topic_name, Message.data, Message.mime_type,
        Message.priority, Message.pub_time, Message.expiration_time, Message.publisher, Message.correl_id,
        Message.in_reply_to, Message.ext_client_id, Message.has_gd, Message.size)
_ENTRY = (QueueEntry.id.label('entry_id'), QueueEntry.delivery_count, QueueEntry.next_attempt_at,
          QueueEntry.last_error, QueueEntry.recv_time, QueueEntry.ack_id)
_DEAD = (DeadLetter.id.label('dead_id'), DeadLetter.delivery_count, DeadLetter.last_error, DeadLetter.reason,
         DeadLetter.dead_at)


# Runtime details


def queue_stats(conn: Connection, sub_ids: list[int] | None = None) -> dict[int, dict[str, Any]]:
    """Per subscription: queue depth, oldest message (msg_id, publication time, age) and dead-letter count."""
    query = select(QueueEntry.sub_id, func.count(), func.min(QueueEntry.message_id)).group_by(QueueEntry.sub_id)
    dead_query = select(DeadLetter.sub_id, func.count()).group_by(DeadLetter.sub_id)
    if sub_ids is not None:
        if not sub_ids:
            return {}
        query = query.where(QueueEntry.sub_id.in_(sub_ids))
        dead_query = dead_query.where(DeadLetter.sub_id.in_(sub_ids))
    rows = conn.execute(query).all()
    oldest_ids = [r[2] for r in rows]
    oldest = {r.id: r for r in conn.execute(select(Message.id, Message.msg_id, Message.pub_time)
                                            .where(Message.id.in_(oldest_ids))).all()} if oldest_ids else {}
    now = time.time()
    stats: dict[int, dict[str, Any]] = {}
    for sub_id in sub_ids or []:
        stats[sub_id] = {'depth': 0, 'oldest_message': None, 'dead_letters': 0}
    for sub_id, depth, oldest_id in rows:
        msg = oldest.get(oldest_id)
        stats.setdefault(sub_id, {'dead_letters': 0}).update(
            depth=depth, oldest_message={'msg_id': msg.msg_id, 'pub_time_iso': iso(msg.pub_time),
                                         'age_secs': round(now - msg.pub_time, 3)} if msg else None)
    for sub_id, count in conn.execute(dead_query).all():
        stats.setdefault(sub_id, {'depth': 0, 'oldest_message': None})['dead_letters'] = count
    return stats


def topic_depths(conn: Connection, topic_ids: list[int] | None = None) -> dict[int, dict[str, int]]:
    """Per topic: messages waiting in it (accepted with no subscriber), GD and non-GD."""
    query = (select(Message.topic_id, Message.has_gd, func.count()).where(Message.in_topic.is_(True))
             .group_by(Message.topic_id, Message.has_gd))
    if topic_ids is not None:
        query = query.where(Message.topic_id.in_(topic_ids))
    depths: dict[int, dict[str, int]] = {}
    for topic_id, has_gd, count in conn.execute(query).all():
        depths.setdefault(topic_id, {'gd': 0, 'non_gd': 0})['gd' if has_gd else 'non_gd'] += count
    return depths


def last_publications(conn: Connection, topic_id: int, limit: int) -> list[dict[str, Any]]:
    """The newest messages of a topic still stored (waiting in it, in a queue or as a dead letter)."""
    # The bound on id changes nothing in the answer; without it PostgreSQL walks the primary key
    # backwards and filters by topic, reading every newer message of every other topic (126–480 ms
    # at 1M messages); with it, it reads the (topic_id, id) index from the topic's newest (bench/notes/dashboard.md).
    newest = select(func.max(Message.id)).where(Message.topic_id == topic_id).scalar_subquery()
    rows = conn.execute(select(*_MSG, Message.in_topic).where(Message.topic_id == topic_id, Message.id <= newest)
                        .order_by(Message.id.desc()).limit(limit)).all()
    return [{**admin_view(r, full=False), 'in_topic': r.in_topic} for r in rows]


def last_pub_times(conn: Connection, topic_ids: list[int]) -> dict[int, float]:
    """Per topic: the publication time of its newest message still stored (topics with none are absent)."""
    if not topic_ids:
        return {}
    newest = (select(func.max(Message.id)).where(Message.topic_id.in_(topic_ids))
              .group_by(Message.topic_id).scalar_subquery())
    return dict(conn.execute(select(Message.topic_id, Message.pub_time).where(Message.id.in_(newest))).all())


# Stored columns the registry does not hold


def topic_rows(conn: Connection, topic_ids: list[int] | None = None) -> dict[int, Any]:
    """Each topic's origin and creation time, by id."""
    query = select(Topic.id, Topic.origin, Topic.created_at)
    if topic_ids is not None:
        query = query.where(Topic.id.in_(topic_ids))
    return {r.id: r for r in conn.execute(query).all()}


def subscription_rows(conn: Connection, sub_ids: list[int] | None = None) -> dict[int, Any]:
    """Stored columns the registry does not hold (origin, creation time, options as given), by id."""
    query = select(Subscription.id, Subscription.origin, Subscription.created_at, Subscription.options)
    if sub_ids is not None:
        if not sub_ids:
            return {}
        query = query.where(Subscription.id.in_(sub_ids))
    return {r.id: r for r in conn.execute(query).all()}


# Queues


def browse_queue(conn: Connection, sub_id: int, limit: int, offset: int,
                 after: tuple[int, int, int] | None = None) -> list[dict[str, Any]]:
    """A page of a queue in delivery order (priority high first, then publication), without full data.

    ``after`` (a row's ``cursor``) starts the page after that row, whatever its depth: a keyset page
    costs the same at the end of a queue of a million as at its head, where an offset reads every row
    it skips.
    """
    query = (select(*_ENTRY, *_MSG, QueueEntry.priority.label('queue_priority'))
             .join(Message, Message.id == QueueEntry.message_id).where(QueueEntry.sub_id == sub_id))
    if after is not None:
        query = query.where(tuple_(QueueEntry.priority, QueueEntry.message_id, QueueEntry.id) > tuple_(*after))
    rows = conn.execute(query.order_by(QueueEntry.priority, QueueEntry.message_id, QueueEntry.id)
                        .limit(min(limit, MAX_PAGE)).offset(offset)).all()
    return [{**admin_view(r, full=False), 'cursor': f'{r.queue_priority}.{r.message_id}.{r.entry_id}'}
            for r in rows]


def queue_message(conn: Connection, sub_id: int, msg_id: str) -> Any | None:
    """A queue entry with its message, or None."""
    return conn.execute(select(*_ENTRY, QueueEntry.last_traceback, *_MSG)
                        .join(Message, Message.id == QueueEntry.message_id)
                        .where(QueueEntry.sub_id == sub_id, Message.msg_id == msg_id)
                        .order_by(QueueEntry.id).limit(1)).first()


def holders(conn: Connection, message_id: int) -> int:
    """How many queue entries and dead letters hold a stored message."""
    entries = conn.execute(select(func.count()).select_from(QueueEntry)
                           .where(QueueEntry.message_id == message_id)).scalar_one()
    dead = conn.execute(select(func.count()).select_from(DeadLetter)
                        .where(DeadLetter.message_id == message_id)).scalar_one()
    return entries + dead


def edit_message(conn: Connection, message_id: int, changes: dict[str, Any]) -> None:
    """Change a stored message in place: data (text, mime_type, size), priority, expiration_time.

    A priority change also re-orders every queue entry of the message, so that the order queues
    deliver in matches the priority subscribers see.
    """
    if changes:
        conn.execute(update(Message).where(Message.id == message_id).values(**changes))
    if 'priority' in changes:
        conn.execute(update(QueueEntry).where(QueueEntry.message_id == message_id)
                     .values(priority=-changes['priority']))


def delete_queue_message(conn: Connection, sub_id: int, msg_id: str) -> int:
    """Remove a message from one queue (the sweeper removes the message once nothing holds it)."""
    message_ids = select(Message.id).where(Message.msg_id == msg_id).scalar_subquery()
    return conn.execute(delete(QueueEntry).where(QueueEntry.sub_id == sub_id,
                                                 QueueEntry.message_id.in_(message_ids))).rowcount


def purge_queue(conn: Connection, sub_id: int) -> int:
    """Remove every message of a queue; returns how many."""
    return conn.execute(delete(QueueEntry).where(QueueEntry.sub_id == sub_id)).rowcount


def dead_letter_queued(conn: Connection, sub_id: int, msg_id: str, error: str) -> bool:
    """Move a queued message to its subscription's dead-letter queue (reason ``admin``); False if not queued.

    Its delivery count and last traceback go with it; error becomes its last error.
    """
    entry = conn.execute(select(QueueEntry.id, QueueEntry.message_id, QueueEntry.delivery_count,
                                QueueEntry.last_traceback).join(Message, Message.id == QueueEntry.message_id)
                         .where(QueueEntry.sub_id == sub_id, Message.msg_id == msg_id)
                         .order_by(QueueEntry.id).limit(1)).first()
    if entry is None or not conn.execute(delete(QueueEntry).where(QueueEntry.id == entry.id)).rowcount:
        return False
    conn.execute(insert(DeadLetter).values(sub_id=sub_id, message_id=entry.message_id,
                                           delivery_count=entry.delivery_count, last_error=error[:4000],
                                           last_traceback=entry.last_traceback, reason='admin', dead_at=time.time()))
    return True


# Messages waiting in a topic (accepted while it had no subscriber)


def topic_messages(conn: Connection, topic_id: int, limit: int, after: int | None) -> tuple[list[dict[str, Any]], int]:
    """A page of the messages waiting in a topic, oldest first (keyset: after a message's ``id``), and how many wait."""
    query = select(*_MSG).where(Message.topic_id == topic_id, Message.in_topic.is_(True))
    if after is not None:
        query = query.where(Message.id > after)
    rows = conn.execute(query.order_by(Message.id).limit(min(limit, MAX_PAGE))).all()
    waiting = conn.execute(select(func.count()).select_from(Message)
                           .where(Message.topic_id == topic_id, Message.in_topic.is_(True))).scalar_one()
    return [{**admin_view(r, full=False), 'id': r.message_id} for r in rows], waiting


def topic_message(conn: Connection, msg_id: str) -> Any | None:
    """A message waiting in its topic (no queue holds it yet), or None."""
    return conn.execute(select(*_MSG).where(Message.msg_id == msg_id, Message.in_topic.is_(True))).first()


def delete_topic_message(conn: Connection, msg_id: str) -> int:
    """Remove a message waiting in its topic (no queue holds it yet); how many went."""
    return conn.execute(delete(Message).where(Message.msg_id == msg_id, Message.in_topic.is_(True))).rowcount


# Dead letters


def browse_dead_letters(conn: Connection, sub_id: int, limit: int, offset: int) -> list[dict[str, Any]]:
    """A page of a subscription's dead letters, oldest first, without full data."""
    rows = conn.execute(select(*_DEAD, *_MSG).join(Message, Message.id == DeadLetter.message_id)
                        .where(DeadLetter.sub_id == sub_id).order_by(DeadLetter.id)
                        .limit(min(limit, MAX_PAGE)).offset(offset)).all()
    return [admin_view(r, full=False) for r in rows]


def dead_letter_count(conn: Connection, sub_id: int) -> int:
    """How many dead letters a subscription has."""
    return conn.execute(select(func.count()).select_from(DeadLetter).where(DeadLetter.sub_id == sub_id)).scalar_one()


def dead_letter(conn: Connection, sub_id: int, msg_id: str) -> Any | None:
    """A dead letter with its message, or None."""
    return conn.execute(select(*_DEAD, DeadLetter.last_traceback, *_MSG)
                        .join(Message, Message.id == DeadLetter.message_id)
                        .where(DeadLetter.sub_id == sub_id, Message.msg_id == msg_id)
                        .order_by(DeadLetter.id).limit(1)).first()


def delete_dead_letters(conn: Connection, sub_id: int, msg_id: str | None = None) -> int:
    """Remove one dead letter (by msg_id) or all of a subscription's; returns how many."""
    query = delete(DeadLetter).where(DeadLetter.sub_id == sub_id)
    if msg_id is not None:
        query = query.where(DeadLetter.message_id.in_(select(Message.id).where(Message.msg_id == msg_id)
                                                      .scalar_subquery()))
    return conn.execute(query).rowcount


def redrive(conn: Connection, sub_id: int, msg_ids: list[str] | None = None) -> list[str]:
    """Move dead letters (the given ones, or all) back into their queue; returns the msg_ids re-driven.

    Each gets a new queue entry: delivery count reset, due at once, ordered by its priority and
    publication like any other entry.
    """
    query = (select(DeadLetter.id, DeadLetter.message_id, Message.msg_id, Message.priority)
             .join(Message, Message.id == DeadLetter.message_id).where(DeadLetter.sub_id == sub_id))
    if msg_ids is not None:
        if not msg_ids:
            return []
        query = query.where(Message.msg_id.in_(msg_ids))
    rows = conn.execute(query.order_by(DeadLetter.id)).all()
    if not rows:
        return []
    now = time.time()
    conn.execute(insert(QueueEntry), [{'sub_id': sub_id, 'message_id': r.message_id, 'priority': -r.priority,
                                       'next_attempt_at': 0.0, 'recv_time': now, 'delivery_count': 0,
                                       'last_error': ''} for r in rows])
    conn.execute(delete(DeadLetter).where(DeadLetter.id.in_([r.id for r in rows])))
    statements.notify_subscribers(conn, {sub_id})
    return [r.msg_id for r in rows]


def topic_ids_matching(conn: Connection, pattern: str) -> tuple[int, ...]:
    """The ids of the stored topics a name or pattern matches, in id order."""
    if '*' not in pattern:
        return tuple(conn.execute(select(Topic.id).where(Topic.name_key == normalize(pattern))).scalars())
    return tuple(sorted(r.id for r in conn.execute(select(Topic.id, Topic.name)) if matches(pattern, r.name)))
