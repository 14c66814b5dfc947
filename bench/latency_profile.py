"""Where the time of a publish→handler goes: every statement, commit and shared transaction, timed.

Runs one round of ``bench/latency.py`` (same services, same open-loop schedule) with SQLAlchemy's
cursor events, the statements SQLite runs on sqlite3's own cursor and the dialect's commit wrapped
in timers, and prints per kind of statement how many ran and their median time, the commits, the
shared transactions of the group committer and a round trip of ``SELECT 1`` for scale. The timers
add a few µs per statement; use the figures to compare parts with each other, and
``bench/latency.py`` for the latency itself. It writes nothing.

    .venv/bin/python bench/latency_profile.py [--backend postgresql] [--rate 100] [--seconds 5] [--warmup 1]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import collections  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from sqlalchemy import Engine, event  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common, latency  # noqa: E402
from runtime.db import engine as db_engine  # noqa: E402
from runtime.pubsub import group_commit  # noqa: E402
from runtime.testing import TestRuntime, make_settings, wait_until  # noqa: E402


class Timings:
    """Durations in ms, per kind of statement, of commits and of the group committer's transactions."""

    def __init__(self) -> None:
        self.statements: dict[str, list[float]] = collections.defaultdict(list)
        self.commits: list[float] = []
        #: (ms, publications, other work items) per shared transaction.
        self.transactions: list[tuple[float, int, int]] = []
        self._started: dict[int, float] = {}

    def clear(self) -> None:
        self.statements.clear()
        self.commits.clear()
        self.transactions.clear()

    def install(self, engine: Engine) -> None:
        """Time every statement and commit of engine and every shared transaction of the committer."""
        event.listen(engine, 'before_cursor_execute', self._before)
        event.listen(engine, 'after_cursor_execute', self._after)
        dialect = engine.dialect
        do_commit = dialect.do_commit

        def timed_commit(dbapi_conn: Any) -> None:
            t = time.perf_counter()
            do_commit(dbapi_conn)
            self.commits.append((time.perf_counter() - t) * 1000)
        dialect.do_commit = timed_commit  # type: ignore[method-assign]

        timings = self
        # On SQLite the statements every message runs go to sqlite3's own cursor, past SQLAlchemy's events.
        on_driver = db_engine._on_driver

        def timed_on_driver(conn: Any, sql: str, *args: Any) -> Any:
            t = time.perf_counter()
            try:
                return on_driver(conn, sql, *args)
            finally:
                timings.statements[_kind(sql)].append((time.perf_counter() - t) * 1000)
        db_engine._on_driver = timed_on_driver  # type: ignore[assignment]

        commit = group_commit.GroupCommitter._commit

        def timed_transaction(committer: group_commit.GroupCommitter, pubs: list, works: list) -> None:
            t = time.perf_counter()
            commit(committer, pubs, works)
            timings.transactions.append(((time.perf_counter() - t) * 1000, len(pubs), len(works)))
        group_commit.GroupCommitter._commit = timed_transaction  # type: ignore[method-assign]

    def _before(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        self._started[id(conn)] = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        started = self._started.pop(id(conn), None)
        if started is not None:
            self.statements[_kind(statement)].append((time.perf_counter() - started) * 1000)


def _kind(statement: str) -> str:
    return ' '.join(statement.split()[:4])[:70]


def _median(values: list[float]) -> float:
    return common.percentile(sorted(values), 50) if values else 0.0


def round_trip_ms(engine: Engine, count: int = 2000) -> float:
    """Median time of ``SELECT 1`` on one connection: the floor of any statement."""
    times = []
    with engine.connect() as conn:
        for _ in range(count):
            t = time.perf_counter()
            conn.exec_driver_sql('SELECT 1').scalar()
            times.append((time.perf_counter() - t) * 1000)
        conn.rollback()
    return _median(times)


def main(argv: list[str] | None = None) -> None:
    """Run one timed round and print the breakdown."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backend', default='postgresql', choices=('sqlite', 'postgresql'))
    parser.add_argument('--rate', type=int, default=100)
    parser.add_argument('--seconds', type=float, default=5.0)
    parser.add_argument('--warmup', type=float, default=1.0)
    args = parser.parse_args(argv)
    timings = Timings()
    latency.STARTS.clear()
    with tempfile.TemporaryDirectory(prefix='conduit-bench-') as tmp, common.database(args.backend, Path(tmp)) as url:
        rt = TestRuntime(make_settings(Path(tmp), url))
        rt.start(watch=False)
        try:
            rt.deploy(latency.Sink, latency.Source)
            rt.invoke('bench.source', {'k': -1, 'body': latency.BODY})
            wait_until(lambda: -1 in latency.STARTS, timeout=30, message='warm-up message handled')
            rtt = round_trip_ms(rt.engine)
            timings.install(rt.engine)
            result = latency.one_round(rt, args.rate, args.seconds, args.warmup, base=10_000_000)
        finally:
            rt.stop()
    sent = int(args.rate * (args.seconds + args.warmup))
    shared = [t for t in timings.transactions if t[1]]
    print(f'{args.backend}, {args.rate} msg/s, {sent:,} messages: latency p50 {result["p50"]:.2f} ms, '
          f'p90 {result["p90"]:.2f} ms, p99 {result["p99"]:.2f} ms')
    print(f'SELECT 1 round trip: median {rtt:.3f} ms')
    print(f'shared transactions with publications: {len(shared):,}, median {_median([t[0] for t in shared]):.3f} ms, '
          f'{sum(t[0] for t in shared) / 1000:.2f} s in all; without: {len(timings.transactions) - len(shared):,}')
    print(f'commits: {len(timings.commits):,}, median {_median(timings.commits):.3f} ms')
    print('  count   median ms   total ms   statement')
    for text, values in sorted(timings.statements.items(), key=lambda kv: -len(kv[1])):
        print(f'{len(values):7,}   {_median(values):9.3f}   {sum(values):8.1f}   {text}')


if __name__ == '__main__':
    main()
