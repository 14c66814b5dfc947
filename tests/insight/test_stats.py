"""Rate and service statistics (insight.stats) and the worker registry (cluster.workers) against real databases:
what one worker counted reaches its rows, flushes add up, old rows go, readers sum over workers.
"""

from __future__ import annotations

import json
import os

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import OperationalError

from runtime.cluster.workers import WorkerIdentity, WorkerRegistry, list_workers
from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.db.models import Lease, RateStat, ServiceStat, WorkerRow
from runtime.insight.overview import Insight
from runtime.insight.stats import BUCKET_SECS, StatsFlusher, bucket_of, merge_histograms, percentile, read_histogram
from runtime.observability.metrics import LATENCY_BUCKETS_SECS


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def engine(db_url):
    made = make_engine(db_url)
    upgrade(made)
    yield made
    made.dispose()


def _deliveries(flusher: StatsFlusher, ok: int, failed: int) -> None:
    for _ in range(ok):
        flusher.after_deliver(None, None, True, None, 0.0)
    for _ in range(failed):
        flusher.after_deliver(None, None, False, ValueError(), 0.0)


def test_percentile_interpolates_inside_the_bucket() -> None:
    bounds = (0.1, 0.2, 0.4)
    assert percentile([], 0.99, bounds) is None
    assert percentile([0, 0, 0, 0], 0.5, bounds) is None
    # 100 values, all in (0.1, 0.2]: the median is half-way through that bucket.
    assert percentile([0, 100, 0, 0], 0.5, bounds) == pytest.approx(0.15)
    # 99 fast and 1 slow: p99 is still at the top of the fast bucket, p100 in the slow one.
    assert percentile([99, 0, 1, 0], 0.99, bounds) == pytest.approx(0.1)
    assert percentile([99, 0, 1, 0], 1.0, bounds) == pytest.approx(0.4)
    # Above every bound: the largest bound is the most that can be said.
    assert percentile([1, 0, 0, 9], 0.99, bounds) == 0.4


def test_histograms_merge_and_read_defensively() -> None:
    assert merge_histograms([1, 2], [3, 4, 5]) == [4, 6, 5]
    assert read_histogram('not json') == [] and read_histogram('{"a": 1}') == []
    assert read_histogram('[1, -2, "x", true, 3]') == [1, 0, 0, 0, 3]


def test_flusher_counts_flushes_and_adds_to_its_rows(engine) -> None:
    clock = Clock(1_000_005.0)
    flusher = StatsFlusher(engine, lambda: 'w1', clock=clock)
    for _ in range(3):
        flusher.after_publish(None, False)
    _deliveries(flusher, ok=2, failed=1)
    flusher.after_dead_letter(None, None, 'max_attempts', 'boom')
    flusher.service_ran('svc.a', 0.003, True)
    flusher.service_ran('svc.a', 0.2, False)
    flusher.flush()
    assert flusher.rates == {} and flusher.services == {}

    # The same bucket again: the row is added to, not replaced.
    flusher.after_publish(None, False)
    flusher.service_ran('svc.a', 0.003, True)
    flusher.flush()
    with engine.connect() as conn:
        rate = conn.execute(select(RateStat)).one()
        stat = conn.execute(select(ServiceStat)).one()
    assert (rate.worker, rate.bucket) == ('w1', bucket_of(clock.now))
    assert (rate.published, rate.delivered, rate.failed, rate.dead_lettered) == (4, 2, 1, 1)
    assert (stat.service, stat.invocations, stat.errors) == ('svc.a', 3, 1)
    assert stat.total_secs == pytest.approx(0.206)
    histogram = json.loads(stat.histogram)
    assert len(histogram) == len(LATENCY_BUCKETS_SECS) + 1 and sum(histogram) == 3
    assert histogram[LATENCY_BUCKETS_SECS.index(0.005)] == 2 and histogram[LATENCY_BUCKETS_SECS.index(0.25)] == 1


def test_old_rows_are_deleted_and_readers_sum_over_workers(engine) -> None:
    clock = Clock(2_000_000.0)
    one = StatsFlusher(engine, lambda: 'w1', retention_secs=60, clock=clock)
    two = StatsFlusher(engine, lambda: 'w2', retention_secs=60, clock=clock)
    one.after_publish(None, False)
    one.flush()
    clock.now += 120  # the first bucket is now past retention
    for flusher in (one, two):
        flusher.after_publish(None, False)
        _deliveries(flusher, ok=1, failed=0)
        for _ in range(99):
            flusher.service_ran('svc.b', 0.001, True)
        flusher.service_ran('svc.b', 2.0, False)
    one.flush()
    two.flush()
    with engine.connect() as conn:
        assert {r.bucket for r in conn.execute(select(RateStat.bucket)).all()} == {bucket_of(clock.now)}

    insight = Insight(engine, lambda: ['svc.b', 'svc.c', 'other'], retention_secs=60, clock=clock)
    answer = insight.rates()
    assert answer['bucket_secs'] == BUCKET_SECS and answer['until'] == bucket_of(clock.now)
    last = answer['buckets'][-1]
    assert (last['published'], last['delivered'], last['published_per_sec']) == (2, 2, 2 / BUCKET_SECS)
    assert all(b['published'] == 0 for b in answer['buckets'][:-1])
    total, services = insight.services(search='SVC', limit=10, offset=0)
    assert total == 2 and [s['name'] for s in services] == ['svc.b', 'svc.c']
    b = services[0]
    assert (b['invocations'], b['errors']) == (200, 2)
    assert b['mean_secs'] == pytest.approx((198 * 0.001 + 4.0) / 200)
    assert b['p99_secs'] == pytest.approx(0.001)  # 198 of 200 are fast
    assert services[1]['invocations'] == 0 and services[1]['p99_secs'] is None
    assert insight.services(search='svc', limit=1, offset=1)[1][0]['name'] == 'svc.c'


def test_a_failed_flush_keeps_the_counts(engine) -> None:
    flusher = StatsFlusher(engine, lambda: 'x' * 500, clock=Clock(3_000_000.0))
    flusher.after_publish(None, False)
    flusher.service_ran('svc', 0.01, True)
    broken = StatsFlusher(make_engine('sqlite:////nonexistent/dir/db.sqlite'), lambda: 'w', clock=Clock(1.0))
    broken.after_publish(None, False)
    broken.service_ran('svc', 0.01, False)
    with pytest.raises(OperationalError):
        broken.flush()
    assert sum(sum(c) for c in broken.rates.values()) == 1
    assert [c.invocations for c in broken.services.values()] == [1]
    broken.flush_quietly()  # logged, not raised
    StatsFlusher(make_engine('sqlite:////nonexistent/db'), lambda: 'w').flush_quietly()  # nothing to write: no-op
    flusher.flush()  # a worker id longer than the column is cut, not refused
    with engine.connect() as conn:
        assert conn.execute(select(RateStat.worker)).scalar() == 'x' * 200


def test_worker_registry_heartbeat_stale_purge_and_leases(engine) -> None:
    me = WorkerRegistry(engine, WorkerIdentity('host:1:aa', 'host:0', 'host', 1, '127.0.0.1:1'), interval_secs=5,
                        purge_after_secs=600)
    me.beat(now=1000.0)
    me.beat(now=1004.0)
    with engine.begin() as conn:
        conn.execute(insert(WorkerRow).values(id='gone:2:bb', server='gone:0', host='gone', pid=2, bind='',
                                              started_at=1.0, heartbeat_at=980.0))
        conn.execute(insert(Lease).values(name='sub:1', owner='host:1:aa', expires_at=2000.0))
        conn.execute(insert(Lease).values(name='sub:2', owner='host:1:aa', expires_at=2000.0))
    with engine.connect() as conn:
        workers = {w['id']: w for w in list_workers(conn, now=1005.0, interval_secs=5)}
    assert workers['host:1:aa']['heartbeat_age_secs'] == 1.0 and not workers['host:1:aa']['stale']
    assert workers['host:1:aa']['leases'] == 2 and workers['host:1:aa']['lease_names'] == ['sub:1', 'sub:2']
    assert workers['gone:2:bb']['stale'] and workers['gone:2:bb']['leases'] == 0
    me.beat(now=1700.0)  # the dead worker's row is past purge_after_secs
    with engine.connect() as conn:
        assert [r.id for r in conn.execute(select(WorkerRow.id)).all()] == ['host:1:aa']
    me.stop()
    with engine.connect() as conn:
        assert conn.execute(select(WorkerRow.id)).all() == []


def test_identity_of_this_process_groups_workers_by_parent() -> None:
    identity = WorkerIdentity.this_process('h:1:x' * 100, 'b')
    assert len(identity.id) == 200 and identity.server == f'{identity.host}:{os.getppid()}'
    assert identity.pid == os.getpid() and identity.bind == 'b'
