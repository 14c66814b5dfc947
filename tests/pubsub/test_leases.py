"""Leases: take, renew, lose and expire; versions as fencing tokens; fair shares among live workers.

Every test runs on SQLite and PostgreSQL (the ``db_url`` fixture). Two ``LeaseManager`` objects on
one database stand for two workers; the runtime tests deliver through a real broker.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.exc import DBAPIError

from runtime.db.blocking import run_transaction
from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.db.models import DeadLetter, Lease, QueueEntry
from runtime.errors import LeaseLost
from runtime.pubsub.broker import lease_name
from runtime.pubsub.leases import (
    PRESENCE_PREFIX,
    Fence,
    LeaseManager,
    Shares,
    check_fence,
    excess,
    fair_share,
    shares,
)
from runtime.pubsub.queue_backend import FencedQueue
from runtime.pubsub.statements import Settlement
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.recorder import Recorder

TIMEOUT = 30.0  # how long a condition may take under load; met conditions return at once


def manager(engine: Engine, ttl: float = 60.0, renew: float = 60.0) -> LeaseManager:
    return LeaseManager(engine, ttl, renew)


def lease_row(engine: Engine, name: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(select(Lease.owner, Lease.expires_at, Lease.version).where(Lease.name == name)).first()


def expire(engine: Engine, name: str) -> None:
    """Make a lease look as if its holder stopped renewing it long ago."""
    run_transaction(engine, lambda c: c.execute(update(Lease).where(Lease.name == name).values(expires_at=1.0)))


def names(prefix: str, count: int) -> set[str]:
    return {f'{prefix}{i:02d}' for i in range(count)}


# Take, renew, lose, expire


def test_a_free_lease_is_taken_once_and_renewed_without_a_new_version(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    assert a.refresh({'x'}) == ({'x'}, set())
    assert a.owns('x')
    first = lease_row(engine, 'x')
    assert first.owner == a.owner and first.version > 0
    assert b.refresh({'x'}) == (set(), set())  # held: b waits
    assert not b.owns('x')
    gevent.sleep(0.01)
    assert a.refresh({'x'}) == (set(), set())  # renewed
    renewed = lease_row(engine, 'x')
    assert renewed.expires_at > first.expires_at and renewed.version == first.version
    assert a.fence('x') == Fence('x', a.owner, first.version)
    assert b.fence('x') is None


def test_an_expired_lease_is_taken_over_with_the_next_version_and_the_old_holder_loses_it(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    a.refresh({'x'})
    taken_at = lease_row(engine, 'x').version
    expire(engine, 'x')
    assert b.refresh({'x'}) == ({'x'}, set())
    assert lease_row(engine, 'x')[::2] == (b.owner, taken_at + 1)
    assert b.fence('x') == Fence('x', b.owner, taken_at + 1)
    assert a.refresh({'x'}) == (set(), {'x'})
    assert not a.owns('x') and a.fence('x') is None


def test_a_lease_released_and_taken_again_never_reuses_a_version(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    a.refresh({'x'})
    first = lease_row(engine, 'x').version
    a.release('x')
    assert lease_row(engine, 'x') is None
    gevent.sleep(0.005)
    b.refresh({'x'})
    assert lease_row(engine, 'x').version > first


def test_an_unwanted_lease_is_handed_back_and_release_all_removes_the_presence_too(engine: Engine) -> None:
    a = manager(engine)
    a.refresh({'x', 'y'})
    assert lease_row(engine, a.presence).owner == a.owner
    assert a.refresh({'y'}) == (set(), {'x'})
    assert lease_row(engine, 'x') is None
    a.release_all()
    assert lease_row(engine, 'y') is None and lease_row(engine, a.presence) is None
    assert not a.owns('y')


def test_a_holder_cut_off_stops_trusting_its_lease_before_it_can_be_taken(engine: Engine) -> None:
    a = LeaseManager(engine, 0.2, 60.0)
    a.refresh({'x'})
    assert a.owns('x')
    gevent.sleep(0.2 * 0.8)  # past valid_until (TTL less the safety margin), before the lease expires
    assert not a.owns('x')


# Fencing


def test_check_fence_refuses_a_stale_holder_with_lease_lost(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    a.refresh({'x'})
    fence = a.fence('x')
    assert fence is not None
    run_transaction(engine, lambda c: check_fence(c, fence))  # still a's
    expire(engine, 'x')
    b.refresh({'x'})
    with pytest.raises(LeaseLost) as lost:
        run_transaction(engine, lambda c: check_fence(c, fence))
    assert lost.value.name == 'x' and lost.value.version == fence.version and lost.value.current is None
    assert 'lease x' in str(lost.value) and 'refused' in str(lost.value)
    # The same owner at an older version (a loop of an earlier take) is refused too.
    older = Fence('x', b.owner, b.versions['x'] - 1)
    with pytest.raises(LeaseLost):
        run_transaction(engine, lambda c: check_fence(c, older))


def test_postgresql_a_takeover_waits_for_a_settlement_that_passed_its_check(engine: Engine, db_backend: str) -> None:
    if db_backend != 'postgresql':
        pytest.skip('SQLite has one writer at a time: a settlement and a takeover cannot overlap')
    a, b = manager(engine), manager(engine)
    a.refresh({'x'})
    fence = a.fence('x')
    assert fence is not None
    expire(engine, 'x')
    with engine.connect() as conn, conn.begin():
        check_fence(conn, fence)  # a settles under the lease: the row is locked until it commits
        assert b.refresh({'x'}) == (set(), set())  # b skips it rather than take it under a's settlement
    assert b.refresh({'x'}) == ({'x'}, set())


@pytest.mark.parametrize('db_backend', ['postgresql'])  # SQLite: a stopped writer holds the whole database's lock
def test_postgresql_a_holder_stopped_inside_a_transaction_does_not_keep_its_leases(db_url: str) -> None:
    # A worker stopped (SIGSTOP, a frozen VM, a hung process) in the middle of its lease refresh keeps the
    # rows of its leases locked: the kernel keeps its connection alive, so without a limit on how long a
    # session may sit idle in a transaction no other worker could take them over (seen in CI: a worker
    # stopped under load kept its 15 leases until it was let go on).
    stopped = make_engine(db_url, pool_size=2, idle_in_transaction_secs=1.0)
    other = make_engine(db_url, pool_size=2)
    try:
        upgrade(stopped)
        a, b = manager(stopped, ttl=1.0), manager(other, ttl=1.0)
        a.refresh({'x'})
        with stopped.connect() as conn:
            conn.begin()
            # What a's refresh does first; then a stops, its transaction open.
            conn.execute(update(Lease).where(Lease.owner == a.owner).values(expires_at=time.time() + 1.0))
            wait_until(lambda: b.refresh({'x'})[0] == {'x'}, timeout=TIMEOUT, message='b holding the lease')
            assert lease_row(other, 'x').owner == b.owner
            with pytest.raises(DBAPIError) as ended:  # a, let go on, finds its session ended by the database
                conn.execute(select(Lease.name))
            assert ended.value.connection_invalidated
    finally:
        stopped.dispose()
        other.dispose()


# Fair shares


def test_fair_share_is_rounded_up_so_that_the_shares_cover_every_lease() -> None:
    assert fair_share(30, 2) == 15
    assert fair_share(31, 2) == 16
    assert fair_share(1, 2) == 1
    assert fair_share(0, 3) == 0
    assert fair_share(5, 0) == 5
    assert shares(30, 7, 3) == Shares(10, 3)


def test_excess_is_what_is_above_the_share_and_another_worker_has_room_for() -> None:
    busy = names('b', 10)
    idle = names('i', 20)
    share = shares(30, 10, 2)  # 15 in all, 5 busy
    # All ten busy ones here (with five idle): five go, to a worker holding none busy.
    assert excess(busy | set(sorted(idle)[:5]), [set(sorted(idle)[5:])], busy, share) == (5, 0)
    # At its share: nothing, even when the other holds less.
    assert excess(set(sorted(busy)[:5]) | set(sorted(idle)[:10]), [set()], busy, share) == (0, 0)
    # Above its share, but nobody has room (the other is full): nothing.
    assert excess(busy | idle, [set()], busy, Shares(15, 5)) == (5, 10)
    assert excess(busy | idle, [names('o', 15)], set(), Shares(15, 0)) == (0, 0)
    # Alone: nothing to give to.
    assert excess(busy | idle, [], busy, share) == (0, 0)


def test_a_worker_takes_at_most_its_share_while_another_is_alive(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    subs = names('s', 30)
    b.refresh(set())  # b announces itself
    a.refresh(subs, subs)
    assert len(a.held) == 15
    b.refresh(subs, subs)
    assert len(b.held) == 15 and not a.held & b.held
    for _ in range(3):  # balanced: nothing moves
        a.refresh(subs, subs)
        b.refresh(subs, subs)
        assert not a.to_shed and not b.to_shed and len(a.held) == len(b.held) == 15


def test_leases_above_the_share_are_given_back_after_two_refreshes_and_not_taken_back(engine: Engine) -> None:
    a, b = manager(engine, renew=0.05), manager(engine, renew=0.05)
    subs = names('s', 30)
    a.refresh(subs, subs)
    assert len(a.held) == 30  # alone: everything
    b.refresh(subs, subs)  # b arrives; all held by a
    assert not b.held
    a.refresh(subs, subs)
    assert not a.to_shed  # hysteresis: one refresh above the share moves nothing
    a.refresh(subs, subs)
    assert len(a.to_shed) == 15 and a.shedding == a.to_shed
    shed = set(a.to_shed)
    assert a.owns(next(iter(shed)))  # kept (and renewed) until its loop has settled
    for name in shed:
        a.release(name)
    a.refresh(subs, subs)
    assert not a.held & shed  # not taken back: left to b
    b.refresh(subs, subs)
    assert b.held == shed
    for _ in range(3):
        a.refresh(subs, subs)
        b.refresh(subs, subs)
        assert not a.to_shed and not b.to_shed and len(a.held) == len(b.held) == 15


def test_a_burst_to_the_subscriptions_of_one_worker_is_spread_by_the_busy_share(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    subs = names('s', 30)
    b.refresh(set())
    a.refresh(subs, subs)
    b.refresh(subs, subs)
    busy = set(sorted(a.held)[:10])  # a burst: ten subscriptions with work, all of them a's
    a.refresh(subs, subs, busy)
    b.refresh(subs, subs, busy)
    assert not a.to_shed
    a.refresh(subs, subs, busy)
    assert len(a.to_shed) == 5 and a.to_shed <= busy
    for name in a.to_shed:
        a.release(name)
    b.refresh(subs, subs, busy)
    assert len(b.held & busy) == 5  # busy ones first, beyond b's share of all
    # The totals even out again, the busy ones staying put.
    for _ in range(6):
        for m in (a, b):
            m.refresh(subs, subs, busy)
            for name in set(m.to_shed):
                m.release(name)
    assert len(a.held & busy) == len(b.held & busy) == 5
    assert len(a.held) == len(b.held) == 15


def test_three_workers_settle_on_their_shares_and_then_nothing_moves(engine: Engine) -> None:
    workers = [manager(engine) for _ in range(3)]
    subs = names('s', 40)
    busy = set(sorted(subs)[:10])
    workers[0].refresh(subs, subs, busy)  # alone at first: takes everything
    moved = []
    for _ in range(8):
        moved = []
        for m in workers:
            m.refresh(subs, subs, busy)
            moved += m.to_shed
            for name in set(m.to_shed):
                m.release(name)
    assert not moved, 'leases still moving after eight rounds'
    share = shares(len(subs), len(busy), 3)
    assert all(len(m.held) <= share.all for m in workers)  # 14: none above its share, so none gives any back
    assert all(len(m.held & busy) <= share.busy for m in workers)
    assert set().union(*(m.held for m in workers)) == subs
    for _ in range(3):
        for m in workers:
            m.refresh(subs, subs, busy)
            assert not m.to_shed


def test_a_passing_burst_moves_nothing(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    subs = names('s', 30)
    b.refresh(set())
    a.refresh(subs, subs)
    b.refresh(subs, subs)
    busy = set(sorted(a.held)[:10])
    a.refresh(subs, subs, busy)  # above its busy share once...
    a.refresh(subs, subs, set())  # ...and the burst is over: the count starts again
    a.refresh(subs, subs, busy)
    assert not a.to_shed and not a.shedding


def test_a_lease_nobody_takes_is_taken_beyond_the_share(engine: Engine) -> None:
    a, b = manager(engine, renew=0.05), manager(engine)
    subs = names('s', 4)
    b.refresh(set())  # alive, but wants none of them (its registry has not seen them yet, say)
    a.refresh(subs, subs)
    assert len(a.held) == 2
    gevent.sleep(2 * 0.05)
    a.refresh(subs, subs)
    assert a.held == subs


def test_leases_not_spread_are_taken_whatever_the_shares(engine: Engine) -> None:
    a, b = manager(engine), manager(engine)
    subs = names('s', 4)
    b.refresh(set())
    a.refresh(subs | {'ws'}, subs)
    assert 'ws' in a.held and len(a.held & subs) == 2


def test_workers_are_counted_by_their_presence_and_a_dead_one_stops_counting(engine: Engine) -> None:
    a, b, c = manager(engine), manager(engine), manager(engine)
    for m in (b, c):
        m.refresh(set())
    a.refresh(set())
    assert a.workers == 3
    expire(engine, PRESENCE_PREFIX + c.owner)
    a.refresh(set())
    assert a.workers == 2
    assert a.presence not in a.held  # never reported as a lease of its own


# Fencing of delivery: a stale holder stores nothing


class Gate(Service):
    """Records each message, then waits until the test opens the gate."""

    name = 'ps.lease.gate'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('started', self.request.payload)
        while not self.recorder['open']:
            gevent.sleep(0.01)
        self.recorder.add('done', self.request.payload)


@pytest.fixture
def rt(db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime], recorder: Recorder) -> TestRuntime:
    settings = make_settings(tmp_path / 'rt', db_url)
    (tmp_path / 'rt').mkdir()
    settings.pubsub.lease_renew_secs = 60.0  # refreshes only when kicked: the test decides
    settings.pubsub.poll_interval_secs = 0.02
    return runtime_factory(*recorder.bind_all([Gate]), settings=settings)


def queued(rt: TestRuntime, sub_id: int) -> int:
    with rt.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(QueueEntry).where(QueueEntry.sub_id == sub_id)
                            ).scalar_one()


def test_a_loop_whose_lease_was_taken_meanwhile_acks_nothing_and_stops(rt: TestRuntime, recorder: Recorder) -> None:
    rt.catalog.create_topic('ps.fenced')
    sub = rt.catalog.subscribe('ps.fenced', 'service', service='ps.lease.gate')
    rt.broker.want_delivery()
    wait_until(lambda: rt.broker.delivering(sub.id), TIMEOUT, message='the delivery loop')
    rt.broker.publish('ps.fenced', {'n': 1})
    recorder.wait_for('started', 1, TIMEOUT)
    # Another worker takes the lease while the handler runs (this worker was cut off, say).
    name = lease_name(sub.id)
    version = lease_row(rt.engine, name).version
    run_transaction(rt.engine, lambda c: c.execute(update(Lease).where(Lease.name == name).values(
        owner='another-worker', version=version + 1, expires_at=time.time() + 60)))
    recorder.add('open', True)
    recorder.wait_for('done', 1, TIMEOUT)
    wait_until(lambda: not rt.broker.delivering(sub.id), TIMEOUT, message='the loop stopping')
    assert queued(rt, sub.id) == 1, 'a loop that lost its lease acked its message'
    assert lease_row(rt.engine, name).owner == 'another-worker'


def test_a_stale_settlement_is_refused_whole(rt: TestRuntime) -> None:
    rt.catalog.create_topic('ps.stale')
    sub = rt.catalog.subscribe('ps.stale', 'service', service='ps.lease.gate')
    rt.catalog.set_active(sub.sub_key, False)
    rt.broker.publish('ps.stale', {'n': 1})
    rt.broker.publish('ps.stale', {'n': 2})
    backend = rt.broker._backend
    holder = manager(rt.engine)
    holder.refresh({'x'})
    fence = holder.fence('x')
    assert fence is not None
    queue = FencedQueue(backend, fence)
    [first, second], _ = queue.cycle(sub.id, None, 10, None)
    expire(rt.engine, 'x')
    manager(rt.engine).refresh({'x'})  # taken by another worker
    with pytest.raises(LeaseLost):
        queue.settle(Settlement([first.entry_id], [], [(second, 'max_attempts', 'boom')], []))
    with pytest.raises(LeaseLost):
        queue.cycle(sub.id, Settlement([first.entry_id], [], [], []), 10, None)
    with pytest.raises(LeaseLost):
        run_transaction(rt.engine, queue.cycle_work(sub.id, Settlement([first.entry_id], [], [], []), 10, None))
    assert queued(rt, sub.id) == 2
    with rt.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(DeadLetter)).scalar_one() == 0


# What the broker spreads, and which subscriptions it counts as busy


def test_only_kinds_any_worker_may_deliver_are_spread(rt: TestRuntime) -> None:
    assert rt.broker._spread_kinds == {'service', 'rest_push', 'file'}  # not WebSocket: its lease follows its client
    rt.catalog.create_topic('ps.spread')
    sub = rt.catalog.subscribe('ps.spread', 'service', service='ps.lease.gate')
    assert lease_name(sub.id) in rt.broker._spread_leases()
    rt.catalog.set_active(sub.sub_key, False)
    assert lease_name(sub.id) not in rt.broker._spread_leases()  # paused: not delivered, not counted


def test_busy_leases_are_those_of_subscriptions_with_messages_waiting(rt: TestRuntime) -> None:
    rt.catalog.create_topic('ps.busy')
    rt.catalog.create_topic('ps.idle')
    busy = rt.catalog.subscribe('ps.busy', 'service', service='ps.lease.gate')
    idle = rt.catalog.subscribe('ps.idle', 'service', service='ps.lease.gate')
    for sub in (busy, idle):
        rt.catalog.set_active(sub.sub_key, False)
    rt.broker.publish('ps.busy', {'n': 1})
    found = rt.broker._busy_leases()
    assert lease_name(busy.id) in found and lease_name(idle.id) not in found
