"""The delivery loop's storage over SQL: settle a batch's outcomes and take the next batch.

Dead letters of a settlement are written through ``DeadLetterer``, so that the observers hear of them
once the transaction that stored them has committed, as they hear of every other dead letter.

Acks of messages a loop has finished can also be written ahead of the rest of their batch's outcome
(``ack_soon``): in the next commit of the group committer, without the loop waiting for it.

``FencedQueue`` is one loop's view of the backend: each of its transactions first checks that the
loop's lease is still held at the version the loop took it with (``runtime.pubsub.leases.check_fence``),
so that a loop that lost its lease retries and dead-letters nothing (``LeaseLost``). On PostgreSQL a
cycle whose settlement holds only acks is one statement (``queue_sql.fenced_take_statement``): the
fence, the acks and the next batch with its attempts counted — one round trip where there were four.
That statement changes nothing unless the lease is held, so it is handed to the group committer as a
``StatementWork``, which it may send with the rest of its commit in one round trip
(``runtime.pubsub.one_trip``); early acks likewise. Early acks are not fenced: they ride in commits
shared with other loops, which one loop's lost lease must not fail, and each is of a message whose
handler has finished, so storing it is never wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine

from runtime.db.blocking import run_transaction
from runtime.db.engine import is_sqlite
from runtime.errors import LeaseLost
from runtime.pubsub import queue_sql, statements
from runtime.pubsub.dead_letters import DeadLetterer, Moves
from runtime.pubsub.leases import Fence, check_fence
from runtime.pubsub.one_trip import StatementWork
from runtime.pubsub.statements import Delivery, Settlement

T = TypeVar('T')

#: A check run first in a transaction of the backend's (raises to refuse the whole transaction).
Check = Callable[[Connection], None]

#: Hands the group committer something to ask, as its next commit is put together, for work ready by then.
Nudge = Callable[[Callable[[], 'tuple[Callable[[Connection], Any], Callable[[BaseException | None], None]] | None']],
                 None]


def apply_settlement(conn: Connection, settlement: Settlement, moves: Moves) -> None:
    """Store a batch's outcomes: ack, reschedule, dead-letter, and take back attempts never made."""
    if settlement.acked:
        statements.ack(conn, settlement.acked)
    for d, at, error in settlement.retries:
        statements.schedule_retry(conn, d.entry_id, at, error, d.last_traceback)
    for d, reason, error in settlement.dead:
        moves.add(conn, d, reason, error)
    if settlement.uncount:
        statements.uncount_attempt(conn, settlement.uncount)


class SqlQueueBackend:
    """The delivery loop's storage, over the functions of ``runtime.pubsub.statements`` (off the hub for SQLite).

    Its transactions go through ``writer`` when one is given — the broker's group committer, so
    that a loop's cycle shares its commit with the publications and the other loops' cycles —
    and through a transaction of their own otherwise.
    """

    def __init__(self, engine: Engine, dead_letterer: DeadLetterer,
                 writer: Callable[[Callable[[Connection], Any]], Any] | None = None,
                 nudge: Nudge | None = None) -> None:
        self._engine = engine
        self._dead_letterer = dead_letterer
        self.writer = writer
        #: The group committer's nudge (``GroupCommitter.nudge``): without it, acks wait for their batch's end.
        self.nudge = nudge

    def _write(self, work: Callable[[Connection], T]) -> T:
        if self.writer is not None:
            return self.writer(work)
        return run_transaction(self._engine, work)

    def cycle(self, sub_id: int, settlement: Settlement | None, limit: int,
              due_before: float | None, check: Check | None = None,
              fence: Fence | None = None) -> tuple[list[Delivery], float | None]:
        """Settle the last batch, take the next and count its attempts: one transaction.

        Returns the batch (as it was before the count) and, when it is empty, when the queue's
        earliest entry is due (None for an empty queue). check, when given, runs first; fence, when
        given, is checked like ``check_fence`` (with no settlement, on PostgreSQL, in the take's statement).
        """
        one = self._one_statement(sub_id, settlement, limit, due_before, check, fence)
        if one is not None:  # nothing to dead-letter: the group committer may send it in one trip
            return self._write(one)
        return self._dead_letterer.run(self._write, lambda conn, moves: _cycle(conn, moves, sub_id, settlement,
                                                                              limit, due_before, check, fence))

    def cycle_work(self, sub_id: int, settlement: Settlement | None, limit: int, due_before: float | None,
                   check: Check | None = None,
                   fence: Fence | None = None) -> Callable[[Connection], tuple[list[Delivery], float | None]]:
        """What ``cycle`` does, as work to run in a transaction of the caller's.

        The settlement may hold no dead letters: they are announced after a commit, and this
        backend does not see the caller's (the delivery loop only hands over work without one).
        """
        if settlement is not None and settlement.dead:
            raise ValueError('a cycle run in another transaction cannot dead-letter: settle first')
        one = self._one_statement(sub_id, settlement, limit, due_before, check, fence)
        if one is not None:
            return one
        return lambda conn: _cycle(conn, Moves(), sub_id, settlement, limit, due_before, check, fence)

    def _one_statement(self, sub_id: int, settlement: Settlement | None, limit: int, due_before: float | None,
                       check: Check | None, fence: Fence | None) -> StatementWork[Any] | None:
        """The cycle as one statement (PostgreSQL, fenced, acks only), or None when it takes more."""
        if check is not None or fence is None or not _acks_only(settlement) or is_sqlite(self._engine):
            return None
        return _fenced_take_work(fence, settlement.acked if settlement else [], sub_id, limit, due_before)

    def settle(self, settlement: Settlement, check: Check | None = None) -> None:
        """Store a batch's outcomes on their own (check, when given, first)."""
        def work(conn: Connection, moves: Moves) -> None:
            if check is not None:
                check(conn)
            apply_settlement(conn, settlement, moves)
        self._dead_letterer.run(self._write, work)

    def ack_soon(self, take: Callable[[], list[int]],
                 written: Callable[[list[int], BaseException | None], None]) -> bool:
        """Have the entries take() returns, as the next shared commit is put together, acked in it.

        Returns at once; written(ids, error) is called once that commit is durable (error None) or
        failed. False when there is no shared commit to ride in (the caller acks with its next cycle).
        """
        if self.nudge is None:
            return False

        def ready() -> tuple[Callable[[Connection], None], Callable[[BaseException | None], None]] | None:
            ids = take()
            if not ids:
                return None
            return self._ack_work(ids), lambda error: written(ids, error)
        self.nudge(ready)
        return True

    def _ack_work(self, ids: list[int]) -> Callable[[Connection], None]:
        if self._engine.dialect.name == 'postgresql':
            sql, params = queue_sql.ack_statement(ids)
            return StatementWork(sql, params, lambda _rows, _conn: None)
        settlement = Settlement(ids, [], [], [])
        return lambda conn: apply_settlement(conn, settlement, Moves())


class FencedQueue:
    """One delivery loop's storage: the backend's, each transaction refused (LeaseLost) once its lease is lost."""

    def __init__(self, backend: SqlQueueBackend, fence: Fence) -> None:
        self._backend = backend
        self.fence = fence

    def _check(self, conn: Connection) -> None:
        check_fence(conn, self.fence)

    def cycle(self, sub_id: int, settlement: Settlement | None, limit: int,
              due_before: float | None) -> tuple[list[Delivery], float | None]:
        """``SqlQueueBackend.cycle`` under the lease."""
        return self._backend.cycle(sub_id, settlement, limit, due_before, fence=self.fence)

    def cycle_work(self, sub_id: int, settlement: Settlement | None, limit: int,
                   due_before: float | None) -> Callable[[Connection], tuple[list[Delivery], float | None]]:
        """``SqlQueueBackend.cycle_work`` under the lease."""
        return self._backend.cycle_work(sub_id, settlement, limit, due_before, fence=self.fence)

    def ack_soon(self, take: Callable[[], list[int]],
                 written: Callable[[list[int], BaseException | None], None]) -> bool:
        """``SqlQueueBackend.ack_soon`` (not fenced: see the module's docstring)."""
        return self._backend.ack_soon(take, written)

    def settle(self, settlement: Settlement) -> None:
        """``SqlQueueBackend.settle`` under the lease."""
        self._backend.settle(settlement, self._check)


def _acks_only(settlement: Settlement | None) -> bool:
    return settlement is None or not (settlement.retries or settlement.dead or settlement.uncount)


def _cycle(conn: Connection, moves: Moves, sub_id: int, settlement: Settlement | None, limit: int,
           due_before: float | None, check: Check | None = None,
           fence: Fence | None = None) -> tuple[list[Delivery], float | None]:
    if check is not None:
        check(conn)
    if fence is not None and _acks_only(settlement) and conn.dialect.name == 'postgresql':
        # Fence, acks and take in one statement: a lost lease still refuses the whole transaction.
        return _fenced_take_work(fence, settlement.acked if settlement else [], sub_id, limit, due_before)(conn)
    if fence is not None:
        check_fence(conn, fence)
    if settlement is not None:
        apply_settlement(conn, settlement, moves)
    batch = statements.take_batch(conn, sub_id, limit, due_before)
    return _with_due(conn, batch, sub_id, due_before)


def _with_due(conn: Connection, batch: list[Delivery], sub_id: int,
              due_before: float | None) -> tuple[list[Delivery], float | None]:
    """The batch, and when it is empty when the queue's earliest entry is due (None for an empty queue)."""
    if batch or due_before is None:
        # Taking the head regardless of due times, an empty batch means an empty queue.
        return batch, None
    return batch, statements.next_due(conn, sub_id)


def _fenced_take_work(fence: Fence, acked: list[int], sub_id: int, limit: int,
                      due_before: float | None) -> StatementWork[tuple[list[Delivery], float | None]]:
    """check_fence, the acks and statements.take_batch in one PostgreSQL statement: one round trip, not three."""
    sql, params = queue_sql.fenced_take_statement(fence.name, fence.owner, fence.version, acked, sub_id, limit,
                                                  due_before)

    def finish(rows: list[tuple[Any, ...]], _conn: Connection | None) -> tuple[list[Delivery], float | None]:
        version, due, head = queue_sql.fenced_rows(rows)
        if version != fence.version:  # the statement stored nothing; run alone, its transaction is refused too
            raise LeaseLost(fence.name, fence.version, version)
        return [Delivery(*row) for row in head], due
    return StatementWork(sql, params, finish)
