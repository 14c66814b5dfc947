"""What the dashboard's overview and services pages read: workers, totals, rates, service usage, deepest queues.

``Insight`` runs each read in a transaction of its own (the statements are the functions below and
in ``runtime.cluster.workers``); the HTTP layer calls it and owns no SQL.

Costs, with 10,000 topics and subscriptions and 1,000,000 queued messages:

- totals count topics and subscriptions exactly; queued messages and dead letters are counted
  exactly up to ``EXACT_COUNT_LIMIT`` rows (a bounded scan), and above that PostgreSQL's planner
  estimate (``pg_class.reltuples``) is given with ``estimated: true``; SQLite has no estimate and
  counts them all (a scan of the smallest index);
- the deepest queues need one grouped scan of the queue table;
- both are cached per worker for ``CACHE_SECS``, so a dashboard polling every few seconds, in
  several tabs, costs one scan per interval;
- rates and service usage read at most an hour of 10-second rows (``runtime.insight.stats``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, func, or_, select, text

from runtime.cluster.workers import HEARTBEAT_INTERVAL_SECS, list_workers
from runtime.db.blocking import run_transaction
from runtime.db.models import (
    DeadLetter,
    FileChannelRow,
    Job,
    QueueEntry,
    RateStat,
    RestChannel,
    ServiceStat,
    Subscription,
    Topic,
)
from runtime.insight.stats import (
    BUCKET_SECS,
    RATE_FIELDS,
    RETENTION_SECS,
    bucket_of,
    merge_histograms,
    percentile,
    read_histogram,
)
from runtime.objects.checks import names_service
from runtime.pubsub import queue_statements

T = TypeVar('T')

#: Rows counted exactly before a PostgreSQL estimate is used instead.
EXACT_COUNT_LIMIT = 100_000

#: Seconds the totals and the deepest queues are reused before they are read again.
CACHE_SECS = 5.0

#: Most queues the deepest-queues listing returns.
MAX_DEEPEST = 100

#: Most objects of each kind listed as users of a service.
MAX_USERS = 200


def _bounded_count(conn: Connection, table: Any) -> tuple[int, bool]:
    """(rows of table, whether the number is an estimate): exact up to EXACT_COUNT_LIMIT, then estimated."""
    limited = select(table.__table__.c.id).limit(EXACT_COUNT_LIMIT + 1).subquery()
    n = conn.execute(select(func.count()).select_from(limited)).scalar_one()
    if n <= EXACT_COUNT_LIMIT:
        return n, False
    if conn.dialect.name == 'postgresql':
        estimate = conn.execute(text('SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(:t)'),
                                {'t': table.__tablename__}).scalar()
        if estimate is not None and estimate > n:
            return int(estimate), True
        return n, True
    return conn.execute(select(func.count()).select_from(table)).scalar_one(), False


def totals(conn: Connection) -> dict[str, Any]:
    """How many topics, subscriptions, queued messages and dead letters are stored."""
    topics = conn.execute(select(func.count()).select_from(Topic)).scalar_one()
    subscriptions = conn.execute(select(func.count()).select_from(Subscription)).scalar_one()
    waiting, waiting_estimated = _bounded_count(conn, QueueEntry)
    dead, dead_estimated = _bounded_count(conn, DeadLetter)
    return {'topics': topics, 'subscriptions': subscriptions, 'messages_waiting': waiting,
            'messages_waiting_estimated': waiting_estimated, 'dead_letters': dead,
            'dead_letters_estimated': dead_estimated}


def deepest_queues(conn: Connection, limit: int) -> list[dict[str, Any]]:
    """The limit subscriptions with the most queued messages, deepest first, with their oldest message."""
    depth = func.count().label('depth')
    top = conn.execute(select(QueueEntry.sub_id, depth).group_by(QueueEntry.sub_id)
                       .order_by(depth.desc(), QueueEntry.sub_id).limit(limit)).all()
    ids = [r.sub_id for r in top]
    if not ids:
        return []
    subs = {r.id: r for r in conn.execute(select(Subscription.id, Subscription.pattern, Subscription.kind,
                                                 Subscription.service, Subscription.security, Subscription.is_active)
                                          .where(Subscription.id.in_(ids))).all()}
    stats = queue_statements.queue_stats(conn, ids)
    result = []
    for r in top:
        sub = subs.get(r.sub_id)
        stat = stats.get(r.sub_id, {})
        result.append({'sub_id': r.sub_id, 'depth': r.depth, 'pattern': sub.pattern if sub else '',
                       'kind': sub.kind if sub else '', 'subscriber': (sub.service or sub.security) if sub else '',
                       'is_active': bool(sub.is_active) if sub else False,
                       'dead_letters': stat.get('dead_letters', 0), 'oldest_message': stat.get('oldest_message')})
    return result


def rates(conn: Connection, since: int, until: int) -> list[dict[str, Any]]:
    """Per bucket from since to until (bucket starts), the counts summed over workers; empty buckets are zeros."""
    sums = [func.sum(getattr(RateStat, name)) for name in RATE_FIELDS]
    rows = {r[0]: r[1:] for r in conn.execute(select(RateStat.bucket, *sums).where(
        RateStat.bucket >= since, RateStat.bucket <= until).group_by(RateStat.bucket)).all()}
    result = []
    for bucket in range(since, until + 1, BUCKET_SECS):
        counts = rows.get(bucket) or (0, 0, 0, 0)
        entry: dict[str, Any] = {'bucket': bucket}
        for name, count in zip(RATE_FIELDS, counts, strict=True):
            entry[name] = int(count or 0)
            entry[f'{name}_per_sec'] = round(int(count or 0) / BUCKET_SECS, 3)
        result.append(entry)
    return result


def service_usage(conn: Connection, services: list[str], since: int) -> dict[str, dict[str, Any]]:
    """Per service of services, its invocations, errors, mean and p99 seconds since a bucket, over every worker."""
    usage = {name: {'invocations': 0, 'errors': 0, 'total_secs': 0.0, 'mean_secs': None, 'p99_secs': None}
             for name in services}
    if not services:
        return usage
    histograms: dict[str, list[int]] = {}
    for r in conn.execute(select(ServiceStat.service, ServiceStat.invocations, ServiceStat.errors,
                                 ServiceStat.total_secs, ServiceStat.histogram)
                          .where(ServiceStat.service.in_(services), ServiceStat.bucket >= since)).all():
        entry = usage[r.service]
        entry['invocations'] += r.invocations
        entry['errors'] += r.errors
        entry['total_secs'] += r.total_secs
        histograms[r.service] = merge_histograms(histograms.get(r.service, []), read_histogram(r.histogram))
    for name, entry in usage.items():
        if entry['invocations']:
            entry['mean_secs'] = entry['total_secs'] / entry['invocations']
            entry['p99_secs'] = percentile(histograms.get(name, []), 0.99)
        entry['total_secs'] = round(entry['total_secs'], 6)
    return usage


def service_users(conn: Connection, service: str) -> dict[str, list[dict[str, Any]]]:
    """What names a service: channels, jobs (as service or callback), subscriptions, topic hooks, file channels."""
    channels = [{'name': r.name, 'url_path': r.url_path, 'is_active': bool(r.is_active)} for r in conn.execute(
        select(RestChannel.name, RestChannel.url_path, RestChannel.is_active).where(RestChannel.service == service)
        .order_by(RestChannel.name).limit(MAX_USERS)).all()]
    jobs = []
    for r in conn.execute(select(Job.name, Job.service, Job.on_success, Job.on_error)
                          .where(or_(Job.service == service, Job.on_success == service, Job.on_error == service))
                          .order_by(Job.name).limit(MAX_USERS)).all():
        roles = [role for role, value in (('service', r.service), ('on_success', r.on_success),
                                          ('on_error', r.on_error)) if value == service]
        jobs.append({'name': r.name, 'roles': roles})
    subscriptions = [{'id': r.id, 'pattern': r.pattern, 'kind': r.kind, 'origin': r.origin} for r in conn.execute(
        select(Subscription.id, Subscription.pattern, Subscription.kind, Subscription.origin)
        .where(Subscription.service == service).order_by(Subscription.id).limit(MAX_USERS)).all()]
    topics = [{'name': r.name} for r in conn.execute(
        select(Topic.name).where(Topic.hook_service == service).order_by(Topic.name).limit(MAX_USERS)).all()]
    file_channels = [{'name': r.name} for r in conn.execute(
        select(FileChannelRow.name, FileChannelRow.definition).order_by(FileChannelRow.name)).all()
        if names_service(r.definition, service)][:MAX_USERS]
    return {'channels': channels, 'jobs': jobs, 'subscriptions': subscriptions, 'topic_hooks': topics,
            'file_channels': file_channels}


class Insight:
    """The dashboard's reads of runtime state, each in a transaction of its own; totals and deepest are cached."""

    def __init__(self, engine: Engine, service_names: Callable[[], list[str]],
                 heartbeat_secs: float = HEARTBEAT_INTERVAL_SECS, retention_secs: float = RETENTION_SECS,
                 clock: Callable[[], float] = time.time) -> None:
        """service_names: the services deployed in this worker now."""
        self._engine = engine
        self._service_names = service_names
        self.heartbeat_secs = heartbeat_secs
        self.retention_secs = retention_secs
        self._clock = clock
        self._cache: dict[Any, tuple[float, Any]] = {}

    def _read(self, work: Callable[[Connection], T]) -> T:
        return run_transaction(self._engine, work, write=False)

    def _cached(self, key: Any, work: Callable[[Connection], T]) -> T:
        now = self._clock()
        hit = self._cache.get(key)
        if hit is not None and now - hit[0] < CACHE_SECS:
            return hit[1]
        value = self._read(work)
        self._cache[key] = (now, value)
        return value

    def workers(self) -> list[dict[str, Any]]:
        """Every registered worker, its heartbeat age and the leases it holds."""
        return self._read(lambda c: list_workers(c, self._clock(), self.heartbeat_secs))

    def totals(self) -> dict[str, Any]:
        """Services deployed (in this worker), topics, subscriptions, messages waiting and dead letters."""
        stored = self._cached('totals', totals)
        return {'services': len(self._service_names()), **stored}

    def deepest(self, limit: int) -> list[dict[str, Any]]:
        """The deepest queues, deepest first."""
        return self._cached(('deepest', limit), lambda c: deepest_queues(c, limit))

    def rates(self, since: float | None = None) -> dict[str, Any]:
        """Counts and per-second rates per bucket from since (default: the retention period) until now."""
        now = self._clock()
        oldest = bucket_of(now - self.retention_secs)
        start = oldest if since is None else max(oldest, bucket_of(since))
        until = bucket_of(now)
        buckets = self._read(lambda c: rates(c, start, until)) if start <= until else []
        return {'bucket_secs': BUCKET_SECS, 'since': start, 'until': until, 'buckets': buckets}

    def services(self, search: str = '', limit: int = 50, offset: int = 0) -> tuple[int, list[dict[str, Any]]]:
        """(how many deployed services match search, one page of them by name with their usage in the last hour)."""
        needle = search.casefold()
        names = sorted(n for n in self._service_names() if needle in n.casefold())
        page = names[offset:offset + limit]
        since = bucket_of(self._clock() - self.retention_secs)
        usage = self._read(lambda c: service_usage(c, page, since))
        return len(names), [{'name': name, **usage[name]} for name in page]

    def service_usage(self, name: str) -> dict[str, Any]:
        """One service's invocations, errors, mean and p99 in the last hour."""
        since = bucket_of(self._clock() - self.retention_secs)
        return self._read(lambda c: service_usage(c, [name], since))[name]

    def service_users(self, name: str) -> dict[str, list[dict[str, Any]]]:
        """The channels, jobs, subscriptions, topic hooks and file channels that name a service."""
        return self._read(lambda c: service_users(c, name))
