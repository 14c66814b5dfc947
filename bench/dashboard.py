"""Server time of every dashboard page and of the API calls each page makes, on a big database.

A database is seeded with 10,000 topics, 10,000 subscriptions and 1,000,000 queued messages: one
very deep queue (200,000 by default), the rest spread over the other queues with a long tail (a
third of the queues are empty), retries in progress (delivery counts, last errors, next attempts),
messages waiting in topics that have no subscriber, dead letters with errors and tracebacks over a
hundred subscriptions, a hundred scheduled jobs with their run history, audit entries, a fleet of
workers, and an hour of rate and service statistics. The rows are written in bulk (COPY on
PostgreSQL, executemany on SQLite) into the schema the migrations make, then ``ANALYZE`` is run
(``VACUUM ANALYZE`` on PostgreSQL) as an operator's database would have its statistics; a real server
(gunicorn, one gevent worker, logging at WARNING) is then started on it.

For every dashboard page and every API call the page makes, the server time is read from the
``Server-Timing: app;dur=`` header of N requests (the client's wall time is kept beside it: it
includes the transfer of big answers). The requests are made one at a time, after one warm-up
request per URL.

    .venv/bin/python bench/dashboard.py [--backends sqlite,postgresql] [--requests 20] [--quick]
                                        [--topics 10000] [--messages 1000000] [--deep 200000]
                                        [--keep]   # keep the PostgreSQL database for EXPLAIN ANALYZE
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import random
import re
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

# bench/ itself off the path: paramiko (imported with the dashboard's routes) tries `import invoke`, which
# would find bench/invoke.py and monkey-patch this process.
sys.path[:] = [p for p in sys.path if Path(p or '.').resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import requests  # noqa: E402
from sqlalchemy import Engine, create_engine, insert, text  # noqa: E402

from bench import common  # noqa: E402
from runtime.db.engine import normalize_url  # noqa: E402
from runtime.db.migrate import upgrade  # noqa: E402
from runtime.db.models import (  # noqa: E402
    AuditEntry,
    BasicAuthDef,
    Job,
    JobRun,
    RateStat,
    ServiceStat,
    Subscription,
    Topic,
    WorkerRow,
)
from runtime.pubsub.topics import normalize  # noqa: E402
from tests.live_server import LiveServer  # noqa: E402

NAME = 'dashboard'
#: Server time every page and API call must stay under, ms.
TARGET_MS = 200.0
#: Rows per bulk-insert batch.
BATCH = 50_000
#: Dashboard list pages show this many rows.
PAGE = 50
#: Seconds the server is left alone after it started, before measuring.
SETTLE_SECS = 10.0

ERRORS = [
    ("ConnectionError: POST https://crm.example.com/api/customers: connection refused",
     "requests.exceptions.ConnectionError"),
    ("KeyError: 'customer_id'", "KeyError"),
    ("TimeoutError: handler ran longer than 30 s", "TimeoutError"),
    ("HTTP 503 from https://billing.example.com/invoices: Service Unavailable", "RestError"),
    ("ValueError: invalid literal for int() with base 10: 'N/A'", "ValueError"),
]


@dataclass
class Sizes:
    """How much to seed."""

    topics: int
    subs: int
    messages: int
    deep: int
    dead: int
    in_topic: int
    jobs: int
    runs_per_job: int
    audit: int


@dataclass
class Seeded:
    """What the pages are pointed at, found while seeding."""

    deep_sub: int = 0
    deep_topic: str = ''
    busy_topic: str = ''
    dead_sub: int = 0
    deep_msg_ids: list[str] = field(default_factory=list)
    dead_msg_id: str = ''
    counts: dict[str, int] = field(default_factory=dict)


def topic_name(i: int) -> str:
    """Realistic topic names: 100 per region, 10 departments of 10 event kinds."""
    return f'region{i // 100}.dept{i // 10 % 10}.event{i % 10}'


def _copy(engine: Engine, table: str, columns: list[str], rows: Iterator[tuple]) -> int:
    """Write rows in bulk (COPY on PostgreSQL, executemany on SQLite) in batches; returns how many."""
    done = 0
    raw = engine.raw_connection()
    try:
        driver = raw.driver_connection
        if engine.dialect.name == 'postgresql':
            with driver.cursor() as cur, cur.copy(f'COPY {table} ({", ".join(columns)}) FROM STDIN') as copy:
                for row in rows:
                    copy.write_row(row)
                    done += 1
        else:
            sql = f'INSERT INTO {table} ({", ".join(columns)}) VALUES ({", ".join("?" * len(columns))})'
            batch: list[tuple] = []
            for row in rows:
                batch.append(row)
                if len(batch) >= BATCH:
                    driver.executemany(sql, batch)
                    done += len(batch)
                    batch = []
            if batch:
                driver.executemany(sql, batch)
                done += len(batch)
        driver.commit()
    finally:
        raw.close()
    return done


def _spread(total: int, queues: int, rng: random.Random) -> list[int]:
    """total messages over queues with a long tail: a few busy queues, many small ones."""
    weights = [1 / (i + 1) ** 0.9 for i in range(queues)]
    scale = total / sum(weights)
    counts = [int(w * scale) for w in weights]
    for i in range(total - sum(counts)):
        counts[i % queues] += 1
    rng.shuffle(counts)
    return counts


def seed(url: str, sizes: Sizes) -> Seeded:
    """Write the whole data set into an empty database (schema by the migrations); returns what pages need."""
    rng = random.Random(19)
    engine = create_engine(normalize_url(url))
    upgrade(engine)
    now = time.time()
    out = Seeded()
    routed = sizes.topics - max(1, sizes.topics // 100)  # the last 1 % have no subscriber
    with engine.begin() as conn:
        conn.execute(insert(Topic), [
            {'id': i + 1, 'name': topic_name(i) if i < routed else f'audit.unrouted.t{i}',
             'name_key': normalize(topic_name(i) if i < routed else f'audit.unrouted.t{i}'),
             'created_at': now - 86400 * 30 + i, 'has_gd': True, 'on_no_subs': 'accept', 'origin': 'api',
             'max_depth_gd': 1_000_000} for i in range(sizes.topics)])
        # One subscription per routed topic; the rest are patterns over a region (wildcard subscribers).
        subs = []
        for i in range(sizes.subs):
            exact = i < routed
            region = (i - routed) % max(1, routed // 100)
            subs.append({'id': i + 1, 'sub_key': f'zpsk.bench.{i:06d}.{os.urandom(6).hex()}',
                         'pattern': topic_name(i) if exact else f'region{region}.**',
                         'kind': 'pull', 'service': f'app.consumer{i % 50}', 'options': '{}', 'origin': 'api',
                         'created_at': now - 86400 * 20 + i})
        conn.execute(insert(Subscription), subs)
        conn.execute(insert(BasicAuthDef), [
            {'name': f'client{i}', 'username': f'client{i}', 'password_hash': 'scrypt$bench$not-a-real-hash',
             'origin': 'api'} for i in range(200)])
        conn.execute(insert(Job), [
            {'id': j + 1, 'name': f'job.sync{j}', 'service': f'app.consumer{j % 50}', 'job_type': 'interval_based',
             'is_active': j % 10 != 0, 'start_date': now - 86400, 'minutes': 5, 'created_at': now - 86400,
             'next_run_time': now + 86400 * 365 if j % 10 else None, 'run_count': sizes.runs_per_job,
             'extra': '{"batch": 100}'} for j in range(sizes.jobs)])
    # A pattern subscription's messages come from one topic of its region.
    sub_topic = {s['id']: (s['pattern'] if '*' not in s['pattern'] else
                           topic_name(min(routed - 1, int(s['pattern'][6:-3]) * 100 + s['id'] % 100))) for s in subs}
    topic_ids = {topic_name(i): i + 1 for i in range(routed)}
    # The deep queue is the first subscription; the other queued messages spread over two thirds of the rest.
    out.deep_sub = 1
    out.deep_topic = sub_topic[1]
    others = _spread(sizes.messages - sizes.deep, max(1, (sizes.subs - 1) * 2 // 3), rng)
    plan = [(1, sizes.deep)] + [(sub_id, n) for sub_id, n in zip(range(2, sizes.subs + 1), others, strict=False)
                                if n]
    out.busy_topic = sub_topic[max(plan[1:], key=lambda p: p[1])[0]] if len(plan) > 1 else out.deep_topic
    dead_subs = list(range(2, 2 + min(100, sizes.subs - 1)))
    out.dead_sub = dead_subs[0]
    msg_cols = ['id', 'msg_id', 'topic_id', 'topic_name', 'data', 'mime_type', 'priority', 'pub_time',
                'expiration_time', 'publisher', 'correl_id', 'in_reply_to', 'ext_client_id', 'has_gd', 'size',
                'in_topic']
    dead_rows: list[tuple] = []

    def priority(n: int) -> int:
        return 5 if n % 20 else (1, 3, 7, 9)[n // 20 % 4]

    def queued() -> Iterator[tuple[int, int, float]]:
        """(message id, subscription, publication time) of every queued message, the same on every pass."""
        n = 0
        for sub_id, count in plan:
            for k in range(count):
                n += 1
                # The deep queue's oldest message is a day old; smaller queues are younger.
                age = (count - k) * (86400 / count) if sub_id == 1 else (count - k) * 3.0
                yield n, sub_id, now - age

    def message(n: int, topic: str, topic_id: int, pub_time: float, in_topic: bool = False) -> tuple:
        body = json.dumps({'order_id': n, 'customer': f'C{n % 9973:05d}', 'amount': round(rng.random() * 1000, 2),
                           'lines': [{'sku': f'SKU-{(n * 7 + k) % 5000}', 'qty': k + 1}
                                     for k in range(n % 4 + 1)]})
        return (n, f'msg.{n:08d}.{os.urandom(4).hex()}', topic_id, topic, body, 'application/json', priority(n),
                pub_time, now + 86400 * 300, f'client{n % 200}', None, None, None, True, len(body), in_topic)

    deep_marks = {1, 1001, 25_001, 50_001, sizes.deep}

    def messages() -> Iterator[tuple]:
        n = 0
        for n, sub_id, pub_time in queued():
            topic = sub_topic[sub_id]
            row = message(n, topic, topic_ids[topic], pub_time)
            if sub_id == 1 and n in deep_marks:
                out.deep_msg_ids.append(row[1])
            yield row
        for d in range(sizes.dead):
            n += 1
            sub_id = dead_subs[d % len(dead_subs)]
            topic = sub_topic[sub_id]
            row = message(n, topic, topic_ids[topic], now - 7200 - d)
            error, kind = ERRORS[d % len(ERRORS)]
            dead_rows.append((d + 1, sub_id, n, 5, error,
                              f'Traceback (most recent call last):\n  File "services/app.py", line 42, in handle\n'
                              f'    self.deliver(msg)\n{kind}: {error}', 'max_attempts' if d % 7 else 'expired',
                              now - d * 2.0))
            if not out.dead_msg_id and sub_id == out.dead_sub:
                out.dead_msg_id = row[1]
            yield row
        unrouted = sizes.topics - routed
        for k in range(sizes.in_topic):
            n += 1
            i = routed + k % unrouted
            yield message(n, f'audit.unrouted.t{i}', i + 1, now - 600 - k, in_topic=True)

    def entries() -> Iterator[tuple]:
        for n, sub_id, pub_time in queued():
            retrying = n % 50 == 0
            yield (n, sub_id, n, -priority(n), 3 if retrying else 0, now + 600 if retrying else 0.0,
                   ERRORS[n % len(ERRORS)][0] if retrying else '', pub_time)

    started = time.perf_counter()
    out.counts['messages'] = _copy(engine, 'conduit_message', msg_cols, messages())
    out.counts['queued'] = _copy(engine, 'conduit_queue', [
        'id', 'sub_id', 'message_id', 'priority', 'delivery_count', 'next_attempt_at', 'last_error', 'recv_time'],
        entries())
    out.counts['dead_letters'] = _copy(engine, 'conduit_dead_letter', [
        'id', 'sub_id', 'message_id', 'delivery_count', 'last_error', 'last_traceback', 'reason', 'dead_at'],
        iter(dead_rows))
    out.counts['in_topic'] = sizes.in_topic
    out.counts['deep'] = sizes.deep
    _seed_history(engine, sizes, now, rng)
    out.counts['topics'], out.counts['subscriptions'] = sizes.topics, sizes.subs
    print(f'seeded in {time.perf_counter() - started:.0f} s: {out.counts}', flush=True)
    analyze(engine)
    engine.dispose()
    return out


def _seed_history(engine: Engine, sizes: Sizes, now: float, rng: random.Random) -> None:
    """Job runs, audit entries, workers and an hour of statistics."""
    _copy(engine, 'conduit_job_run', ['job_id', 'kind', 'fire_time', 'owner', 'started_at', 'ended_at', 'outcome',
                                      'error', 'cid'],
          ((j + 1, 'schedule', now - 300 * r, 'host1:1234', now - 300 * r, now - 300 * r + 0.2,
            'ok' if r % 13 else 'error', '' if r % 13 else 'KeyError: x', f'cid{j}.{r}')
           for j in range(sizes.jobs) for r in range(sizes.runs_per_job)))
    _copy(engine, 'conduit_audit', ['at', 'actor', 'client', 'source', 'method', 'path', 'kind', 'name', 'action',
                                    'status', 'before', 'after'],
          ((now - 30 * a, ('admin', 'alice', 'bob')[a % 3], '10.0.0.7', ('api', 'cli', 'dashboard')[a % 3], 'PATCH',
            f'/admin/topics/{topic_name(a % 1000)}', 'topic', topic_name(a % 1000), 'update', 200,
            '{"max_depth_gd": 10000}', '{"max_depth_gd": 20000}') for a in range(sizes.audit)))
    workers = [f'host{h}:{1000 + w}:{os.urandom(3).hex()}' for h in range(2) for w in range(2)]
    with engine.begin() as conn:
        # Other servers' workers, stopped an hour ago (the live server registers its own).
        conn.execute(insert(WorkerRow), [{'id': w, 'server': w.rsplit(':', 2)[0], 'host': w.split(':')[0],
                                          'pid': int(w.split(':')[1]), 'bind': '10.0.0.1:17010',
                                          'started_at': now - 86400, 'heartbeat_at': now - 3600} for w in workers])
        buckets = [int(now // 10 * 10) - 10 * b for b in range(360)]
        conn.execute(insert(RateStat), [
            {'worker': w, 'bucket': b, 'published': rng.randint(500, 3000), 'delivered': rng.randint(500, 3000),
             'failed': rng.randint(0, 40), 'dead_lettered': rng.randint(0, 5)} for w in workers for b in buckets])
        conn.execute(insert(ServiceStat), [
            {'worker': w, 'service': f'app.consumer{s}', 'bucket': b, 'invocations': 100, 'errors': s % 3,
             'total_secs': 0.5, 'histogram': json.dumps([10, 20, 40, 20, 5, 3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0])}
            for w in workers for s in range(50) for b in buckets[::6]])
        if engine.dialect.name == 'postgresql':
            for table in ('conduit_topic', 'conduit_subscription', 'conduit_message', 'conduit_queue',
                          'conduit_dead_letter', 'conduit_job', 'conduit_job_run', 'conduit_audit',
                          'conduit_sec_basic_auth'):
                conn.execute(text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), "
                                  f"(SELECT coalesce(max(id), 1) FROM {table}))"))
    _ = (AuditEntry, JobRun)  # the tables written by _copy above, named for readers


def analyze(engine: Engine) -> None:
    """Give the planner statistics of what was seeded, as a database in service has them."""
    started = time.perf_counter()
    if engine.dialect.name == 'postgresql':
        with engine.connect().execution_options(isolation_level='AUTOCOMMIT') as conn:
            conn.execute(text('VACUUM ANALYZE'))
    else:
        with engine.begin() as conn:
            conn.execute(text('ANALYZE'))
    print(f'analyzed in {time.perf_counter() - started:.0f} s', flush=True)


# Measuring


@dataclass
class Call:
    """One URL measured: the page it belongs to, a label, the path."""

    page: str
    label: str
    path: str
    #: False for calls no dashboard page makes (shown apart, not held to the target).
    dashboard: bool = True
    #: A JSON body: the call is a POST (a read the page makes by POST, e.g. a count for a filter).
    body: dict[str, Any] | None = None
    server_ms: list[float] = field(default_factory=list)
    wall_ms: list[float] = field(default_factory=list)
    status: int = 0
    size: int = 0


_TIMING = re.compile(r'(?:^|,)\s*app;dur=([0-9.]+)')


def server_ms(resp: requests.Response) -> float | None:
    """The app's duration from the Server-Timing header, or None without one."""
    match = _TIMING.search(resp.headers.get('Server-Timing', ''))
    return float(match.group(1)) if match else None


def calls(seeded: Seeded) -> list[Call]:
    """Every page and the API calls it makes (admin API paths: the dashboard mirrors them)."""
    deep, dead = seeded.deep_sub, seeded.dead_sub
    q = quote
    msg = seeded.deep_msg_ids[len(seeded.deep_msg_ids) // 2] if seeded.deep_msg_ids else 'none'
    # Page 1000 of the deep queue, or its last page when it is shorter (--quick).
    deep_offset = min(PAGE * 999, max(0, seeded.counts.get('deep', 0) - PAGE))
    deep_page = deep_offset // PAGE + 1
    dead_filter = 'topic=region0.**&error=connection+refused'
    dead_body = {'topic': 'region0.**', 'error': 'connection refused'}
    return [
        Call('overview', 'status', '/admin/status'),
        Call('overview', 'totals', '/admin/stats/totals'),
        Call('overview', 'workers', '/admin/workers'),
        Call('overview', 'rates, last hour', '/admin/stats/rates'),
        Call('overview', 'deepest queues', '/admin/queues/deepest?limit=10'),
        Call('services', 'page 1 with usage', f'/admin/stats/services?limit={PAGE}'),
        Call('service', 'source', '/admin/services/conduit.ping/source'),
        Call('service', 'usage', '/admin/services/conduit.ping/usage'),
        Call('deployments', 'history', f'/admin/deployments?limit={PAGE}&offset=0'),
        Call('topics', 'page 1', f'/admin/topics?limit={PAGE}'),
        Call('topics', 'search', f'/admin/topics?q=dept3.event7&limit={PAGE}'),
        Call('topic', 'details (deep queue\'s topic)', f'/admin/topics/{q(seeded.deep_topic)}?last=10'),
        Call('topic', 'details (busy topic)', f'/admin/topics/{q(seeded.busy_topic)}?last=10'),
        Call('topic', 'messages waiting in it', f'/admin/topic-messages?topic={q(seeded.busy_topic)}&limit={PAGE}'),
        Call('queues', 'page 1', f'/admin/queues?limit={PAGE}'),
        Call('queues', 'search', f'/admin/queues?q=consumer7&limit={PAGE}'),
        Call('queue', 'deep queue details', f'/admin/queues/{deep}'),
        Call('queue', 'deep queue page 1', f'/admin/queues/{deep}/messages?limit={PAGE}'),
        Call('queue', f'deep queue page {deep_page}',
             f'/admin/queues/{deep}/messages?limit={PAGE}&offset={deep_offset}'),
        Call('queue', 'one message', f'/admin/queues/{deep}/messages/{q(msg)}'),
        Call('dead letters', 'one subscription\'s', f'/admin/queues/{dead}/dead-letters?limit={PAGE}'),
        Call('dead letters', 'filter: topic pattern and error text', f'/admin/dead-letters?{dead_filter}&limit={PAGE}'),
        Call('dead letters', 'count of that filter', '/admin/dead-letters/count', body=dead_body),
        Call('dead letters', 'one dead letter', f'/admin/queues/{dead}/dead-letters/{q(seeded.dead_msg_id)}'),
        Call('scheduler', 'jobs page 1', '/admin/jobs?limit=25'),
        Call('scheduler', 'jobs search', '/admin/jobs?search=sync1&limit=25'),
        Call('scheduler', 'a job', '/admin/jobs/job.sync1'),
        Call('scheduler', 'a job\'s runs', '/admin/jobs/job.sync1/runs?limit=20'),
        Call('spark', 'pipelines', '/admin/spark/pipelines'),
        Call('spark', 'jobs page 1', '/admin/spark/jobs?limit=25'),
        Call('security', 'definitions page 1', f'/admin/security?limit={PAGE}&offset=0'),
        Call('security', 'pattern tester', f'/admin/pubsub/topic-matches?pattern=region0.**&limit={PAGE}'),
        Call('channels', 'page 1', f'/admin/channels?limit={PAGE}&offset=0'),
        Call('audit', 'page 1', f'/admin/audit?limit={PAGE}'),
        # Whole lists the dashboard does not ask for (the CLI and scripts do): shown apart, not in the target.
        Call('(whole lists)', 'every topic', '/admin/topics', dashboard=False),
        Call('(whole lists)', 'every queue', '/admin/queues', dashboard=False),
        Call('(whole lists)', 'every subscription', '/admin/subscriptions', dashboard=False),
    ]


def pages(seeded: Seeded) -> list[Call]:
    """Every dashboard page (the server-rendered shell; its data comes from the API calls)."""
    from runtime.http.dashboard.routes import PAGES
    values = {'name': quote(seeded.deep_topic, safe=''), 'sub_id': str(seeded.deep_sub), 'job_id': 'none'}
    out = []
    for path, _ in PAGES:
        # {name} is a topic's name on the topic page, a service's on the service page.
        named = {**values, 'name': 'conduit.ping'} if path.startswith('/dashboard/services/') else values
        filled = re.sub(r'\{(\w+)(?::\w+)?\}', lambda m, named=named: named.get(m.group(1), 'x'), path)
        out.append(Call('page ' + path, 'HTML', filled))
    return out


def _mirrored(call: Call) -> Call:
    """The same call through the dashboard's API mirror (/admin/X is /dashboard/api/X)."""
    return Call(call.page, call.label, '/dashboard/api' + call.path[len('/admin'):], dashboard=call.dashboard,
                body=call.body)


def sign_in(session: requests.Session, server: LiveServer) -> None:
    """Sign in to the dashboard with the admin's credentials, as the form does; the session keeps the cookie."""
    user, password = server.admin
    resp = session.post(server.url + '/dashboard/sign-in', data={'username': user, 'password': password,
                                                                 'next': '/dashboard/'},
                        allow_redirects=False, timeout=30)
    if resp.status_code != 303 or 'conduit_session' not in session.cookies:
        raise RuntimeError(f'signing in to the dashboard failed: {resp.status_code} {resp.text[:300]}')
    # A POST through the mirror needs the session's CSRF token, which every page carries.
    page = session.get(server.url + '/dashboard/', timeout=30)
    found = re.search(r'data-csrf="([^"]+)"', page.text)
    if found is None:
        raise RuntimeError('the dashboard page carries no CSRF token')
    session.headers['X-CSRF-Token'] = found.group(1)
    session.headers['Origin'] = server.url


def measure(server: LiveServer, todo: list[Call], n: int,
            get: Callable[[Call], requests.Response]) -> None:
    """n timed requests per call, after one warm-up; fills each call's figures."""
    for call in todo:
        resp = get(call)
        call.status, call.size = resp.status_code, len(resp.content)
        if resp.status_code != 200:
            print(f'  {call.page} / {call.label}: {resp.status_code} {resp.text[:200]}', flush=True)
            continue
        for _ in range(n):
            started = time.perf_counter()
            resp = get(call)
            call.wall_ms.append((time.perf_counter() - started) * 1000)
            ms = server_ms(resp)
            if ms is not None:
                call.server_ms.append(ms)
        p50, p95 = _p(call.server_ms or call.wall_ms)
        print(f'  {call.page:24} {call.label:36} p50 {p50:8.1f} ms  p95 {p95:8.1f} ms  '
              f'({"server" if call.server_ms else "wall"}; {call.size:,} B)', flush=True)


def _p(values: list[float]) -> tuple[float, float]:
    if not values:
        return float('nan'), float('nan')
    ranked = sorted(values)
    return common.percentile(ranked, 50), common.percentile(ranked, 95)


@contextlib.contextmanager
def _database(backend: str, tmp: Path, keep: bool) -> Iterator[str]:
    if backend == 'sqlite' or not keep:
        with common.database(backend, tmp) as url:
            yield url
        return
    import psycopg
    name = f'conduit_bench_dashboard_{os.urandom(4).hex()}'
    with psycopg.connect(common.PG_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE {name}')
    url = common.PG_ADMIN_URL.rsplit('/', 1)[0] + '/' + name
    print(f'keeping the database {url} (drop it with: DROP DATABASE {name})', flush=True)
    yield url


def _get(session: requests.Session, url: str, body: dict[str, Any] | None = None) -> requests.Response:
    """GET (POST with a body), once more on a new connection if the server closed the kept-alive one."""
    method = 'POST' if body is not None else 'GET'
    try:
        return session.request(method, url, json=body, timeout=120)
    except requests.ConnectionError:
        return session.request(method, url, json=body, timeout=120)


@contextlib.contextmanager
def _folder(keep: bool) -> Iterator[str]:
    if keep:
        yield tempfile.mkdtemp(prefix='conduit-bench-dashboard-')
        return
    with tempfile.TemporaryDirectory(prefix='conduit-bench-dashboard-') as tmp:
        yield tmp


def run_backend(backend: str, sizes: Sizes, n: int, keep: bool, dashboard: bool) -> dict[str, Any]:
    """Seed, start a server, measure every call; the backend's rows."""
    with _folder(keep) as tmp, _database(backend, Path(tmp), keep) as url:
        if backend == 'sqlite':
            url = f'sqlite:///{Path(tmp) / "server" / "var" / "conduit.db"}'
            (Path(tmp) / 'server' / 'var').mkdir(parents=True)
            if keep:
                print(f'keeping the database {url}', flush=True)
        started = time.perf_counter()
        seeded = seed(url, sizes)
        seed_secs = time.perf_counter() - started
        server = LiveServer(Path(tmp) / 'server', url, workers=1, extra_config='[logging]\nlevel = "WARNING"\n')
        server.start(timeout=120)
        # The server's start-up work (loading 10,000 subscriptions, first sweeps) is not what a page costs.
        time.sleep(SETTLE_SECS if sizes.messages >= 100_000 else 1.0)
        try:
            session = requests.Session()
            if dashboard:
                sign_in(session, server)
                todo = pages(seeded) + [_mirrored(c) for c in calls(seeded)]
            else:
                session.auth = server.admin
                todo = calls(seeded)
            print(f'{backend}: measuring {len(todo)} calls, {n} requests each', flush=True)
            measure(server, todo, n, lambda call: _get(session, server.url + call.path, call.body))
        finally:
            server.stop()
    rows = []
    for c in todo:
        values = c.server_ms or c.wall_ms
        p50, p95 = _p(values)
        wall50, _ = _p(c.wall_ms)
        rows.append({'page': c.page, 'label': c.label, 'path': c.path, 'dashboard': c.dashboard,
                     'status': c.status, 'bytes': c.size,
                     'source': 'server' if c.server_ms else 'wall', 'p50_ms': p50, 'p95_ms': p95,
                     'wall_p50_ms': wall50, 'n': len(values)})
    return {'backend': backend, 'seed_secs': seed_secs, 'counts': seeded.counts, 'rows': rows,
            'mode': 'dashboard' if dashboard else 'admin API'}


def main(argv: list[str] | None = None) -> None:
    """Seed and measure on every backend; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backends', default='sqlite,postgresql')
    parser.add_argument('--requests', type=int, default=20, help='timed requests per URL')
    parser.add_argument('--quick', action='store_true', help='1,000 topics and subscriptions, 50,000 messages')
    parser.add_argument('--topics', type=int, default=10_000, help='topics, and as many subscriptions')
    parser.add_argument('--messages', type=int, default=1_000_000, help='queued messages')
    parser.add_argument('--deep', type=int, default=200_000, help='messages in the deepest queue')
    parser.add_argument('--keep', action='store_true', help='keep the databases (for EXPLAIN ANALYZE)')
    parser.add_argument('--admin-api', action='store_true',
                        help='measure the admin API (Basic Auth) instead of the dashboard and its API mirror')
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    if args.quick:
        args.topics, args.messages, args.deep = 1_000, 50_000, 10_000
        args.requests = min(args.requests, 5)
    sizes = Sizes(topics=args.topics, subs=args.topics, messages=args.messages, deep=args.deep,
                  dead=max(100, args.messages // 50), in_topic=max(100, args.messages // 200),
                  jobs=100, runs_per_job=200 if not args.quick else 20, audit=max(1000, args.messages // 20))
    dashboard = not args.admin_api and importlib.util.find_spec('runtime.http.dashboard.routes') is not None
    results = [run_backend(b, sizes, args.requests, args.keep, dashboard) for b in args.backends.split(',') if b]
    if not args.no_write:
        write(results, args, sizes)


def write(results: list[dict[str, Any]], args: argparse.Namespace, sizes: Sizes) -> None:
    """The results section and its raw figures."""
    backends = [r['backend'] for r in results]
    by_key: dict[tuple[str, str], dict[str, dict]] = {}
    for r in results:
        for row in r['rows']:
            by_key.setdefault((row['page'], row['label']), {})[r['backend']] = row
    lines = [f'## Dashboard pages with {sizes.topics:,} topics, {sizes.subs:,} subscriptions and '
             f'{sizes.messages:,} queued messages (target: every page and API call ≤ {TARGET_MS:.0f} ms server time)',
             '',
             '| page | call | ' + ' | '.join(f'{b} p50 / p95 ms' for b in backends) + ' | answer size |',
             '|---|---|' + '---|' * len(backends) + '---|']
    summary, slow = [], []
    for (page, label), per in by_key.items():
        cells = []
        for b in backends:
            row = per.get(b)
            if row is None or row['status'] != 200:
                cells.append(f'HTTP {row["status"]}' if row else '—')
                continue
            mark = '' if row['source'] == 'server' else ' (wall)'
            over = row['p95_ms'] > TARGET_MS and row.get('dashboard', True)
            if over:
                slow.append(f'{page} / {label} ({b})')
            cells.append(f'{"**" if over else ""}{row["p50_ms"]:,.1f} / {row["p95_ms"]:,.1f}{"**" if over else ""}'
                         f'{mark}')
        size = max((r['bytes'] for r in per.values()), default=0)
        lines.append(f'| {page} | {label} | ' + ' | '.join(cells) + f' | {size / 1024:,.0f} KiB |')
    worst = {b: max((row['p95_ms'] for (_, _), per in by_key.items()
                     if (row := per.get(b)) and row['status'] == 200 and row.get('dashboard', True)),
                    default=float('nan')) for b in backends}
    missing = sorted({f'`{row["path"].split("?")[0]}`' for per in by_key.values() for row in per.values()
                      if row['status'] != 200})
    for b in backends:
        summary.append({'figure': f'dashboard, slowest page or API call (p95 server time), {b}, '
                                  f'{sizes.topics:,} topics / {sizes.messages:,} queued',
                        'target': f'≤ {TARGET_MS:.0f} ms', 'measured': f'{worst[b]:,.0f} ms',
                        'met': worst[b] <= TARGET_MS})
    cmd = common.command_line('dashboard.py', (['--quick'] if args.quick else
                              [f'--backends {args.backends}', f'--requests {args.requests}',
                               f'--topics {args.topics}', f'--messages {args.messages}', f'--deep {args.deep}'])
                              + (['--admin-api'] if args.admin_api else []))
    how = ('Pages and API calls through the dashboard (signed in with the form; the API calls through its mirror, '
           '`/dashboard/api/X` for `/admin/X`)' if results and results[0]['mode'] == 'dashboard' else
           'The admin API with Basic Auth (the dashboard mirrors it at `/dashboard/api/X`)')
    seeds = '; '.join(f"{r['backend']} seeded in {r['seed_secs']:.0f} s" for r in results)
    lines += ['', f'{how}: {args.requests} sequential requests per URL after one warm-up, one gunicorn gevent worker, '
              'logging at WARNING. Server time is the `Server-Timing: app;dur=` header; "(wall)" marks figures '
              'taken on the client where the answer had no such header. Seeded: one deep queue of '
              f'{sizes.deep:,}, the rest over two thirds of the other queues (long tail), every 50th message '
              f'retrying, {sizes.dead:,} dead letters over 100 subscriptions, {sizes.in_topic:,} messages waiting in '
              f'topics without subscribers, {sizes.jobs} jobs × {sizes.runs_per_job} runs, {sizes.audit:,} audit '
              f'entries, an hour of statistics; then ANALYZE (VACUUM ANALYZE on PostgreSQL). {seeds}. Page 1000 is '
              f'offset {PAGE * 999:,} at {PAGE} rows a page. The machine of this run (shared with other work while it '
              'ran: the figures are noisy upwards):', '',
              common.machine_markdown().rstrip(), '',
              'Over the target: ' + (', '.join(slow) if slow else 'none') + '. See the notes below for why.'
              + (f' Not answered 200 on this branch (a route of another part of the dashboard not merged yet, '
                 f'or not there): {", ".join(missing)}.' if missing else ''), '',
              f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {'results': results, 'summary': summary})


if __name__ == '__main__':
    main()
