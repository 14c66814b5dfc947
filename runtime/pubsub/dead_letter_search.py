"""Dead letters across every subscription: search by a filter, count, and re-drive or delete all that match.

A ``DeadLetterFilter`` names the topics (already resolved to ids: a name or a pattern is the
caller's to resolve), a subscription, a piece of the last error and a time range; every part is
optional and they combine with AND. The functions take an open ``Connection`` inside the caller's
transaction; ``DeadLetterSearch`` runs them, one transaction each.

Guarantees:

- Pages are keyset pages, newest dead letter first: ``before`` is the id the previous page ended at,
  so a page costs the same however deep it is, and letters added meanwhile never shift a page.
- A count stops at ``cap`` + 1 rows (``count`` says when it reached the cap), so counting a huge
  match costs a bounded scan.
- A bulk re-drive or delete first counts what matches now: more than the ``expected`` count the
  user confirmed refuses the whole action (``MatchChanged``, nothing done). It then works only on
  letters no newer than the newest one matching at that moment, at most ``expected`` of them, in
  batches of ``BATCH`` rows, one transaction per batch: a match of 100,000 never holds one huge
  transaction, and a letter dead-lettered while the action runs is not swept up with what was shown.
  A crash between batches leaves the earlier batches done (each one is whole).
- Re-driving a letter is what the single re-drive does (``runtime.pubsub.queue_admin.redrive``): a
  new queue entry with its delivery count reset, due at once, and the letter removed, in the same
  transaction; each letter is removed by a DELETE ... RETURNING, so two bulk actions racing over the
  same letters never re-drive one twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, Select, delete, func, insert, select

from runtime.db.blocking import run_transaction
from runtime.db.models import DeadLetter, Message, QueueEntry
from runtime.errors import MatchChanged
from runtime.pubsub import statements
from runtime.pubsub.message import admin_view

T = TypeVar('T')

#: Letters one transaction of a bulk action handles.
BATCH = 500
#: Counting stops past this many matching letters (the answer then says it is capped).
COUNT_CAP = 1_000_000
#: Longest error text a filter may search for, in characters.
MAX_ERROR_TEXT = 200
#: Most rows one page returns.
MAX_PAGE = 1000

_ROW = (DeadLetter.id.label('dead_id'), DeadLetter.sub_id, DeadLetter.delivery_count, DeadLetter.last_error,
        DeadLetter.reason, DeadLetter.dead_at, Message.id.label('message_id'), Message.msg_id, Message.topic_name,
        Message.data, Message.mime_type, Message.priority, Message.pub_time, Message.expiration_time,
        Message.publisher, Message.correl_id, Message.in_reply_to, Message.ext_client_id, Message.has_gd,
        Message.size)


@dataclass(frozen=True)
class DeadLetterFilter:
    """Which dead letters an operation covers; an empty filter covers every one."""

    #: Ids of the topics whose messages match (None: any topic; empty: none at all).
    topic_ids: tuple[int, ...] | None = None
    sub_id: int | None = None
    #: Text the last error contains, case-insensitively ('' matches any).
    error: str = ''
    #: Dead-lettered at or after this time (epoch seconds).
    since: float | None = None
    #: Dead-lettered before this time (epoch seconds).
    until: float | None = None

    def __post_init__(self) -> None:
        if len(self.error) > MAX_ERROR_TEXT:
            raise ValueError(f'error text longer than {MAX_ERROR_TEXT} characters')

    def matches_nothing(self) -> bool:
        """Whether the filter can match no letter at all (no topic matched its topic part)."""
        return self.topic_ids is not None and not self.topic_ids


def _filtered(query: Select[Any], f: DeadLetterFilter, joined: bool) -> Select[Any]:
    """query restricted to f; ``joined``: the query already joins each letter's Message."""
    if f.topic_ids is not None:
        if not joined:
            query = query.join(Message, Message.id == DeadLetter.message_id)
        query = query.where(Message.topic_id.in_(f.topic_ids))
    if f.sub_id is not None:
        query = query.where(DeadLetter.sub_id == f.sub_id)
    if f.error:
        query = query.where(DeadLetter.last_error.icontains(f.error, autoescape=True))
    if f.since is not None:
        query = query.where(DeadLetter.dead_at >= f.since)
    if f.until is not None:
        query = query.where(DeadLetter.dead_at < f.until)
    return query


def search(conn: Connection, f: DeadLetterFilter, limit: int,
           before: int | None = None) -> tuple[list[dict[str, Any]], int | None]:
    """A page of matching letters, newest first, without full data; and the cursor of the next page (or None)."""
    if f.matches_nothing():
        return [], None
    limit = max(1, min(limit, MAX_PAGE))
    query = _filtered(select(*_ROW).join(Message, Message.id == DeadLetter.message_id), f, joined=True)
    if before is not None:
        query = query.where(DeadLetter.id < before)
    rows = conn.execute(query.order_by(DeadLetter.id.desc()).limit(limit + 1)).all()
    page = [{**admin_view(r, full=False), 'sub_id': r.sub_id, 'dead_id': r.dead_id} for r in rows[:limit]]
    return page, (rows[limit - 1].dead_id if len(rows) > limit else None)


def count(conn: Connection, f: DeadLetterFilter, cap: int = COUNT_CAP) -> int:
    """How many letters match, counting at most cap + 1 of them."""
    if f.matches_nothing():
        return 0
    matching = _filtered(select(DeadLetter.id), f, joined=False).limit(cap + 1).subquery()
    return conn.execute(select(func.count()).select_from(matching)).scalar_one()


def newest_id(conn: Connection, f: DeadLetterFilter) -> int | None:
    """The id of the newest matching letter, or None."""
    if f.matches_nothing():
        return None
    return conn.execute(_filtered(select(func.max(DeadLetter.id)), f, joined=False)).scalar()


def _batch_ids(f: DeadLetterFilter, after: int, upto: int, limit: int) -> Select[Any]:
    return (_filtered(select(DeadLetter.id), f, joined=False)
            .where(DeadLetter.id > after, DeadLetter.id <= upto).order_by(DeadLetter.id).limit(limit))


def redrive_batch(conn: Connection, f: DeadLetterFilter, after: int, upto: int, limit: int) -> tuple[int, int]:
    """Re-drive up to limit matching letters with ids in (after, upto], oldest first; (how many, last id seen)."""
    taken = conn.execute(delete(DeadLetter).where(DeadLetter.id.in_(_batch_ids(f, after, upto, limit)))
                         .returning(DeadLetter.id, DeadLetter.sub_id, DeadLetter.message_id)).all()
    if not taken:
        return 0, upto
    message_ids = sorted({r.message_id for r in taken})
    priorities = dict(conn.execute(select(Message.id, Message.priority).where(Message.id.in_(message_ids))).all())
    now = time.time()
    conn.execute(insert(QueueEntry), [{'sub_id': r.sub_id, 'message_id': r.message_id,
                                       'priority': -priorities.get(r.message_id, 5), 'next_attempt_at': 0.0,
                                       'recv_time': now, 'delivery_count': 0, 'last_error': ''}
                                      for r in sorted(taken, key=lambda r: r.id)])
    statements.notify_subscribers(conn, {r.sub_id for r in taken})
    return len(taken), max(r.id for r in taken)


def delete_batch(conn: Connection, f: DeadLetterFilter, after: int, upto: int, limit: int) -> tuple[int, int]:
    """Delete up to limit matching letters with ids in (after, upto], oldest first; (how many, last id seen)."""
    taken = conn.execute(delete(DeadLetter).where(DeadLetter.id.in_(_batch_ids(f, after, upto, limit)))
                         .returning(DeadLetter.id)).scalars().all()
    return len(taken), (max(taken) if taken else upto)


#: A batch step: (conn, filter, after, upto, limit) -> (how many, last id seen).
Step = Callable[[Connection, DeadLetterFilter, int, int, int], tuple[int, int]]


class DeadLetterSearch:
    """Searches, counts, re-drives and deletes dead letters by filter, one transaction per read or batch."""

    def __init__(self, engine: Engine, batch: int = BATCH) -> None:
        self._engine = engine
        self._batch = batch

    def _read(self, work: Callable[[Connection], T]) -> T:
        return run_transaction(self._engine, work, write=False)

    def search(self, f: DeadLetterFilter, limit: int, before: int | None = None
               ) -> tuple[list[dict[str, Any]], int | None]:
        """A page of matching letters, newest first, and the next page's cursor (None: last page)."""
        return self._read(lambda c: search(c, f, limit, before))

    def count(self, f: DeadLetterFilter, cap: int = COUNT_CAP) -> tuple[int, bool]:
        """How many letters match (at most cap) and whether there are more than cap."""
        found = self._read(lambda c: count(c, f, cap))
        return min(found, cap), found > cap

    def redrive(self, f: DeadLetterFilter, expected: int) -> int:
        """Re-drive every matching letter, if no more than expected match; how many were re-driven."""
        return self._bulk(f, expected, redrive_batch)

    def delete(self, f: DeadLetterFilter, expected: int) -> int:
        """Delete every matching letter, if no more than expected match; how many were deleted."""
        return self._bulk(f, expected, delete_batch)

    def _bulk(self, f: DeadLetterFilter, expected: int, step: Step) -> int:
        now, upto = self._read(lambda c: (count(c, f, expected), newest_id(c, f)))
        if now > expected:
            raise MatchChanged(expected)
        done, after = 0, 0
        while upto is not None and done < expected:
            limit = min(self._batch, expected - done)
            moved, last = run_transaction(
                self._engine, lambda c, a=after, u=upto, n=limit: step(c, f, a, u, n))
            if not moved:
                break
            done, after = done + moved, last
        return done
