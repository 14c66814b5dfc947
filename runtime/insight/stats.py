"""Rate and service statistics: what each worker did, in 10-second buckets, kept for an hour in the database.

``StatsFlusher`` counts in RAM, per bucket, what this worker published, delivered, failed to
deliver and dead-lettered (it is a broker observer, like the metrics) and, per service, the
invocations, errors, total time and a latency histogram (``runtime.observability.metrics``' bucket bounds; the
invoker reports every run to it). Every ``flush_interval_secs`` it adds what it counted to its own
rows of ``conduit_stats_rate`` and ``conduit_stats_service`` (key: worker, bucket[, service]) and
deletes every row older than ``retention_secs``, of any worker. Only the worker writes its rows,
so adding to a row read in the same transaction is safe.

Readers sum the rows over workers per bucket (``runtime.insight.overview``): the dashboard's rates and service
usage are exact across workers and servers, within one flush interval. Counts not yet flushed
when a worker dies are lost (at most one interval); a clean stop flushes them.

The counting methods only bump dicts, so they can run on the publish, delivery and invoke paths.
"""

from __future__ import annotations

import json
import logging
import time
from bisect import bisect_left
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import gevent
from sqlalchemy import Connection, Engine, delete, insert, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import RateStat, ServiceStat
from runtime.observability.metrics import LATENCY_BUCKETS_SECS
from runtime.pubsub.observers import PubSubObserver
from runtime.util.spawn import killed

if TYPE_CHECKING:
    from runtime.pubsub.registry import SubInfo
    from runtime.pubsub.statements import Delivery, Publication

_log = logging.getLogger(__name__)

#: Length of one statistics bucket, in seconds.
BUCKET_SECS = 10

#: Seconds between two flushes of a worker's counts.
FLUSH_INTERVAL_SECS = 10.0

#: Rows older than this are deleted.
RETENTION_SECS = 3600.0

#: Order of the rate counters in a bucket's list.
RATE_FIELDS = ('published', 'delivered', 'failed', 'dead_lettered')


def bucket_of(at: float) -> int:
    """The start of the bucket holding time at (UNIX seconds)."""
    return int(at // BUCKET_SECS) * BUCKET_SECS


def merge_histograms(a: Sequence[int], b: Sequence[int]) -> list[int]:
    """The bucket-wise sum of two histograms (the shorter one is padded with zeros)."""
    size = max(len(a), len(b))
    return [(a[i] if i < len(a) else 0) + (b[i] if i < len(b) else 0) for i in range(size)]


def percentile(histogram: Sequence[int], q: float, bounds: Sequence[float] = LATENCY_BUCKETS_SECS) -> float | None:
    """The q-quantile (0 < q <= 1) of a latency histogram, interpolated linearly inside its bucket.

    histogram[i] counts values up to bounds[i]; the last entry counts values above every bound, and a
    quantile falling there is reported as the largest bound (a lower limit). None when it is empty.
    """
    total = sum(histogram)
    if total <= 0:
        return None
    rank = q * total
    seen = 0
    for i, count in enumerate(histogram):
        if count and seen + count >= rank:
            if i >= len(bounds):
                return float(bounds[-1])
            lower = bounds[i - 1] if i else 0.0
            return lower + (bounds[i] - lower) * (rank - seen) / count
        seen += count
    return float(bounds[-1])


class _ServiceCounts:
    __slots__ = ('errors', 'histogram', 'invocations', 'total_secs')

    def __init__(self, size: int) -> None:
        self.invocations = 0
        self.errors = 0
        self.total_secs = 0.0
        self.histogram = [0] * size


class StatsFlusher(PubSubObserver):
    """Counts this worker's pub/sub events and service runs per bucket; flushes them to the database."""

    def __init__(self, engine: Engine, worker: Callable[[], str], flush_interval_secs: float = FLUSH_INTERVAL_SECS,
                 retention_secs: float = RETENTION_SECS, bounds: tuple[float, ...] = LATENCY_BUCKETS_SECS,
                 clock: Callable[[], float] = time.time) -> None:
        """worker: this worker's id (its lease owner), asked at every flush."""
        self._engine = engine
        self._worker = worker
        self.flush_interval_secs = flush_interval_secs
        self.retention_secs = retention_secs
        self.bounds = bounds
        self._clock = clock
        #: bucket -> [published, delivered, failed, dead_lettered]
        self.rates: dict[int, list[int]] = {}
        #: (bucket, service) -> counts
        self.services: dict[tuple[int, str], _ServiceCounts] = {}

    def __repr__(self) -> str:
        return 'StatsFlusher()'

    # Counting

    def _count(self, index: int) -> None:
        bucket = bucket_of(self._clock())
        counts = self.rates.get(bucket)
        if counts is None:
            counts = self.rates[bucket] = [0, 0, 0, 0]
        counts[index] += 1

    def after_publish(self, pub: Publication, overflowed: bool) -> None:
        """Count a publication."""
        self._count(0)

    def after_deliver(self, sub: SubInfo, delivery: Delivery, ok: bool, error: BaseException | None,
                      duration_secs: float) -> None:
        """Count a delivery attempt, as delivered or failed."""
        self._count(1 if ok else 2)

    def after_dead_letter(self, sub: SubInfo, delivery: Delivery, reason: str, error: str) -> None:
        """Count a dead letter."""
        self._count(3)

    def on_stop(self) -> None:
        """The broker stops: write what is counted."""
        self.flush_quietly()

    def service_ran(self, service: str, secs: float, ok: bool) -> None:
        """Count one run of a service (the invoker's outcome observer)."""
        key = (bucket_of(self._clock()), service)
        counts = self.services.get(key)
        if counts is None:
            counts = self.services[key] = _ServiceCounts(len(self.bounds) + 1)
        counts.invocations += 1
        if not ok:
            counts.errors += 1
        counts.total_secs += secs
        counts.histogram[bisect_left(self.bounds, secs)] += 1

    # Flushing

    def flush(self) -> None:
        """Add the counts so far to this worker's rows and delete rows past retention."""
        rates, self.rates = self.rates, {}
        services, self.services = self.services, {}
        worker = self._worker()[:200]
        cutoff = bucket_of(self._clock() - self.retention_secs)
        try:
            run_transaction(self._engine, lambda conn: _write(conn, worker, rates, services, cutoff))
        except BaseException:
            self._restore(rates, services)  # counted again at the next flush
            raise

    def _restore(self, rates: dict[int, list[int]], services: dict[tuple[int, str], _ServiceCounts]) -> None:
        for bucket, counts in rates.items():
            now = self.rates.setdefault(bucket, [0, 0, 0, 0])
            for i, n in enumerate(counts):
                now[i] += n
        for key, counts in services.items():
            mine = self.services.get(key)
            if mine is None:
                self.services[key] = counts
                continue
            mine.invocations += counts.invocations
            mine.errors += counts.errors
            mine.total_secs += counts.total_secs
            mine.histogram = merge_histograms(mine.histogram, counts.histogram)

    def flush_quietly(self) -> None:
        """flush() what is counted (nothing when nothing is), with a failure logged instead of raised."""
        if not self.rates and not self.services:
            return
        try:
            self.flush()
        except Exception as e:
            _log.warning('statistics not written (%s: %s)', type(e).__name__, e)

    def run(self) -> None:
        """Flush every interval until killed."""
        while True:
            gevent.sleep(self.flush_interval_secs)
            try:
                self.flush()
            except Exception as e:
                if killed(e):
                    return
                _log.warning('statistics not written (%s: %s)', type(e).__name__, e)


def _write(conn: Connection, worker: str, rates: dict[int, list[int]],
           services: dict[tuple[int, str], _ServiceCounts], cutoff: int) -> None:
    for bucket, counts in rates.items():
        values = dict(zip(RATE_FIELDS, counts, strict=True))
        added = {name: getattr(RateStat, name) + n for name, n in values.items()}
        if not conn.execute(update(RateStat).where(RateStat.worker == worker, RateStat.bucket == bucket)
                            .values(**added)).rowcount:
            conn.execute(insert(RateStat).values(worker=worker, bucket=bucket, **values))
    for (bucket, service), counts in services.items():
        name = service[:200]
        where = (ServiceStat.worker == worker, ServiceStat.service == name, ServiceStat.bucket == bucket)
        stored = conn.execute(select(ServiceStat.histogram).where(*where)).scalar()
        if stored is None:
            conn.execute(insert(ServiceStat).values(
                worker=worker, service=name, bucket=bucket, invocations=counts.invocations, errors=counts.errors,
                total_secs=counts.total_secs, histogram=json.dumps(counts.histogram)))
            continue
        conn.execute(update(ServiceStat).where(*where).values(
            invocations=ServiceStat.invocations + counts.invocations, errors=ServiceStat.errors + counts.errors,
            total_secs=ServiceStat.total_secs + counts.total_secs,
            histogram=json.dumps(merge_histograms(read_histogram(stored), counts.histogram))))
    conn.execute(delete(RateStat).where(RateStat.bucket < cutoff))
    conn.execute(delete(ServiceStat).where(ServiceStat.bucket < cutoff))


def read_histogram(text: str) -> list[int]:
    """A stored histogram (JSON list of counts); an unreadable one counts as empty."""
    try:
        values = json.loads(text)
    except ValueError:
        return []
    if not isinstance(values, list):
        return []
    return [v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else 0 for v in values]
