"""Group commit: publishers and delivery loops of one worker share transactions, and so commits.

A publisher hands its ``Publication`` to ``GroupCommitter.submit`` and waits; a delivery loop
hands the storage work of one cycle (settle the last batch, take the next) to ``run`` and waits.
A single writer greenlet takes everything queued so far (up to ``max_batch``), writes it in one
transaction — publications first, so that a loop's cycle in the same transaction already sees
them — and then wakes every waiter: with its result once the commit is durable, or with the
exception if it failed, in which case nothing of the batch was stored.

A delivery loop that is idle when publications for its subscription are committed has its next
batch taken in that same commit (``claim``): a message waits for one commit, not two, before it is
delivered. One publisher alone pays one commit per message, and its subscriber's acks and attempt
counts ride in the same commits; a hundred concurrent publishers and their loops pay about one commit
in total. On SQLite, where writers exclude each other, this turns three write transactions per
delivered batch plus one per publication batch into one.

A work item that raises does not fail the others: the batch is written again without it, and its
waiter alone gets the exception. A failure of the publications themselves (the database is
down) fails the whole batch, and no publisher is told that its message was stored.

A delivery loop that has finished a message does not wait for its ack: it ``nudge``s the writer,
which asks it for what is ready (``take``) only as the next commit is put together, and tells it
once that commit is durable or has failed. Acks finished while a commit is being written ride in
the next one, so the acks of a busy queue share commits as its publications do. When there is
nothing but acks to write, the writer waits up to ``ack_linger`` (10 ms) for company — anything
else queued ends the wait at once — so that a loop whose handler takes a few milliseconds pays one
commit per several messages, not one per message, and a crash still redelivers only what finished
in the last few milliseconds. A nudge whose source has nothing left by then costs nothing (no
empty commit).

The writer keeps its connection between commits while work keeps coming (up to ``hold_secs``
idle), rather than checking one out of the pool for every commit. On PostgreSQL each checkout pings
the server first (a round trip), which for one sequential publisher was one round trip in eight; on
SQLite, checking out and back cost the hub about a tenth of a sequential publication's CPU. SQLite's
commits still run in the thread pool, one at a time with the worker's other writers
(``runtime.db.blocking.run_write_on``). A commit that fails gives its connection back (the next one
is checked out, and so pinged, anew), so a database outage is still answered with StorageUnavailable
and a restarted server recovered from.

On PostgreSQL, a commit whose work is all single statements (``StatementWork``: a loop's fenced take,
early acks) is sent with its publications as one query, BEGIN to COMMIT: one round trip per commit
(``runtime.pubsub.one_trip``). If the server refuses a statement of it, nothing was stored, and the
commit is written again the ordinary way, which isolates the item at fault as above.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

import gevent
import psycopg
from gevent.event import AsyncResult
from gevent.queue import Empty, Queue
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from runtime.db.blocking import run_transaction, run_write_on, write_connection
from runtime.db.engine import is_sqlite
from runtime.errors import StorageUnavailable
from runtime.pubsub import one_trip
from runtime.pubsub.one_trip import StatementWork
from runtime.pubsub.statements import Publication, insert_publications, publication_statement

_log = logging.getLogger(__name__)

T = TypeVar('T')

#: How long a commit that would hold nothing but acks waits for other writes to share it.
ACK_LINGER_SECS = 0.01

#: Most message data a one-trip commit carries: its text is quoted into the query, a copy or two of it.
ONE_TRIP_MAX_BYTES = 16 * 1024 * 1024

#: How long the writer keeps its PostgreSQL connection with nothing to write before giving it back.
HOLD_SECS = 1.0

#: A queued item: a publication or a unit of work, and the result its waiter waits on.
_Item = tuple['Publication | Callable[[Connection], Any]', AsyncResult]

#: What a nudged source has ready when a commit is put together: the work, and what to call once that
#: commit is durable (with None) or failed (with the exception).
Ready = tuple[Callable[[Connection], Any], Callable[['BaseException | None'], None]]


class _Nudge:
    """A queued nudge: ask take() for its work as the next commit is put together."""

    __slots__ = ('take',)

    def __init__(self, take: Callable[[], Ready | None]) -> None:
        self.take = take


class _Told:
    """The result of a nudged source's work: tells the source instead of waking a waiter."""

    __slots__ = ('_done', '_ready')

    def __init__(self, done: Callable[[BaseException | None], None]) -> None:
        self._done = done
        self._ready = False

    def ready(self) -> bool:
        return self._ready

    def set(self, _value: Any = None) -> None:
        self._tell(None)

    def set_exception(self, error: BaseException) -> None:
        self._tell(error)

    def _tell(self, error: BaseException | None) -> None:
        if self._ready:
            return
        self._ready = True
        try:
            self._done(error)
        except Exception:
            _log.exception('telling a nudged source of its commit failed')


class _WorkFailed(Exception):
    """A work item raised inside the shared transaction (which is then rolled back)."""

    def __init__(self, index: int, error: Exception) -> None:
        super().__init__(index, error)
        self.index = index
        self.error = error


class GroupCommitter:
    """Batches publications and other writes from many greenlets into shared transactions."""

    def __init__(self, engine: Engine, max_batch: int, spawn: Callable[..., gevent.Greenlet],
                 on_committed: Callable[[list[Publication]], None],
                 claim: Callable[[list[Publication]], list[tuple[Callable[[Connection], Any], AsyncResult]]]
                 | None = None, ack_linger: float = ACK_LINGER_SECS, hold_secs: float = HOLD_SECS,
                 one_trip: bool = True) -> None:
        self._engine = engine
        #: The writer's connection between commits.
        self._held: Connection | None = None
        self._hold_secs = max(hold_secs, 0.0)
        #: Whether commits of single statements go in one round trip (PostgreSQL, holding its connection).
        self._one_trip = one_trip and self._hold_secs > 0 and not is_sqlite(engine)
        self._ack_linger = ack_linger
        #: Work of idle delivery loops whose queues the publications feed, to run in the same commit.
        self._claim = claim
        self._max_batch = max_batch
        self._queue: Queue = Queue()
        self._on_committed = on_committed
        #: Transactions committed so far (for tests and benchmarks: how many commits a load costs).
        self.commits = 0
        #: Results of the last commit's works (delivery loops' takes), given once the next commit has started.
        self._deferred: list[tuple[AsyncResult, Any]] = []
        self._writer = spawn(self._run, name='pubsub-group-commit')

    def submit(self, pub: Publication) -> None:
        """Store one publication durably; returns once committed, raises StorageUnavailable otherwise."""
        result: AsyncResult = AsyncResult()
        self._queue.put((pub, result))
        result.get()

    def run(self, work: Callable[[Connection], T]) -> T:
        """Run work(conn) in the next shared transaction; returns its result once committed."""
        result: AsyncResult = AsyncResult()
        self._queue.put((work, result))
        return result.get()

    def nudge(self, take: Callable[[], Ready | None]) -> None:
        """Have take() called as the next commit is put together and its work written in it; returns at once."""
        self._queue.put((_Nudge(take), None))

    def _run(self) -> None:
        try:
            self._write_forever()
        finally:
            self._wake_deferred()
            self._release()

    def _next(self) -> _Item:
        """The next queued item; gives the held connection back while there is nothing to write for a while."""
        if self._deferred:
            # The publisher answered by the last commit queues its next publication first (see _committed).
            gevent.sleep(0)
            if self._queue.empty():
                self._wake_deferred()
        if self._held is not None:
            try:
                return self._queue.get(timeout=self._hold_secs)
            except Empty:
                self._release()
        return self._queue.get()

    def _release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            try:
                held.close()
            except Exception:
                _log.exception('giving back the group commit\'s connection failed')

    def _transaction(self, work: Callable[[Connection], T]) -> T:
        """work(conn) in one transaction, on the held connection when holding is on."""
        if self._hold_secs <= 0:
            return run_transaction(self._engine, work)
        if self._held is None:
            self._held = write_connection(self._engine)
        try:
            return run_write_on(self._engine, self._held, work)
        except BaseException:
            # Whatever failed (the server, the link, a work item), the next commit starts on a checked connection.
            self._release()
            raise

    def _write_forever(self) -> None:
        while True:
            batch: list[_Item] = [self._next()]
            # Let greenlets that are ready to run (a loop that has just delivered, a publisher that
            # has just been answered) queue their work first, so that it rides in this commit.
            gevent.sleep(0)
            self._drain(batch)
            # The loops run once this greenlet waits: for the commit's thread, or while lingering.
            self._wake_deferred()
            if self._ack_linger > 0 and all(isinstance(item, _Nudge) for item, _ in batch):
                self._linger(batch)
            pubs = [(p, r) for p, r in batch if isinstance(p, Publication)]
            works = [(w, r) for w, r in batch if not isinstance(w, (Publication, _Nudge))]
            # Acks first: a cycle in the same transaction must not take again what they settle.
            works = self._ready([n for n, _ in batch if isinstance(n, _Nudge)]) + works  # type: ignore[misc]
            if pubs and self._claim is not None:
                works += self._claim([p for p, _ in pubs])  # type: ignore[misc]
            if not pubs and not works:
                continue  # only nudges, whose sources had nothing left
            try:
                self._commit(pubs, works)
            except gevent.GreenletExit:
                for _, result in pubs + works:
                    if not result.ready():
                        result.set_exception(StorageUnavailable('the server is stopping; nothing was stored'))
                raise

    def _wake_deferred(self) -> None:
        """Give the results _committed held back (delivery loops' takes) to their waiters."""
        deferred, self._deferred = self._deferred, []
        for result, value in deferred:
            result.set(value)

    def _linger(self, batch: list[Any]) -> None:
        """Nothing but acks to write: wait up to ack_linger for other writes, gathering the nudges meanwhile."""
        deadline = time.monotonic() + self._ack_linger
        while len(batch) < self._max_batch:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                item = self._queue.get(timeout=remaining)
            except Empty:
                return
            batch.append(item)
            if not isinstance(item[0], _Nudge):
                gevent.sleep(0)  # as for the first item: let the greenlets ready now queue theirs too
                self._drain(batch)
                return

    def _drain(self, batch: list[Any]) -> None:
        """Add what is queued now to batch, up to max_batch items."""
        while len(batch) < self._max_batch:
            try:
                batch.append(self._queue.get_nowait())
            except Empty:
                break

    @staticmethod
    def _ready(nudges: list[_Nudge]) -> list[tuple[Callable[[Connection], Any], _Told]]:
        """The work of nudged sources, taken now (so that what they finish meanwhile rides in the next commit)."""
        works = []
        for nudge in nudges:
            try:
                ready = nudge.take()
            except Exception:  # the source settles it with its next cycle instead
                _log.exception('taking the work of a nudged source failed')
                continue
            if ready is not None:
                works.append((ready[0], _Told(ready[1])))
        return works

    def _commit(self, pubs: list[_Item], works: list[_Item]) -> None:
        if self._one_trip and all(isinstance(work, StatementWork) for work, _ in works) and \
                sum(p.size for p, _ in pubs) <= ONE_TRIP_MAX_BYTES:  # type: ignore[union-attr]
            try:
                self._commit_in_one_trip(pubs, works)
                return
            except one_trip.Refused as e:  # nothing was stored: the ordinary way below finds the item at fault
                _log.info('a one-trip commit was refused (%s); writing it statement by statement', e)
        while True:
            try:
                values = self._transaction(functools.partial(self._write_all, pubs=pubs, works=works))
            except _WorkFailed as failed:
                # Only that item's waiter hears of it; the rest are written again without it.
                works[failed.index][1].set_exception(failed.error)
                works = works[:failed.index] + works[failed.index + 1:]
                if pubs or works:
                    continue
                return
            except (OperationalError, DBAPIError) as e:
                _log.error('storing %d publication(s) failed: %s', len(pubs), e.__class__.__name__)
                error = StorageUnavailable(f'storage unavailable, nothing was stored: {e.orig.__class__.__name__}')
                for _, result in pubs + works:
                    result.set_exception(error)
                return
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.exception('storing %d publication(s) failed', len(pubs))
                for _, result in pubs + works:
                    result.set_exception(e)
                return
            break
        self._committed(pubs, works, values)

    def _commit_in_one_trip(self, pubs: list[_Item], works: list[_Item]) -> None:
        """Publications and single-statement works in one query, BEGIN to COMMIT (Refused: nothing stored)."""
        try:
            statements = [publication_statement([p for p, _ in pubs])] if pubs else []  # type: ignore[misc]
        except Exception as e:  # data the JSON codec refuses: the ordinary way fails the batch's publishers
            raise one_trip.Refused(f'the publications could not be encoded: {type(e).__name__}') from e
        statements += [(work.sql, work.params) for work, _ in works]  # type: ignore[union-attr]
        try:
            if self._held is None:
                self._held = self._engine.connect()
            raw = self._held.connection.dbapi_connection
            rows = one_trip.run(raw, statements)  # type: ignore[arg-type]
        except one_trip.Refused:
            raise
        except BaseException as e:
            # Whether it committed is unknown: the connection is not used again, and nobody is told of a store.
            self._drop_held()
            if isinstance(e, (psycopg.Error, DBAPIError)):
                _log.error('storing %d publication(s) failed: %s', len(pubs), e.__class__.__name__)
                error: BaseException = StorageUnavailable(
                    f'storage unavailable, nothing was stored: {e.__class__.__name__}')
            elif isinstance(e, Exception):
                _log.exception('storing %d publication(s) failed', len(pubs))
                error = e
            else:
                raise
            for _, result in pubs + works:
                result.set_exception(error)
            return
        values: list[Any] = []
        for (work, result), answer in zip(works, rows[1:] if pubs else rows, strict=True):
            try:
                values.append(work.finish(answer, None))  # type: ignore[union-attr]
            except Exception as e:  # it stored nothing (see StatementWork): only its waiter hears of it
                result.set_exception(e)
                values.append(None)
        self._committed(pubs, works, values)

    def _drop_held(self) -> None:
        """Close the held connection for good (not back to the pool): its state is not known."""
        held, self._held = self._held, None
        if held is None:
            return
        try:
            held.invalidate()
            held.close()
        except Exception:
            _log.exception('dropping the group commit\'s connection failed')

    def _committed(self, pubs: list[_Item], works: list[_Item], values: list[Any]) -> None:
        """A commit is durable: wake its waiters (those not failed already) and the subscribers."""
        self.commits += 1
        for _, result in pubs:
            result.set(None)
        # A lone publication: its publisher runs first and its next publication's commit starts before the
        # loops deliver, so that they deliver while the thread commits (a sequential publisher's commits
        # were 20 % slower with the delivery in between). With more, the hub has plenty to do between
        # commits, and delivering during one made the loops and the commit's thread fight for the GIL.
        defer = len(pubs) == 1
        for (_, result), value in zip(works, values, strict=True):
            if not result.ready():
                if defer and not isinstance(result, _Told):
                    self._deferred.append((result, value))
                else:
                    result.set(value)
        if pubs:
            try:
                self._on_committed([p for p, _ in pubs])  # type: ignore[misc]
            except Exception:
                _log.exception('waking subscribers after a commit failed')

    @classmethod
    def _write_all(cls, conn: Connection, pubs: list[_Item], works: list[_Item]) -> list[Any]:
        if pubs:
            cls.write_publications(conn, [p for p, _ in pubs])  # type: ignore[misc]
        values = []
        for index, (work, _) in enumerate(works):
            try:
                values.append(work(conn))  # type: ignore[operator]
            except Exception as e:
                raise _WorkFailed(index, e) from e
        return values

    @staticmethod
    def write_publications(conn: Connection, pubs: list[Publication]) -> None:
        """Write a batch's publications in the shared transaction (tests put a spy or a fake in its place)."""
        insert_publications(conn, pubs)
