"""The delivery loop: one greenlet per subscription this worker owns.

The loop takes a batch from the head of the queue (high priority first, then publication
order), records the attempt, hands each message to the subscriber — each success acked in the
next shared commit, while the loop goes on — and then, in one transaction, schedules what failed
for a later attempt and dead-letters what ran out of attempts or expired. A message leaves the
queue only after the subscriber succeeded, so a crash means redelivery of what was in the handler
and what finished in the last few milliseconds (at most one batch for a WebSocket or file subscriber):
at-least-once.

With ``err_should_block`` (the default, as in Zato) a failed message holds back the ones behind
it until it succeeds or is dead-lettered; otherwise later messages keep flowing. ``max_in_flight``
above 1 hands a batch's messages to that many greenlets at once, with no ordering promise.

Batch mode (REST push and WebSocket subscribers): a ``deliver_batch`` callable gets the whole
batch at once and answers with one ``Outcome`` per message it tried, or raises, which fails every
message of the batch; one that tried none of them makes the loop wait for a wake-up (or
``UNTRIED_WAIT_SECS``) rather than take them again at once. Each failed message has its attempt
counted and is scheduled or dead-lettered on its own, as in message mode; ``max_in_flight`` does
not apply (one request per batch). With ``err_should_block``, the retries of a failed batch are all
due at the time decided for its head (nothing behind the head may go first anyway), so that the
batch is tried again whole rather than split by jitter. A deliverer that keeps messages across
batches (a WebSocket client's window) answers ``held`` for one it still awaits: the attempt stands,
and the count of taking it again is taken back in the transaction of the next take, never alone.

One storage round trip per batch: the outcome of a batch is settled in the same transaction
that takes the next batch from the queue and records its attempts (``QueueBackend.cycle``), so
that a busy queue costs one commit per batch, not three. The outcome is therefore stored just
before the next batch starts — at once when the loop goes on, and on its own (``settle``) before
the loop waits or stops. Entries that were taken but not tried (behind a message that is not due
yet, or pushed out of the batch by in-memory messages of higher priority) have their attempt
taken back in the next settlement.

Successes settle progressively: in message mode, a message whose handler has returned is handed to
``QueueBackend.ack_soon`` at once (in batch mode, one the deliverer reports done through
``settled`` — a REST push answered 2xx —), and its ack rides in the next commit of the group committer
(within milliseconds), while the loop goes on with the next message; what the committer has not
taken yet when the batch ends goes with the cycle as before. So a crash redelivers what was in the
handler at that moment and what finished in the last few milliseconds, not a whole batch, and a
busy queue pays no extra commit: acks finished during a commit share the next one. Before a cycle
or a settlement of its own, the loop waits until its acks in a commit are durable, so that an ack
whose commit failed is written with it rather than its message taken again. Failures, retries and
dead letters are stored at the batch's end, as before.

A failed attempt keeps its error line and its traceback (``runtime.pubsub.failure``) with the
entry, and so with the dead letter. The log gets the traceback at the first failed attempt
(WARNING) and when the message is dead-lettered (ERROR); the attempts in between get one short
INFO line each, so that a message retried 25 times does not write 25 tracebacks.

The loop knows nothing of SQL or HTTP: storage is the ``QueueBackend`` it is given and the
subscriber is the ``deliver`` (or ``deliver_batch``) callable, which raises on failure. Dead
letters are announced to the observers by the backend, once their settlement is committed
(``runtime.pubsub.dead_letters``); the loop itself announces delivery attempts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

import gevent
from gevent.event import AsyncResult, Event
from gevent.pool import Pool

from runtime.errors import LeaseLost
from runtime.pubsub.failure import error_line, format_traceback
from runtime.pubsub.observers import Observers
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.retry import RedeliveryDecision, decide
from runtime.pubsub.statements import Delivery, Settlement

_log = logging.getLogger(__name__)

#: Longest an idle loop sleeps before looking at its queue again, whatever the wake-ups say.
IDLE_RECHECK_SECS = 30.0

#: How long a loop waits (or until woken) when its subscriber took none of a batch, rather than spin.
UNTRIED_WAIT_SECS = 1.0

#: A subscriber taking one message: raises on failure; False means "dropped, do not deliver".
Deliver = Callable[[SubInfo, Delivery], 'bool | None']

#: A subscriber taking a whole batch: one Outcome per message tried; raises when all failed.
DeliverBatch = Callable[[SubInfo, list[Delivery]], 'list[Outcome] | None']


#: A cycle's storage work as a unit to run in someone else's transaction (opaque to the loop).
CycleWork = Callable[[Any], tuple[list[Delivery], 'float | None']]


class QueueBackend(Protocol):
    """Storage as the delivery loop needs it; it announces the dead letters it stores, once committed."""

    def cycle(self, sub_id: int, settlement: Settlement | None, limit: int,
              due_before: float | None) -> tuple[list[Delivery], float | None]: ...

    def cycle_work(self, sub_id: int, settlement: Settlement | None, limit: int,
                   due_before: float | None) -> CycleWork: ...

    def settle(self, settlement: Settlement) -> None: ...

    def ack_soon(self, take: Callable[[], list[int]],
                 written: Callable[[list[int], BaseException | None], None]) -> bool: ...


class Outcome:
    """What happened to one message of a batch."""

    __slots__ = ('delivery', 'ok', 'error', 'decision', 'drop', 'early', 'held')

    def __init__(self, delivery: Delivery, ok: bool, error: BaseException | None = None,
                 drop: bool = False, held: bool = False) -> None:
        self.delivery = delivery
        self.ok = ok
        self.error = error
        self.drop = drop
        #: Sent in an earlier batch and still awaited (a WebSocket client's window): no outcome yet, its
        #: attempt stands. The batch that took it again counted it once more, which the next take takes back.
        self.held = held
        self.decision: RedeliveryDecision | None = None
        #: Its ack was handed to the backend as soon as it succeeded (not with the batch's outcome).
        self.early = False


def _extended(p: Settlement | None, acked: list[int] | None = None, uncount: list[int] | None = None) -> Settlement:
    """The settlement p (or an empty one) with acks put first and attempts to take back put last."""
    return Settlement((acked or []) + (p.acked if p else []), p.retries if p else [], p.dead if p else [],
                      (p.uncount if p else []) + (uncount or []))


class DeliveryLoop:
    """Delivers one subscription's queue for as long as this worker owns it."""

    def __init__(self, sub: SubInfo, backend: QueueBackend, deliver: Deliver | None,
                 still_owner: Callable[[], bool], observers: Observers | None = None, *,
                 deliver_batch: DeliverBatch | None = None, on_wake: Callable[[], None] | None = None) -> None:
        if (deliver is None) == (deliver_batch is None):
            raise TypeError('a DeliveryLoop needs either deliver or deliver_batch')
        self.sub = sub
        self._observers = observers or Observers()
        self._backend = backend
        self._deliver = deliver
        self._deliver_batch = deliver_batch
        self._still_owner = still_owner
        self._wake = Event()
        #: Told of every wake-up too: a subscriber waiting inside deliver_batch (a WebSocket client's window)
        #: hands the loop back its turn, so that new messages are taken at once.
        self._on_wake = on_wake
        self._wake.set()
        #: Non-GD messages held in this worker's memory only (negative entry ids).
        self._ram: list[Delivery] = []
        #: The stored part of the last batch's outcome, not yet written (see the module docstring).
        self._pending: Settlement | None = None
        #: Waiting for messages (nothing pending): a commit that queues some may take the next batch.
        self._idle = False
        #: The next batch, taken on this loop's behalf in a publishers' commit (see claim()).
        self._claim: AsyncResult | None = None
        #: Stored entries whose handler succeeded, not yet handed to a commit (see _finished()).
        self._acks: list[int] = []
        #: A nudge of the backend is waiting for the committer to take the acks.
        self._nudged = False
        #: Cleared while acks taken by the committer are being written (see _acks_written()).
        self._acks_settled = Event()
        self._acks_settled.set()
        #: Entries of the batch in deliver_batch that its deliverer reported done (see settled()).
        self._settled_early: set[int] = set()
        #: Stored entries the deliverer still holds (Outcome.held), counted again by the last take: that
        #: count is taken back only in the transaction of the next take, which counts them once more, never
        #: on its own — stored alone (the loop waiting or stopping), it would leave a message a client holds
        #: with no attempt counted, and a client that leaves then gets it back as if never sent.
        self._held_back: list[int] = []

    def wake(self) -> None:
        """New messages may be waiting: look now."""
        self._wake.set()
        if self._on_wake is not None:
            self._on_wake()

    def claim(self) -> tuple[CycleWork, AsyncResult] | None:
        """Let a commit that queues messages for this subscription take the loop's next batch.

        Called by the writer before such a commit; only an idle loop is claimed, and only once. The
        cycle then rides in that commit — a message waits for one commit before its delivery, not
        two — and the loop, once woken, takes its batch from the returned result instead of running
        a cycle of its own.
        """
        if not self._idle or self._claim is not None or self._pending is not None or self._acks or self._held_back:
            return None
        opts = self.sub.options
        work = self._backend.cycle_work(self.sub.id, None, opts.delivery_batch_size,
                                        None if opts.err_should_block else time.time())
        self._claim = AsyncResult()
        return work, self._claim

    def push(self, delivery: Delivery) -> None:
        """Queue a non-GD message in memory (lost if this worker stops, by design)."""
        self._ram.append(delivery)
        self._wake.set()

    @property
    def ram_depth(self) -> int:
        """How many non-GD messages wait in memory."""
        return len(self._ram)

    def run(self) -> None:
        """Deliver until killed or until this worker no longer owns the subscription."""
        while True:
            self._wake.clear()
            if not self._still_owner():
                try:
                    self._flush()
                except Exception as e:  # the next owner delivers the batch again: at-least-once holds
                    _log.error('%s: storing delivery outcomes failed (%s: %s)', self.sub.label, type(e).__name__, e)
                _log.info('%s: lease lost, delivery stops here', self.sub.label)
                return
            try:
                wait = self._one_batch()
            except gevent.GreenletExit:
                raise
            except LeaseLost as e:  # another worker delivers it now: nothing of this loop's may be stored
                _log.warning('%s: %s; delivery stops here', self.sub.label, e)
                return
            except Exception as e:
                _log.error('%s: delivery batch failed (%s: %s); retrying shortly', self.sub.label,
                           type(e).__name__, e)
                wait = 1.0
            if wait:
                try:
                    self._flush()
                except Exception as e:
                    _log.error('%s: storing delivery outcomes failed (%s: %s); retrying shortly', self.sub.label,
                               type(e).__name__, e)
                    wait = 1.0
                self._idle = self._pending is None and not self._acks and not self._held_back
                try:
                    self._wake.wait(timeout=wait)
                finally:
                    self._idle = False

    def _flush(self) -> None:
        """Store the outcome of the last batch now, on its own (the loop is about to wait or stop)."""
        pending = self._settlement()
        if pending:
            self._backend.settle(pending)
            self._pending = None

    def _take(self, now: float) -> tuple[list[Delivery], float | None]:
        """Settle the last batch and take the next one in one round trip; the pending outcome is then stored."""
        if self._claim is not None:  # taken in a publishers' commit while this loop was idle
            claimed, self._claim = self._claim, None
            return claimed.get()
        opts = self.sub.options
        settlement = self._settlement()
        stored_held = [i for i in self._held_back if i > 0]
        if stored_held:
            settlement = _extended(settlement, uncount=stored_held)
        batch, due = self._backend.cycle(self.sub.id, settlement, opts.delivery_batch_size,
                                         None if opts.err_should_block else now)
        self._pending = None
        if len(stored_held) < len(self._held_back):  # in memory: counted again by _one_batch right after this
            self._settle_in_memory([], [], [], [i for i in self._held_back if i < 0])
        self._held_back = []
        return batch, due

    def settled(self, outcome: Outcome) -> None:
        """A batch deliverer's message succeeded before its batch ended: have it acked at once, too."""
        d = outcome.delivery
        if (outcome.ok or outcome.drop) and not outcome.early and d.entry_id > 0:
            self._finished(d.entry_id)
            self._settled_early.add(d.entry_id)
            outcome.early = True

    def _finished(self, entry_id: int) -> None:
        """A stored message's handler succeeded: have it acked in the next shared commit, without waiting."""
        self._acks.append(entry_id)
        if not self._nudged:
            self._nudged = self._backend.ack_soon(self._take_acks, self._acks_written)

    def _take_acks(self) -> list[int]:
        """The acks not yet handed to a commit, now taken by the committer for the one it puts together."""
        self._nudged = False
        ids, self._acks = self._acks, []
        if ids:
            self._acks_settled.clear()
        return ids

    def _acks_written(self, ids: list[int], error: BaseException | None) -> None:
        """The commit of acks taken by _take_acks is durable, or failed: then they go with the next settlement."""
        if error is not None:
            self._acks[:0] = ids
            _log.warning('%s: storing %d ack(s) failed (%s); they are stored with the next settlement',
                         self.sub.label, len(ids), type(error).__name__)
        self._acks_settled.set()

    def _settlement(self) -> Settlement | None:
        """The pending outcome with the acks not yet stored; waits for those being written to be durable.

        Merged into the pending outcome, so that if storing it fails they are tried again with it.
        """
        self._acks_settled.wait(timeout=IDLE_RECHECK_SECS)
        if self._acks:
            self._pending = _extended(self._pending, acked=self._acks)
            self._acks = []
        return self._pending

    def _one_batch(self) -> float:
        """Deliver one batch; returns how long to wait before the next (0 = at once)."""
        opts = self.sub.options
        now = time.time()
        batch, due = self._take(now)
        untried: list[int] = []  # taken (and so counted) but not tried: the attempt is taken back
        if self._ram:
            ram = [d for d in self._ram if opts.err_should_block or d.next_attempt_at <= now]
            # One order across both queues: priority first, then publication time.
            merged = sorted(batch + ram, key=lambda d: (-d.priority, d.pub_time))
            batch, rest = merged[:opts.delivery_batch_size], merged[opts.delivery_batch_size:]
            untried += [d.entry_id for d in rest if d.entry_id > 0]
        if not batch:
            if self._ram:
                ram_due = min(d.next_attempt_at for d in self._ram)
                due = ram_due if due is None else min(due, ram_due)
            self._pending = self._pending_or_none([], [], [], untried)
            return IDLE_RECHECK_SECS if due is None else max(0.01, min(due - now, IDLE_RECHECK_SECS))
        if opts.err_should_block:
            # Strict order: stop at the first message not due yet and wait for it.
            for i, d in enumerate(batch):
                if d.next_attempt_at > now:
                    untried += [x.entry_id for x in batch[i:] if x.entry_id > 0]
                    batch = batch[:i]
                    if not batch:
                        self._pending = self._pending_or_none([], [], [], untried)
                        return max(0.01, min(d.next_attempt_at - now, IDLE_RECHECK_SECS))
                    break
        expired = [d for d in batch if d.expiration_time <= now]
        live = [d for d in batch if d.expiration_time > now]
        untried += [d.entry_id for d in expired if d.entry_id > 0]  # never tried: dead-lettered below
        for d in live:
            d.delivery_count += 1
        outcomes = self._deliver_all(live, opts.max_in_flight, opts.err_should_block)
        tried = {o.delivery.entry_id for o in outcomes}
        uncount = untried + [d.entry_id for d in live if d.entry_id not in tried]
        acked, retries, dead = [], [], []
        # A failed batch fails each of its messages with one exception: formatted, and logged in full, once.
        tracebacks: dict[int, str] = {}
        logged: set[int] = set()
        for o in outcomes:
            d = o.delivery
            if o.held:
                self._held_back.append(d.entry_id)
                continue
            if o.ok or o.drop:
                if not o.early:
                    acked.append(d.entry_id)
                continue
            assert o.error is not None
            error = error_line(o.error)
            if id(o.error) not in tracebacks:
                tracebacks[id(o.error)] = format_traceback(o.error)
            d.last_traceback = tracebacks[id(o.error)]
            decision = decide(opts, d.delivery_count, o.error, time.time(), d.expiration_time)
            if decision.dead_letter:
                dead.append((d, decision.reason, error))
                # The last attempt: the full traceback, so the cause is in the log as well as the dead letter.
                _log.error('%s: message %s dead-lettered after %d attempt(s) (%s): %s%s', self.sub.label, d.msg_id,
                           d.delivery_count, decision.reason, error, self._traceback_once(o.error, d, logged))
            else:
                retries.append((d, decision.at, error))
        if self._deliver_batch is not None and opts.err_should_block and len(retries) > 1:
            position = {d.entry_id: i for i, d in enumerate(live)}
            head_at = min(retries, key=lambda r: position[r[0].entry_id])[1]
            retries = [(d, head_at, error) for d, _, error in retries]
        errors = {o.delivery.entry_id: o.error for o in outcomes if o.error is not None}
        given_back = [d for d, _, _ in retries if getattr(errors[d.entry_id], 'retry_at_once', False)]
        if given_back:
            # Not failures (a WebSocket client left holding them): one line for them all, due again at once.
            _log.info('%s: %d message(s) given back, due again at once (first: %s, attempt %d): %s', self.sub.label,
                      len(given_back), given_back[0].msg_id, given_back[0].delivery_count,
                      errors[given_back[0].entry_id])
        for d, at, error in retries:
            if getattr(errors[d.entry_id], 'retry_at_once', False):
                continue
            if d.delivery_count == 1:
                # The first failure gets the traceback; later ones one short line each, not 25 tracebacks.
                _log.warning('%s: message %s failed (attempt 1), next attempt in %.2f s: %s%s', self.sub.label,
                             d.msg_id, at - time.time(), error,
                             self._traceback_once(errors[d.entry_id], d, logged))
            else:
                _log.info('%s: message %s failed (attempt %d), next attempt in %.2f s: %s', self.sub.label,
                          d.msg_id, d.delivery_count, at - time.time(), error)
        for d in expired:
            dead.append((d, 'expired', d.last_error or 'the message expired before it could be delivered'))
        if self._ram:
            acked, retries, uncount = self._settle_in_memory(acked, retries, dead, uncount)
        self._pending = self._pending_or_none(acked, retries, dead, uncount)
        if dead:
            # Stored (and so announced to the observers, by the backend) at once, not with the next batch.
            self._flush()
        if live and not outcomes:
            # The subscriber tried none of them (a WebSocket subscription whose client just left, say):
            # their attempts are taken back, and the loop waits for a wake-up instead of taking them again.
            return UNTRIED_WAIT_SECS
        if retries and opts.err_should_block:
            return max(0.01, min(at for _, at, _ in retries) - time.time())
        return 0

    @staticmethod
    def _traceback_once(error: BaseException | None, d: Delivery, logged: set[int]) -> str:
        """The traceback to append to a log line: in full the first time this cycle logs the error."""
        if id(error) in logged:
            return ' (traceback above)'
        logged.add(id(error))
        return '\n' + d.last_traceback.rstrip()

    @staticmethod
    def _pending_or_none(acked: list[int], retries: list[tuple[Delivery, float, str]],
                         dead: list[tuple[Delivery, str, str]], uncount: list[int]) -> Settlement | None:
        if acked or retries or dead or uncount:
            return Settlement(acked, retries, dead, uncount)
        return None

    def _settle_in_memory(self, acked: list[int], retries: list[tuple[Delivery, float, str]],
                          dead: list[tuple[Delivery, str, str]], uncount: list[int]
                          ) -> tuple[list[int], list[tuple[Delivery, float, str]], list[int]]:
        """Apply outcomes of in-memory entries here; return what is left for storage.

        Dead in-memory entries stay in ``dead``: the backend stores them with their message.
        """
        gone = {i for i in acked if i < 0} | {d.entry_id for d, _, _ in dead if d.entry_id < 0}
        for d, at, error in retries:
            if d.entry_id < 0:
                d.next_attempt_at, d.last_error = at, error
        by_id = {d.entry_id: d for d in self._ram}
        for entry_id in uncount:
            if entry_id < 0:
                by_id[entry_id].delivery_count -= 1
        if gone:
            self._ram = [d for d in self._ram if d.entry_id not in gone]
        return ([i for i in acked if i > 0], [r for r in retries if r[0].entry_id > 0],
                [i for i in uncount if i > 0])

    def _deliver_all(self, batch: list[Delivery], max_in_flight: int, block: bool) -> list[Outcome]:
        if self._deliver_batch is not None:
            return self._deliver_together(batch) if batch else []
        if max_in_flight <= 1:
            outcomes = []
            for d in batch:
                outcome = self._deliver_and_ack(d)
                outcomes.append(outcome)
                if not outcome.ok and not outcome.drop and block:
                    break
            return outcomes
        pool = Pool(max_in_flight)
        return list(pool.imap(self._deliver_and_ack, batch))

    def _deliver_and_ack(self, d: Delivery) -> Outcome:
        """Deliver one message; a stored one that succeeded is acked at once, not with its batch."""
        outcome = self._deliver_one(d)
        if (outcome.ok or outcome.drop) and d.entry_id > 0:
            self._finished(d.entry_id)
            outcome.early = True
        return outcome

    def _deliver_together(self, batch: list[Delivery]) -> list[Outcome]:
        """Batch mode: the whole batch to deliver_batch; an exception fails every message."""
        assert self._deliver_batch is not None
        started = time.perf_counter()
        self._settled_early.clear()
        try:
            outcomes = self._deliver_batch(self.sub, batch)
        except gevent.GreenletExit:
            raise
        except Exception as e:
            # Not those it reported done (settled()): they are acked already, a success stays one.
            outcomes = [self._early_outcome(d) if d.entry_id in self._settled_early else Outcome(d, False, e)
                        for d in batch]
        if outcomes is None:
            outcomes = [Outcome(d, True) for d in batch]
        duration = time.perf_counter() - started
        for o in outcomes:
            if not o.held:  # not an attempt of this batch: it has no outcome yet
                self._observers.emit('after_deliver', self.sub, o.delivery, o.ok, o.error, duration)
        return outcomes

    @staticmethod
    def _early_outcome(d: Delivery) -> Outcome:
        outcome = Outcome(d, True)
        outcome.early = True
        return outcome

    def _deliver_one(self, d: Delivery) -> Outcome:
        assert self._deliver is not None
        started = time.perf_counter()
        try:
            delivered = self._deliver(self.sub, d)
        except gevent.GreenletExit:
            raise
        except Exception as e:
            self._observers.emit('after_deliver', self.sub, d, False, e, time.perf_counter() - started)
            return Outcome(d, False, e)
        self._observers.emit('after_deliver', self.sub, d, True, None, time.perf_counter() - started)
        # The subscriber (or a hook) may answer False: "drop it without delivering".
        return Outcome(d, True, drop=delivered is False)
