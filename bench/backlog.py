"""A backlog of 1,000,000 GD messages: worker memory and drain rate against an empty queue.

One worker (an in-process ``Runtime``, gevent monkey-patched) on SQLite by default. A no-op
service's subscription (publishing to the service name: its implicit topic) is paused, the backlog
is written into its queue with the broker's own insert (``runtime.pubsub.statements.insert_publications``,
the rows ``publish`` writes, in transactions of 20,000), and the subscription is resumed. Measured:
the drain rate over consecutive windows at the head of the 1,000,000-message queue, the worker's
peak RSS while it drains (sampled every 0.2 s) and after the fill, and — on a fresh database, the
same way — the drain rate of a 20,000-message queue ("empty-queue rate").

    .venv/bin/python bench/backlog.py [--backlog 1000000] [--window 60000] [--windows 3] [--empty 20000]
                                      [--backend sqlite]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from runtime.db.blocking import run_transaction  # noqa: E402
from runtime.pubsub.statements import Publication, insert_publications  # noqa: E402
from runtime.service import Service  # noqa: E402
from runtime.testing import TestRuntime, make_settings, wait_until  # noqa: E402

NAME = 'backlog'
FILL_BATCH = 20_000
DATA = '{"n":0,"body":"' + 'x' * 50 + '"}'


class _Marks:
    """Handler calls so far, and the time at which each watched count was reached."""

    def __init__(self) -> None:
        self.seen = 0
        self.watch: dict[int, Event] = {}
        self.times: dict[int, float] = {}

    def reset(self, marks: list[int]) -> None:
        self.seen = 0
        self.watch = {m: Event() for m in marks}
        self.times = {}

    def hit(self) -> None:
        self.seen += 1
        event = self.watch.get(self.seen)
        if event is not None:
            self.times[self.seen] = time.perf_counter()
            event.set()


MARKS = _Marks()


class Sink(Service):
    """The no-op subscriber."""

    name = 'bench.sink'

    def handle(self) -> None:
        MARKS.hit()


@contextlib.contextmanager
def _runtime(backend: str) -> Iterator[TestRuntime]:
    with tempfile.TemporaryDirectory(prefix='conduit-bench-backlog-') as tmp:
        with common.database(backend, Path(tmp)) as url:
            settings = make_settings(Path(tmp), url)
            settings.archive.enabled = False  # a million archive records would measure the disk, not the queue
            rt = TestRuntime(settings)
            rt.start(watch=False)
            try:
                rt.deploy(Sink)
                MARKS.reset([1])
                rt.broker.publish('bench.sink', {'warmup': True})
                MARKS.watch[1].wait(30)
                yield rt
            finally:
                rt.stop()


def _db_size(rt: TestRuntime) -> int:
    url = rt.engine.url
    if url.get_backend_name() == 'sqlite':
        return sum(os.path.getsize(p) for p in (url.database, url.database + '-wal') if os.path.exists(p))
    with rt.engine.connect() as conn:
        return conn.exec_driver_sql('SELECT pg_database_size(current_database())').scalar_one()


def fill(rt: TestRuntime, count: int) -> float:
    """Pause the subscription and queue count messages for it; returns the seconds taken."""
    sub = rt.broker.registry.service_subscription('bench.sink')
    assert sub is not None
    rt.catalog.set_active(sub.sub_key, False)
    topic = rt.broker.registry.topic(sub.pattern)
    assert topic is not None
    started = time.perf_counter()
    done = 0
    while done < count:
        n = min(FILL_BATCH, count - done)
        now = time.time()
        pubs = [Publication(msg_id='msg.' + os.urandom(12).hex(), topic_id=topic.id, topic_name=topic.name,
                            data=DATA, mime_type='application/json', priority=5, pub_time=now,
                            expiration_time=now + 31_536_000, publisher='bench', correl_id=None, in_reply_to=None,
                            ext_client_id=None, has_gd=True, size=len(DATA), sub_ids=[sub.id]) for _ in range(n)]
        run_transaction(rt.engine, lambda conn, pubs=pubs: insert_publications(conn, pubs))
        done += n
    return time.perf_counter() - started


def drain(rt: TestRuntime, marks: list[int], rss: list[float]) -> dict[int, float]:
    """Resume delivery; returns the time each mark was reached (RSS sampled into rss meanwhile)."""
    MARKS.reset(marks)
    sampler = gevent.spawn(_sample_rss, rss)
    sub = rt.broker.registry.service_subscription('bench.sink')
    assert sub is not None
    try:
        rt.catalog.set_active(sub.sub_key, True)
        for m in marks:
            if not MARKS.watch[m].wait(600):
                raise RuntimeError(f'only {MARKS.seen} of {m} messages handled within 600 s')
        return MARKS.times
    finally:
        sampler.kill()


def _sample_rss(into: list[float]) -> None:
    while True:
        into.append(common.rss_mib())
        gevent.sleep(0.2)


def main(argv: list[str] | None = None) -> None:
    """Measure the big backlog and the small one; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backlog', type=int, default=1_000_000)
    parser.add_argument('--window', type=int, default=60_000, help='messages per measured drain window')
    parser.add_argument('--windows', type=int, default=3)
    parser.add_argument('--empty', type=int, default=20_000, help='size of the "empty queue" comparison')
    parser.add_argument('--backend', default='sqlite')
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)

    with _runtime(args.backend) as rt:
        fill_secs = fill(rt, args.backlog)
        rss_after_fill = common.rss_mib()
        db_bytes = _db_size(rt)
        print(f'filled {args.backlog:,} in {fill_secs:.1f} s; RSS {rss_after_fill:.0f} MiB; '
              f'database {db_bytes / 1e6:.0f} MB', flush=True)
        rss: list[float] = []
        # Windows are timed from the first message handled: the wait for the lease after the resume
        # (up to lease_renew_secs) is the same for both queues and is not a drain rate.
        marks = [1] + [args.window * (i + 1) for i in range(args.windows)]
        times = drain(rt, marks, rss)
        big = [(b - a) / (times[b] - times[a]) for a, b in zip(marks[:-1], marks[1:], strict=True)]
    print(f'backlog drain: {common.fmt_stats(big)} msg/s; peak RSS {max(rss):.0f} MiB', flush=True)
    empty = []
    with _runtime(args.backend) as rt:
        for _ in range(args.windows):
            fill(rt, args.empty)
            times = drain(rt, [1, args.empty], [])
            empty.append((args.empty - 1) / (times[args.empty] - times[1]))
            wait_until(lambda: rt.catalog.queue_depth(rt.broker.registry.service_subscription('bench.sink').sub_key)
                       == 0, 30, message='queue drained')
    print(f'empty-queue drain: {common.fmt_stats(empty)} msg/s', flush=True)
    if not args.no_write:
        write(args, fill_secs, rss_after_fill, max(rss), db_bytes, big, empty)


def write(args: argparse.Namespace, fill_secs: float, rss_fill: float, rss_peak: float, db_bytes: int,
          big: list[float], empty: list[float]) -> None:
    """The results section and its raw figures."""
    ratio = common.stats(big)[1] / common.stats(empty)[1]
    cmd = common.command_line('backlog.py', [f'--backlog {args.backlog}', f'--window {args.window}',
                                             f'--windows {args.windows}', f'--empty {args.empty}',
                                             f'--backend {args.backend}'])
    lines = [f'## Backlog of {args.backlog:,} GD messages (target: RSS ≤ 300 MB, drain within 20 % of '
             'an empty queue)', '',
             '| figure | value | target |', '|---|---|---|',
             f'| drain rate at the head of the {args.backlog:,}-message queue, {args.windows} windows of '
             f'{args.window:,} | {common.fmt_stats(big)} msg/s | |',
             f'| drain rate of a {args.empty:,}-message queue on a fresh database ("empty queue"), {args.windows} '
             f'runs | {common.fmt_stats(empty)} msg/s | |',
             f'| backlog ÷ empty (medians) | {ratio * 100:.0f} % | ≥ 80 % |',
             f'| worker RSS after the fill / peak while draining | {rss_fill:.0f} / {rss_peak:.0f} MiB | ≤ 300 MB |',
             f'| time to write the backlog (transactions of {FILL_BATCH:,}) | {fill_secs:.1f} s | |',
             f'| database size with the backlog | {db_bytes / 1e6:,.0f} MB | |', '',
             f'{args.backend}, one worker in-process, archive off (it would write a million records). Drain windows '
             'are timed from the first message handled after the subscription is resumed (not from the resume, '
             'which waits for the next lease refresh).', '',
             f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {
        'backend': args.backend, 'backlog': args.backlog, 'fill_secs': fill_secs, 'rss_after_fill_mib': rss_fill,
        'rss_peak_mib': rss_peak, 'db_bytes': db_bytes, 'backlog_rates': big, 'empty_rates': empty,
        'summary': [
            {'figure': f'worker RSS with a backlog of {args.backlog:,} GD messages', 'target': '≤ 300 MB',
             'measured': f'{rss_peak:.0f} MiB peak', 'met': rss_peak * 1.048576 <= 300},
            {'figure': f'drain rate with {args.backlog:,} waiting vs an empty queue', 'target': '≥ 80 %',
             'measured': f'{ratio * 100:.0f} %', 'met': ratio >= 0.8}]})


if __name__ == '__main__':
    main()
