"""Administration of stored pub/sub state: runtime details, browsing, editing, purging, re-driving.

``QueueAdmin`` runs each operation in one transaction of its own; its statements are in
``runtime.pubsub.queue_statements``, which the metrics and the dashboard's overview also read
through. Nothing here knows HTTP: the admin API and any other console call the same methods.

Guarantees:

- Only stored entries are seen: non-GD messages a worker holds in memory for the subscriptions it
  delivers are not visible (they are lost on restart anyway, as documented).
- Editing a message changes the stored message in place, so its msg_id and its place in every
  queue stay; a message published to several subscriptions is one stored message, so the edit is
  seen by every queue and dead-letter queue that still holds it (answers say how many hold it).
  The delivery loop reads messages afresh for every batch, so the next attempt sees the edit.
- Re-driving a dead letter makes a new queue entry (delivery count reset, due at once) and removes
  the dead letter, in one transaction; on PostgreSQL a NOTIFY wakes the owning worker, elsewhere
  its poller sees the new queue id within ``pubsub.poll_interval_secs``.
- WebSocket clients are read as their workers last wrote them: ``in_flight`` and ``last_active_at``
  of an attached client are as fresh as its worker's last presence heartbeat
  (``pubsub.lease_renew_secs``); ``connected`` turns false once the connection is detached.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from sqlalchemy import Connection, Engine

from runtime.db.blocking import run_transaction
from runtime.errors import InvalidInput
from runtime.pubsub.dead_letter_search import DeadLetterFilter, DeadLetterSearch
from runtime.pubsub.queue_statements import (
    browse_dead_letters,
    browse_queue,
    dead_letter,
    dead_letter_count,
    dead_letter_queued,
    delete_dead_letters,
    delete_queue_message,
    delete_topic_message,
    edit_message,
    holders,
    last_pub_times,
    last_publications,
    purge_queue,
    queue_message,
    queue_stats,
    redrive,
    subscription_rows,
    topic_depths,
    topic_ids_matching,
    topic_message,
    topic_messages,
    topic_rows,
)
from runtime.pubsub.topics import normalize

if TYPE_CHECKING:
    from runtime.pubsub.registry import Registry, SubInfo

T = TypeVar('T')

#: Most topics a dead-letter filter's topic pattern may match.
MAX_FILTER_TOPICS = 20_000


class TopicDetails(NamedTuple):
    """What a topic's details read from the database, in one transaction."""

    #: The topic's origin and creation time (None if it went meanwhile).
    row: Any
    #: Messages waiting in it, GD and non-GD, by topic id.
    depths: dict[int, dict[str, int]]
    #: Its newest stored messages.
    last_publications: list[dict[str, Any]]
    #: Queue statistics of its subscriptions, by subscription id.
    stats: dict[int, dict[str, Any]]
    #: Stored columns of its subscriptions, by subscription id.
    subscription_rows: dict[int, Any]


class QueueAdmin:
    """Runtime details of topics and queues, and what an operator does to queued messages and dead letters.

    ``registry`` returns this worker's current topics and subscriptions (a reload replaces them),
    and ``reload`` reloads them from the database. ``websocket_clients`` reads the WebSocket kind's
    client rows (``runtime.pubsub.subscribers.websocket.clients.websocket_clients``: the kind owns
    its table; None reads none).
    """

    def __init__(self, engine: Engine, registry: Callable[[], Registry], reload: Callable[[], None],
                 websocket_clients: Callable[[Connection], list[dict[str, Any]]] | None = None) -> None:
        self._engine = engine
        self._registry = registry
        self._reload = reload
        self._websocket_clients = websocket_clients or (lambda conn: [])
        #: Dead letters across every subscription, by filter (built with ``dead_letter_filter``).
        self.dead_letters = DeadLetterSearch(engine)

    def _read(self, work: Callable[[Connection], T]) -> T:
        return run_transaction(self._engine, work, write=False)

    def _write(self, work: Callable[[Connection], T]) -> T:
        return run_transaction(self._engine, work)

    # Runtime details

    def queues(self) -> tuple[list[SubInfo], dict[int, dict[str, Any]], dict[int, Any]]:
        """Every subscription by id, with queue statistics and stored columns by subscription id."""
        self._reload()  # a list of queues must not miss subscriptions another worker just made
        subs = sorted(self._registry().subs.values(), key=lambda s: s.id)
        stats, rows = self._read(lambda c: (queue_stats(c), subscription_rows(c)))
        return subs, stats, rows

    def subscription_stats(self, sub_ids: list[int]) -> tuple[dict[int, dict[str, Any]], dict[int, Any]]:
        """Queue statistics and stored columns of some subscriptions, by id."""
        return self._read(lambda c: (queue_stats(c, sub_ids), subscription_rows(c, sub_ids)))

    def topic_stats(self) -> tuple[dict[int, Any], dict[int, dict[str, int]]]:
        """Every topic's stored columns and the messages waiting in it, by topic id."""
        return self._read(lambda c: (topic_rows(c), topic_depths(c)))

    def topic_page_stats(self, topic_ids: list[int]) -> tuple[dict[int, Any], dict[int, dict[str, int]],
                                                                dict[int, float]]:
        """Some topics' stored columns, the messages waiting in them and their last stored publication time."""
        return self._read(lambda c: (topic_rows(c, topic_ids), topic_depths(c, topic_ids),
                                     last_pub_times(c, topic_ids)))

    def topic_details(self, topic_id: int, sub_ids: list[int], last: int) -> TopicDetails:
        """A topic's stored columns, depth, last publications, and its subscriptions' queues."""
        return self._read(lambda c: TopicDetails(
            topic_rows(c, [topic_id]).get(topic_id), topic_depths(c, [topic_id]),
            last_publications(c, topic_id, last) if last else [], queue_stats(c, sub_ids),
            subscription_rows(c, sub_ids)))

    def websocket_clients(self, security: str | None = None,
                          connected: bool | None = None) -> list[dict[str, Any]]:
        """Every WebSocket subscription with its client, by id.

        security: only those of this security definition; connected: only those whose client is
        attached to a worker (True) or not (False).
        """
        clients = self._read(self._websocket_clients)
        return sorted((c for c in clients if (security is None or c['security'] == security)
                       and (connected is None or c['connected'] == connected)), key=lambda c: c['sub_id'])

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run work in a read-only transaction of its own: what a subscriber kind shows of its subscriptions."""
        return self._read(work)

    def expiration_time(self, topic_name: str, secs: float) -> float:
        """When a message of a topic given secs more to live expires (capped by the topic's limit)."""
        topic = self._registry().topic(topic_name)
        if topic is not None:
            secs = min(secs, topic.limit_message_expiry)
        return time.time() + secs

    # Queues

    def browse(self, sub_id: int, limit: int, offset: int,
               after: tuple[int, int, int] | None = None) -> tuple[list[dict[str, Any]], int]:
        """A page of a queue in delivery order (after a row's cursor, if given), and the queue's depth."""
        messages, stats = self._read(lambda c: (browse_queue(c, sub_id, limit, offset, after),
                                                queue_stats(c, [sub_id])))
        return messages, stats[sub_id]['depth']

    def message(self, sub_id: int, msg_id: str) -> Any | None:
        """A queue entry with its message (admin_view shows it), or None."""
        return self._read(lambda c: queue_message(c, sub_id, msg_id))

    def edit_message(self, sub_id: int, msg_id: str, message_id: int,
                     changes: dict[str, Any]) -> tuple[Any | None, int]:
        """Edit a queued message in place: the entry as it is now (None if delivered meanwhile), and its holders."""
        def work(conn: Connection) -> tuple[Any | None, int]:
            edit_message(conn, message_id, changes)
            return queue_message(conn, sub_id, msg_id), holders(conn, message_id)
        return self._write(work)

    def delete_message(self, sub_id: int, msg_id: str) -> int:
        """Remove a message from one queue; how many entries went (0: it was not there)."""
        return self._write(lambda c: delete_queue_message(c, sub_id, msg_id))

    def purge(self, sub_id: int) -> int:
        """Remove every message of a queue; returns how many."""
        return self._write(lambda c: purge_queue(c, sub_id))

    def move_to_dead_letters(self, sub_id: int, msg_id: str, error: str) -> bool:
        """Move a queued message to the dead-letter queue; False if it is not (or no longer) queued."""
        return self._write(lambda c: dead_letter_queued(c, sub_id, msg_id, error))

    # Messages waiting in a topic

    def topic_messages(self, topic_id: int, limit: int, after: int | None) -> tuple[list[dict[str, Any]], int]:
        """A page of the messages waiting in a topic, oldest first, and how many wait."""
        return self._read(lambda c: topic_messages(c, topic_id, limit, after))

    def topic_message(self, msg_id: str) -> Any | None:
        """A message waiting in its topic (admin_view shows it), or None."""
        return self._read(lambda c: topic_message(c, msg_id))

    def edit_topic_message(self, msg_id: str, message_id: int, changes: dict[str, Any]) -> Any | None:
        """Edit a message waiting in its topic in place; the message as it is now (None if a queue took it)."""
        def work(conn: Connection) -> Any | None:
            if topic_message(conn, msg_id) is None:
                return None
            edit_message(conn, message_id, changes)
            return topic_message(conn, msg_id)
        return self._write(work)

    def delete_topic_message(self, msg_id: str) -> int:
        """Remove a message waiting in its topic; how many went (0: it was not waiting there)."""
        return self._write(lambda c: delete_topic_message(c, msg_id))

    # Dead letters

    def dead_letter_filter(self, topic: str = '', sub_id: int | None = None, error: str = '',
                           since: float | None = None, until: float | None = None) -> DeadLetterFilter:
        """A filter of dead letters; topic is a name or a pattern, matched against the topics known now.

        A pattern matching more than ``MAX_FILTER_TOPICS`` topics is refused (TooManyTopics):
        the filter would be too large a statement to send.
        """
        topic_ids: tuple[int, ...] | None = None
        if topic and normalize(topic) != '**':
            # Matched against the stored topics, so that one another worker just made counts too. Reloading
            # this worker's registry for it cost 200 ms at 10,000 topics and subscriptions (and reset its caches).
            topic_ids = self._read(lambda c: topic_ids_matching(c, topic))
            if len(topic_ids) > MAX_FILTER_TOPICS:
                raise InvalidInput('topic', f'matches {len(topic_ids)} topics, more than {MAX_FILTER_TOPICS}: '
                                            'narrow the pattern')
        return DeadLetterFilter(topic_ids, sub_id, error, since, until)

    def browse_dead_letters(self, sub_id: int, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
        """A page of a subscription's dead letters, oldest first, and how many it has."""
        return self._read(lambda c: (browse_dead_letters(c, sub_id, limit, offset), dead_letter_count(c, sub_id)))

    def dead_letter(self, sub_id: int, msg_id: str) -> Any | None:
        """A dead letter with its message (admin_view shows it), or None."""
        return self._read(lambda c: dead_letter(c, sub_id, msg_id))

    def edit_dead_letter(self, sub_id: int, msg_id: str, message_id: int,
                         changes: dict[str, Any]) -> tuple[Any | None, int]:
        """Edit a dead letter's message in place: the dead letter as it is now (or None), and its holders."""
        def work(conn: Connection) -> tuple[Any | None, int]:
            edit_message(conn, message_id, changes)
            return dead_letter(conn, sub_id, msg_id), holders(conn, message_id)
        return self._write(work)

    def delete_dead_letters(self, sub_id: int, msg_id: str | None = None) -> int:
        """Remove one dead letter (by msg_id) or all of a subscription's; returns how many."""
        return self._write(lambda c: delete_dead_letters(c, sub_id, msg_id))

    def redrive(self, sub_id: int, msg_ids: list[str] | None = None) -> list[str]:
        """Move dead letters (the given ones, or all) back into their queue; returns the msg_ids re-driven."""
        return self._write(lambda c: redrive(c, sub_id, msg_ids))
