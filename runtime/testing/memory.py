"""``MemoryQueueBackend``: the in-memory twin of ``SqlQueueBackend``, for delivery loops without a database.

It implements the ``QueueBackend`` protocol of ``runtime.pubsub.delivery`` as the SQL backend does:
a cycle settles the last batch (acks, retries with their due time and error, dead letters,
attempts taken back) and takes the head of the queue — high priority first, then publication
order — counting one attempt per entry taken; an empty batch comes with the queue's earliest due
time. Dead letters are announced to the observers once settled, as after a commit.

Time: the backend keeps due times on a clock of its own (``clock``, ``time.time`` by default)
and translates them to wall-clock time for the loop, which reads ``time.time()``. ``drain`` runs
the loops until every queue is empty, and when all that is left waits for a later attempt it
advances that clock instead of sleeping: a message retried five times costs no real waiting.

    backend = MemoryQueueBackend()
    sub = SubInfo(1, 'sk.1', 'orders.*', 'service', 'orders.handler', options=DeliveryOptions(max_attempts=3))
    backend.put(sub, {'order': 1})
    backend.drain([backend.loop(sub, deliver)])
    assert backend.queue(sub.id) == [] and backend.dead_letters(sub.id) == []

Messages a loop holds in memory (``DeliveryLoop.push``, non-GD) are waited for but not retried
on the backend's clock: the loop keeps their due times itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import gevent

from runtime.pubsub.delivery import CycleWork, Deliver, DeliverBatch, DeliveryLoop
from runtime.pubsub.failure import MAX_TRACEBACK_CHARS
from runtime.pubsub.message import MSG_ID_PREFIX, Delivery
from runtime.pubsub.observers import Observers
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.statements import Settlement
from runtime.util.random_ids import random_hex
from runtime.util.spawn import Spawner

#: A message's lifetime when put() is given no expiration (the topics' default limit).
DEFAULT_EXPIRATION_SECS = 31536000.0

#: How often drain() looks at the queues, in seconds of real time.
DRAIN_POLL_SECS = 0.002


class DeliveryFailed(AssertionError):
    """A message was dead-lettered while drain(fail_fast=True) ran: names it, with the subscriber's error."""

    def __init__(self, sub: SubInfo | None, dead: dict[str, Any]) -> None:
        self.dead_letter = dead
        who = sub.label if sub is not None else f'subscription #{dead["sub_id"]}'
        super().__init__(f'{who}: message {dead["msg_id"]} dead-lettered after {dead["delivery_count"]} '
                         f'attempt(s) ({dead["reason"]}): {dead["last_error"]}\n{dead["last_traceback"] or ""}')


@dataclass
class _Entry:
    """A queue entry with its message; due and expiration times are on the backend's clock."""

    delivery: Delivery
    last_traceback: str = ''


class MemoryQueueBackend:
    """Per-subscription queues and dead letters in memory, behind the delivery loop's ``QueueBackend``."""

    def __init__(self, clock: Callable[[], float] = time.time, observers: Observers | None = None) -> None:
        self._clock = clock
        #: Added to the clock by drain() instead of sleeping until a retry is due.
        self._skipped_secs = 0.0
        self.observers = observers or Observers()
        self._queues: dict[int, list[_Entry]] = {}
        self._dead: dict[int, list[dict[str, Any]]] = {}
        self._subs: dict[int, SubInfo] = {}
        #: Entries taken by a cycle and not yet settled, per subscription.
        self._taken: dict[int, set[int]] = {}
        self._next_entry_id = 1
        self._next_message_id = 1
        self._next_dead_id = 1
        #: Dead letters not yet seen by a drain(fail_fast=True).
        self._new_dead: list[dict[str, Any]] = []

    # Time

    def now(self) -> float:
        """The backend's time: its clock plus what drain() skipped."""
        return self._clock() + self._skipped_secs

    def advance(self, secs: float) -> None:
        """Let secs pass on the backend's clock (due retries and expirations come sooner)."""
        self._skipped_secs += secs

    def _to_wall(self, t: float) -> float:
        return time.time() + (t - self.now())

    def _from_wall(self, t: float) -> float:
        return self.now() + (t - time.time())

    # Filling and reading

    def put(self, sub: SubInfo | int, data: Any = None, *, priority: int = 5, expiration: float | None = None,
            topic_name: str | None = None, mime_type: str | None = None, **meta: Any) -> Delivery:
        """Queue one message for a subscription, as a publication would; returns its entry.

        Non-str data is stored as JSON. ``expiration`` is in seconds from now; ``meta`` sets other
        fields of the ``Delivery`` (``publisher``, ``correl_id``, ``has_gd``, ``pub_time``...).
        """
        sub_id = sub if isinstance(sub, int) else sub.id
        if isinstance(sub, SubInfo):
            self._subs[sub.id] = sub
        if not isinstance(priority, int) or not 0 <= priority <= 9:
            raise ValueError(f'priority must be a whole number from 0 to 9, not {priority!r}')
        if isinstance(data, str):
            text, mime = data, mime_type or 'text/plain'  # with 'application/json': JSON text already
        else:
            text, mime = json.dumps(data), 'application/json'
        now = self.now()
        pub_time = meta.pop('pub_time', now)
        d = Delivery(entry_id=self._next_entry_id, sub_id=sub_id, delivery_count=0, next_attempt_at=0.0,
                     last_error='', recv_time=now, message_id=self._next_message_id,
                     msg_id=meta.pop('msg_id', MSG_ID_PREFIX + random_hex(12)),
                     topic_name=topic_name or (sub.pattern if isinstance(sub, SubInfo) else 'test.topic'),
                     data=text, mime_type=mime, priority=priority, pub_time=pub_time,
                     expiration_time=now + (DEFAULT_EXPIRATION_SECS if expiration is None else expiration),
                     publisher=meta.pop('publisher', ''), correl_id=meta.pop('correl_id', None),
                     in_reply_to=meta.pop('in_reply_to', None), ext_client_id=meta.pop('ext_client_id', None),
                     has_gd=meta.pop('has_gd', True), size=len(text.encode()), **meta)
        self._next_entry_id += 1
        self._next_message_id += 1
        self._queues.setdefault(sub_id, []).append(_Entry(d))
        return replace(d)

    def queue(self, sub_id: int) -> list[Delivery]:
        """The entries waiting in a queue, in delivery order (copies; due times on the backend's clock)."""
        return [replace(e.delivery, last_traceback=e.last_traceback) for e in self._ordered(sub_id)]

    def dead_letters(self, sub_id: int) -> list[dict[str, Any]]:
        """A subscription's dead letters, oldest first, with the keys of ``store.dead_letters``."""
        return [dict(dead) for dead in self._dead.get(sub_id, [])]

    def payloads(self, sub_id: int) -> list[Any]:
        """The data of the entries waiting in a queue, in delivery order."""
        return [d.payload() for d in self.queue(sub_id)]

    def _ordered(self, sub_id: int) -> list[_Entry]:
        # As the SQL head: priority (high first), then the message id (publication order).
        return sorted(self._queues.get(sub_id, []), key=lambda e: (-e.delivery.priority, e.delivery.message_id))

    # QueueBackend

    def cycle(self, sub_id: int, settlement: Settlement | None, limit: int,
              due_before: float | None) -> tuple[list[Delivery], float | None]:
        """Settle the last batch, take the next and count its attempts (the SQL backend's contract)."""
        if settlement is not None:
            self._apply(settlement)
        return self._take(sub_id, limit, due_before)

    def cycle_work(self, sub_id: int, settlement: Settlement | None, limit: int,
                   due_before: float | None) -> CycleWork:
        """What ``cycle`` does, as work to run later; the settlement may hold no dead letters."""
        if settlement is not None and settlement.dead:
            raise ValueError('a cycle run in another transaction cannot dead-letter: settle first')
        return lambda _conn: self.cycle(sub_id, settlement, limit, due_before)

    def settle(self, settlement: Settlement) -> None:
        """Store a batch's outcomes on their own."""
        self._apply(settlement)

    @staticmethod
    def ack_soon(take: Callable[[], list[int]], written: Callable[[list[int], BaseException | None], None]) -> bool:
        """No commits to share in memory: the loop acks what it finished with its next cycle (False)."""
        return False

    def _take(self, sub_id: int, limit: int, due_before: float | None) -> tuple[list[Delivery], float | None]:
        entries = self._ordered(sub_id)
        if due_before is not None:
            due = self._from_wall(due_before)
            entries = [e for e in entries if e.delivery.next_attempt_at <= due]
        batch = entries[:limit]
        taken = self._taken.setdefault(sub_id, set())
        out = []
        for e in batch:
            # The batch as it was before the count, with its times on the loop's (wall) clock.
            out.append(replace(e.delivery, next_attempt_at=self._to_wall(e.delivery.next_attempt_at),
                               expiration_time=self._to_wall(e.delivery.expiration_time),
                               pub_time=self._to_wall(e.delivery.pub_time),
                               recv_time=self._to_wall(e.delivery.recv_time)))
            e.delivery.delivery_count += 1
            taken.add(e.delivery.entry_id)
        if out or due_before is None:
            return out, None
        waiting = self._queues.get(sub_id)
        return out, (self._to_wall(min(e.delivery.next_attempt_at for e in waiting)) if waiting else None)

    def _apply(self, settlement: Settlement) -> None:
        by_id = {e.delivery.entry_id: e for q in self._queues.values() for e in q}
        gone = set(settlement.acked)
        for d, at, error in settlement.retries:
            e = by_id.get(d.entry_id)
            if e is not None:
                e.delivery.next_attempt_at = self._from_wall(at)
                e.delivery.last_error = error[:4000]
                e.last_traceback = d.last_traceback[-MAX_TRACEBACK_CHARS:]
        announced = []
        for d, reason, error in settlement.dead:
            e = by_id.get(d.entry_id)
            traceback = d.last_traceback[-MAX_TRACEBACK_CHARS:] or (e.last_traceback if e is not None else '')
            dead = {'id': self._next_dead_id, 'sub_id': d.sub_id, 'delivery_count': d.delivery_count,
                    'last_error': error[:4000], 'last_traceback': traceback or None, 'reason': reason,
                    'dead_at': self.now(), 'msg_id': d.msg_id, 'data': d.data, 'mime_type': d.mime_type}
            self._next_dead_id += 1
            self._dead.setdefault(d.sub_id, []).append(dead)
            self._new_dead.append(dead)
            gone.add(d.entry_id)
            announced.append((d, reason, error))
        for entry_id in settlement.uncount:
            e = by_id.get(entry_id)
            if e is not None:
                e.delivery.delivery_count -= 1
        settled = gone | set(settlement.uncount) | {d.entry_id for d, _, _ in settlement.retries}
        for sub_id, q in self._queues.items():
            if gone:
                q[:] = [e for e in q if e.delivery.entry_id not in gone]
            self._taken.get(sub_id, set()).difference_update(settled)
        for d, reason, error in announced:  # "committed": now the observers may hear of them
            sub = self._subs.get(d.sub_id)
            if sub is not None:
                self.observers.emit('after_dead_letter', sub, d, reason, error)

    # Running loops

    def loop(self, sub: SubInfo, deliver: Deliver | None = None, *, deliver_batch: DeliverBatch | None = None,
             observers: Observers | None = None) -> DeliveryLoop:
        """A ``DeliveryLoop`` of sub over this backend (its observers are the backend's by default)."""
        self._subs[sub.id] = sub
        return DeliveryLoop(sub, self, deliver, lambda: True, observers or self.observers,
                            deliver_batch=deliver_batch)

    def drain(self, loops: DeliveryLoop | Iterable[DeliveryLoop], timeout: float = 5.0,
              fail_fast: bool = False) -> None:
        """Run the loops until every one of their queues is empty; the loops are stopped again after.

        Retries wait on the backend's clock, which is advanced as soon as nothing else is left to
        do. With fail_fast, a message dead-lettered meanwhile raises ``DeliveryFailed``; past
        timeout (real seconds), AssertionError says what is still queued.
        """
        loops = [loops] if isinstance(loops, DeliveryLoop) else list(loops)
        for lp in loops:
            self._subs.setdefault(lp.sub.id, lp.sub)
        self._new_dead.clear()
        spawner = Spawner()
        greenlets = [spawner.spawn(lp.run, name=f'drain:{lp.sub.label}') for lp in loops]
        deadline = time.monotonic() + timeout
        try:
            while True:
                gevent.sleep(DRAIN_POLL_SECS)
                for g in greenlets:
                    if g.dead:
                        g.get()  # the loop itself crashed: its error is the test's
                if fail_fast and self._new_dead:
                    dead = self._new_dead[0]
                    raise DeliveryFailed(self._subs.get(dead['sub_id']), dead)
                busy = [lp for lp in loops if self._queues.get(lp.sub.id) or lp.ram_depth]
                if not busy:
                    return
                if time.monotonic() > deadline:
                    depths = ', '.join(f'{lp.sub.label}: {len(self._queues.get(lp.sub.id, []))} stored, '
                                       f'{lp.ram_depth} in memory' for lp in busy)
                    raise AssertionError(f'queues not drained within {timeout:g} s ({depths})')
                if any(self._taken.get(lp.sub.id) for lp in busy):
                    continue  # a batch is being delivered
                self._skip_to_next_due(busy)
                for lp in busy:
                    lp.wake()
        finally:
            spawner.stop()

    def _skip_to_next_due(self, loops: list[DeliveryLoop]) -> None:
        """When no loop has a stored message it may take now, move the clock to the first one it may take."""
        now, firsts = self.now(), []
        for lp in loops:
            entries = self._ordered(lp.sub.id)
            if not entries:
                continue
            # In strict order only the head counts: what is behind it waits for it.
            due = entries[0].delivery.next_attempt_at if lp.sub.options.err_should_block \
                else min(e.delivery.next_attempt_at for e in entries)
            if due <= now:
                return
            firsts.append(due)
        if firsts:
            self.advance(min(firsts) - now)
