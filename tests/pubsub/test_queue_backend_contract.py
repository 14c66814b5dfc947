"""The ``QueueBackend`` contract: the same cases over ``SqlQueueBackend`` and ``MemoryQueueBackend``.

The delivery loop (``runtime.pubsub.delivery``) stores nothing itself: it trusts its backend to
take the head of a queue — high priority first, then publication order, at most ``limit`` entries —
counting one attempt per entry taken and answering each as it was before that count; to settle a
batch (acks, retries due at a later time, dead letters, attempts taken back) before the next take
in the same cycle, or on its own; to hand over a cycle as work for someone else's transaction,
which may not dead-letter; to announce each dead letter it stores once; and to either ack early in
a shared commit (``ack_soon`` answering True) or decline, leaving the ack to the next cycle. The
loop itself skips what expired, so that an expired message is never delivered whatever the
backend. Every case is asserted identically over the in-memory twin and the SQL backend on SQLite
and PostgreSQL, so that tests run on the twin prove what the server does. (The twin always declines to ack
early, which the protocol allows: its loops store every ack with the next cycle.)

Each backend is reached through a small adapter (``_Queue``) with the same methods; a case uses
nothing else. The SQL one is built as the broker builds its own, over a started ``TestRuntime``'s
engine, dead-letterer and group committer, and is fed through the runtime's catalog and broker; the
subscription is a pull one, so that no loop of the runtime's takes its messages meanwhile. One
runtime serves a database's cases, each on a topic and a subscription of its own (``module_db_url``,
as the suite's shared servers do), since starting one costs more than the cases together. Time
passes on the twin's clock (``advance``) and, as SQL has no clock of its own, by a short real wait.

This is a unit test by what it proves (a protocol) though half of it runs on a database: it sits
beside ``test_delivery_loop.py``, which runs the loop over the twin only.
"""

from __future__ import annotations

import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator
from typing import Any

import gevent
import pytest

from runtime.db.blocking import run_transaction
from runtime.pubsub import statements
from runtime.pubsub.delivery import CycleWork, DeliveryLoop, QueueBackend
from runtime.pubsub.observers import Observers, PubSubObserver
from runtime.pubsub.queue_backend import SqlQueueBackend
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.statements import Delivery, Settlement
from runtime.testing import TestRuntime, make_settings, wait_until
from runtime.testing.memory import MemoryQueueBackend
from tests.conftest import BACKENDS

#: The parameter of module_db_backend that runs a case on the in-memory twin, with no database.
MEMORY = 'memory'

#: The twin's topic, and on SQL the prefix of each case's own.
TOPIC = 'contract.orders'

#: How far ahead a retry is scheduled: long enough that no take right after sees it due, short for SQL's real wait.
RETRY_DELAY_SECS = 0.3

#: Longest a case waits for something done in the background (an early ack, a loop draining its queue).
TIMEOUT_SECS = 5.0

#: The keys of a dead letter both backends answer (the twin adds sub_id).
DEAD_LETTER_KEYS = ('id', 'delivery_count', 'last_error', 'last_traceback', 'reason', 'dead_at', 'msg_id', 'data',
                    'mime_type')


class _Announced(PubSubObserver):
    """Records every dead letter announced to the observers."""

    def __init__(self) -> None:
        self.dead: list[tuple[str, str]] = []

    def after_dead_letter(self, sub: SubInfo, delivery: Delivery, reason: str, error: str) -> None:
        self.dead.append((delivery.msg_id, reason))


class _Queue(ABC):
    """One subscription's queue on a backend under test, with what a case needs to fill and read it."""

    backend: QueueBackend
    sub: SubInfo
    announced: _Announced

    @abstractmethod
    def publish(self, data: Any, priority: int = 5, expiration: float | None = None) -> str:
        """Queue one message for the subscription, as a publication does; its msg_id."""

    @abstractmethod
    def entries(self) -> list[Delivery]:
        """What waits in the queue, in delivery order, read without counting an attempt."""

    @abstractmethod
    def dead_letters(self) -> list[dict[str, Any]]:
        """The subscription's dead letters, oldest first."""

    @abstractmethod
    def run(self, work: CycleWork) -> tuple[list[Delivery], float | None]:
        """Run a cycle handed over by cycle_work in a transaction of the caller's."""

    @abstractmethod
    def let_pass(self, secs: float) -> None:
        """Let secs go by on the clock the backend compares due and expiration times with."""

    def take(self, limit: int = 10, settlement: Settlement | None = None,
             due_before: float | None = None) -> tuple[list[Delivery], float | None]:
        """One cycle of the backend: settle, then take and count the head."""
        return self.backend.cycle(self.sub.id, settlement, limit, due_before)

    def taken(self, limit: int = 10, settlement: Settlement | None = None,
              due_before: float | None = None) -> list[Delivery]:
        """The batch of one cycle, without its due time."""
        return self.take(limit, settlement, due_before)[0]


class _MemoryQueue(_Queue):
    """The in-memory twin: its own queue and dead letters, and a clock it may advance."""

    def __init__(self) -> None:
        self.announced = _Announced()
        self.memory = MemoryQueueBackend(observers=Observers([self.announced]))
        self.backend = self.memory
        self.sub = SubInfo(1, 'sk.contract', TOPIC, 'pull')

    def publish(self, data: Any, priority: int = 5, expiration: float | None = None) -> str:
        return self.memory.put(self.sub, data, priority=priority, expiration=expiration).msg_id

    def entries(self) -> list[Delivery]:
        return self.memory.queue(self.sub.id)

    def dead_letters(self) -> list[dict[str, Any]]:
        return self.memory.dead_letters(self.sub.id)

    def run(self, work: CycleWork) -> tuple[list[Delivery], float | None]:
        return work(None)  # no transaction in memory: the work ignores its connection

    def let_pass(self, secs: float) -> None:
        self.memory.advance(secs)


class _SqlQueue(_Queue):
    """SqlQueueBackend as the broker builds it, on a started runtime's database, over its group committer."""

    def __init__(self, rt: TestRuntime) -> None:
        self.rt = rt
        self.announced = _Announced()
        committer = rt.broker.committer
        assert committer is not None, 'the runtime is started'
        # Its own instance, wired as the broker's: cycles share the publications' commits, acks can ride early.
        self.backend = SqlQueueBackend(rt.engine, rt.broker.dead_letterer, writer=committer.run,
                                       nudge=committer.nudge)
        # The runtime serves every case of the module: each has a topic and a subscription of its own.
        self.topic = f'{TOPIC}.{uuid.uuid4().hex[:12]}'
        rt.catalog.create_topic(self.topic)
        # A pull subscription: no delivery loop of the runtime's competes with the case for its queue.
        self.sub = rt.catalog.subscribe(self.topic, 'pull', security='')

    def publish(self, data: Any, priority: int = 5, expiration: float | None = None) -> str:
        return str(self.rt.broker.publish(self.topic, data, priority=priority, expiration=expiration))

    def entries(self) -> list[Delivery]:
        # fetch_batch without a due time reads the whole head and counts nothing: a limit above any case's queue.
        return run_transaction(self.rt.engine, lambda c: statements.fetch_batch(c, self.sub.id, 1000), write=False)

    def dead_letters(self) -> list[dict[str, Any]]:
        return self.rt.catalog.dead_letters(self.sub.sub_key)

    def run(self, work: CycleWork) -> tuple[list[Delivery], float | None]:
        return run_transaction(self.rt.engine, work)

    def let_pass(self, secs: float) -> None:
        gevent.sleep(secs)  # stored times are the wall clock's: only real time moves them


@pytest.fixture(scope='module', params=[MEMORY, *BACKENDS])
def module_db_backend(request: pytest.FixtureRequest) -> str:
    """The in-memory twin, or the database SqlQueueBackend runs on (overrides the suite's, which has no twin)."""
    return request.param


@pytest.fixture(scope='module')
def sql_runtime(module_db_backend: str, request: pytest.FixtureRequest,
                tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestRuntime | None]:
    """One started runtime per database, shared by the module's cases (a start costs most); None for the twin."""
    if module_db_backend == MEMORY:
        yield None
        return
    db_url = request.getfixturevalue('module_db_url')  # only here: the twin needs no database
    settings = make_settings(tmp_path_factory.mktemp('contract-rt'), db_url)
    # The sweeper dead-letters expired entries of pull queues; a case decides itself what expires and when.
    settings.pubsub.sweep_interval_secs = 3600.0
    rt = TestRuntime(settings)
    rt.start(watch=False)
    yield rt
    rt.stop()


@pytest.fixture
def queue(sql_runtime: TestRuntime | None) -> Iterator[_Queue]:
    """A subscription's empty queue on the backend of this parameter."""
    if sql_runtime is None:
        yield _MemoryQueue()
        return
    made = _SqlQueue(sql_runtime)
    sql_runtime.broker.observers.add(made.announced)
    yield made
    sql_runtime.broker.observers.remove(made.announced)


def _payloads(batch: list[Delivery]) -> list[Any]:
    """The data of each entry of a batch, in its order."""
    return [d.payload() for d in batch]


# Taking


def test_an_empty_queue_answers_an_empty_batch_and_no_due_time(queue: _Queue) -> None:
    assert queue.take() == ([], None)
    assert queue.take(due_before=time.time()) == ([], None)


def test_a_take_answers_the_head_by_priority_then_publication_up_to_the_limit(queue: _Queue) -> None:
    for data, priority in (('a', 5), ('b', 9), ('c', 1), ('d', 9), ('e', 5)):
        queue.publish(data, priority=priority)
    head = queue.taken(limit=3)
    assert _payloads(head) == ['b', 'd', 'a']
    assert [d.priority for d in head] == [9, 9, 5]
    assert _payloads(queue.entries()) == ['b', 'd', 'a', 'e', 'c'], 'a take removes nothing from the queue'
    rest = queue.taken(limit=3, settlement=Settlement([d.entry_id for d in head], [], [], []))
    assert _payloads(rest) == ['e', 'c']


def test_each_take_counts_one_attempt_and_answers_the_count_from_before_it(queue: _Queue) -> None:
    queue.publish('a')
    assert [d.delivery_count for d in queue.taken()] == [0]
    assert [d.delivery_count for d in queue.taken()] == [1]
    assert [d.delivery_count for d in queue.entries()] == [2]


# Settling


def test_an_acked_message_is_never_taken_again(queue: _Queue) -> None:
    for data in ('a', 'b', 'c'):
        queue.publish(data)
    a, b, c = queue.taken()
    # Acked with the next take (the loop going on), then on its own (the loop about to wait).
    assert _payloads(queue.taken(settlement=Settlement([a.entry_id], [], [], []))) == ['b', 'c']
    queue.backend.settle(Settlement([b.entry_id], [], [], []))
    assert _payloads(queue.taken()) == ['c']
    queue.backend.settle(Settlement([c.entry_id], [], [], []))
    assert queue.take() == ([], None)
    assert queue.entries() == [] and queue.dead_letters() == []


def test_a_retry_is_not_taken_before_its_time_and_is_taken_after_it(queue: _Queue) -> None:
    queue.publish('a')
    queue.publish('b')
    a, b = queue.taken()
    at = time.time() + RETRY_DELAY_SECS
    retry = Settlement([b.entry_id], [(a, at, 'ValueError: cannot take a')], [], [])
    batch, due = queue.take(settlement=retry, due_before=time.time())
    assert batch == [], 'taken before its time'
    assert due == pytest.approx(at, abs=0.05), 'an empty take says when the queue is due next'
    # In strict order (err_should_block) the loop takes the head whether due or not, and waits for its time.
    (head,), _ = queue.take()
    assert head.payload() == 'a' and head.next_attempt_at == pytest.approx(at, abs=0.05)
    assert head.next_attempt_at > time.time()
    assert head.last_error == 'ValueError: cannot take a'
    queue.let_pass(RETRY_DELAY_SECS + 0.1)
    (again,), _ = queue.take(due_before=time.time())
    assert again.entry_id == a.entry_id and again.msg_id == a.msg_id
    assert again.next_attempt_at <= time.time()
    assert again.delivery_count == 2, 'the take in strict order counted an attempt too'


def test_an_attempt_taken_back_is_uncounted(queue: _Queue) -> None:
    queue.publish('a')
    queue.taken()
    (a,) = queue.taken()
    assert a.delivery_count == 1
    # Taken back with the next take (which counts its own attempt), then on its own.
    (again,) = queue.taken(settlement=Settlement([], [], [], [a.entry_id]))
    assert again.delivery_count == 1
    assert [d.delivery_count for d in queue.entries()] == [2]
    queue.backend.settle(Settlement([], [], [], [a.entry_id]))
    assert [d.delivery_count for d in queue.entries()] == [1]


def test_a_dead_lettered_message_leaves_the_queue_for_the_dead_letters_announced_once(queue: _Queue) -> None:
    first = queue.publish({'n': 1})
    second = queue.publish({'n': 2})
    third = queue.publish({'n': 3})
    one, two, _ = queue.taken()
    for d in (one, two):
        d.delivery_count += 1  # as the loop counts the attempt it makes before deciding
    # One dead-lettered on its own (as the loop stores dead letters at once), one with the next take.
    queue.backend.settle(Settlement([], [], [(one, 'max_attempts', 'ValueError: cannot take 1')], []))
    assert _payloads(queue.taken(settlement=Settlement([], [], [(two, 'expired', 'too late')], []))) == [{'n': 3}]
    assert [d.msg_id for d in queue.entries()] == [third]
    letters = queue.dead_letters()
    assert [{k: letter[k] for k in ('msg_id', 'reason', 'last_error', 'delivery_count')} for letter in letters] == [
        {'msg_id': first, 'reason': 'max_attempts', 'last_error': 'ValueError: cannot take 1', 'delivery_count': 1},
        {'msg_id': second, 'reason': 'expired', 'last_error': 'too late', 'delivery_count': 1}]
    assert [letter['data'] for letter in letters] == [one.data, two.data]
    assert all(set(DEAD_LETTER_KEYS) <= set(letter) for letter in letters)
    assert queue.announced.dead == [(first, 'max_attempts'), (second, 'expired')]


def test_a_dead_letter_keeps_the_traceback_stored_with_the_last_failed_attempt(queue: _Queue) -> None:
    queue.publish('a')
    (a,) = queue.taken()
    a.last_traceback = 'Traceback (most recent call last):\nValueError: cannot take a\n'
    queue.backend.settle(Settlement([], [(a, time.time() + 60.0, 'ValueError: cannot take a')], [], []))
    # Taken again with no traceback of its own (a take does not read it), then expired while waiting.
    (waiting,) = queue.taken()
    assert waiting.last_error == 'ValueError: cannot take a' and waiting.last_traceback == ''
    queue.backend.settle(Settlement([], [], [(waiting, 'expired', waiting.last_error)], []))
    (letter,) = queue.dead_letters()
    assert (letter['reason'], letter['last_traceback']) == ('expired', a.last_traceback)


# Cycles run elsewhere, early acks


def test_a_cycle_handed_over_does_its_work_where_it_is_run_and_may_not_dead_letter(queue: _Queue) -> None:
    queue.publish('a')
    queue.publish('b')
    a, _ = queue.taken()
    with pytest.raises(ValueError, match='cannot dead-letter'):
        queue.backend.cycle_work(queue.sub.id, Settlement([], [], [(a, 'max_attempts', 'boom')], []), 10, None)
    work = queue.backend.cycle_work(queue.sub.id, Settlement([a.entry_id], [], [], []), 10, None)
    assert _payloads(queue.entries()) == ['a', 'b'], 'nothing is done before the work runs'
    (b,), due = queue.run(work)
    assert b.payload() == 'b' and b.delivery_count == 1 and due is None
    assert [d.delivery_count for d in queue.entries()] == [2]


def test_ack_soon_either_writes_the_ack_in_a_shared_commit_or_takes_nothing(queue: _Queue) -> None:
    queue.publish('a')
    queue.publish('b')
    a, _ = queue.taken()
    handed: list[int] = [a.entry_id]
    written: list[tuple[list[int], BaseException | None]] = []

    def take() -> list[int]:
        ids, handed[:] = list(handed), []
        return ids

    if queue.backend.ack_soon(take, lambda ids, error: written.append((ids, error))):
        # Riding in a shared commit: reported written once durable, with nothing left for the cycle.
        wait_until(lambda: written, TIMEOUT_SECS, message='the early ack written')
        assert written == [([a.entry_id], None)] and handed == []
        settlement = None
    else:
        # Declined (no shared commit to ride in): nothing was taken, and the loop acks with its next cycle.
        assert written == [] and handed == [a.entry_id]
        settlement = Settlement(handed, [], [], [])
    assert _payloads(queue.taken(settlement=settlement)) == ['b']


def test_an_expired_message_is_never_delivered_and_counts_no_attempt(queue: _Queue) -> None:
    late = queue.publish('late', expiration=0.1)
    queue.publish('live')
    queue.let_pass(0.2)
    (stale, _), _ = queue.take()
    assert stale.expiration_time <= time.time(), 'a take answers expiry on the clock the loop reads'
    queue.backend.settle(Settlement([], [], [], [stale.entry_id]))
    delivered: list[Any] = []

    def deliver(sub: SubInfo, d: Delivery) -> None:
        delivered.append(d.payload())

    loop = DeliveryLoop(queue.sub, queue.backend, deliver, lambda: True)
    g = gevent.spawn(loop.run)
    try:
        wait_until(lambda: not queue.entries(), TIMEOUT_SECS, message='the queue drained by a delivery loop')
    finally:
        g.kill()
    assert delivered == ['live']
    (letter,) = queue.dead_letters()
    assert (letter['msg_id'], letter['reason'], letter['delivery_count']) == (late, 'expired', 0)
    assert queue.announced.dead == [(late, 'expired')]
