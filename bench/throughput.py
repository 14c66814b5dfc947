"""Durable service→service messaging, end to end: publish, handler done, ack stored.

One worker (an in-process ``Runtime``, gevent monkey-patched as gunicorn's gevent worker runs it)
on SQLite or PostgreSQL. A ``bench.source`` service publishes to the service ``bench.sink`` (the
implicit topic ``/zato/s/to/bench_sink``, guaranteed delivery); ``bench.sink`` does nothing. A
round publishes N messages — from one sequential publisher, or from C concurrent publisher
greenlets — and is timed from the first publish until the N-th handler call has returned *and*
the subscription's queue is empty in the database (every ack stored). Publishing waits, as
always, until the message is durable (for SQLite: committed with ``synchronous=FULL``).

    .venv/bin/python bench/throughput.py [--backends sqlite,postgresql] [--publishers 1,50]
                                         [--count 20000] [--seq-count 5000] [--rounds 3]
                                         [--without archive,stats,metrics --no-write] [--quiet-timers]
                                         [--idle SECS --no-write]

``--without`` leaves out parts that watch every message, to see what they cost: the message archive
(``[archive] enabled = false`` in a server), and the dashboard's statistics and the Prometheus
metrics (always on in a server: only a benchmark leaves them out).

``--quiet-timers`` makes the work a worker does by the clock rather than per message (the 50 ms
safety-net poll of the queues, the configuration sync, the scheduler's poll, the
archive's and the statistics' flushes) happen once a minute at most. ``bench/instructions.py`` uses
it: under valgrind a round takes fifty times as long, and that work then counted as a third of
what a message seemed to cost. The archive and the statistics still write what they hold when
the runtime stops. Lease renewals keep their pace (a new subscription's delivery starts with one).
``--idle SECS`` starts the runtime as for a round, delivers the warm-up message and then waits
SECS instead of publishing: what the clock alone costs, which ``bench/instructions.py`` takes
away from its counts.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import resource  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from runtime.config import Settings  # noqa: E402
from runtime.pubsub import statements  # noqa: E402
from runtime.service import Service  # noqa: E402
from runtime.testing import TestRuntime, make_settings  # noqa: E402

NAME = 'throughput'
DEFAULT_COUNT = 20_000
DEFAULT_SEQ_COUNT = 5_000
DEFAULT_ROUNDS = 3
#: Payload of every message: small JSON, as an integration event would be.
BODY = 'x' * 50
#: What --without may leave out.
OPTIONAL_PARTS = ('archive', 'stats', 'metrics')
#: --quiet-timers: the longest a clock-driven task then waits, in seconds.
QUIET_SECS = 60.0


class _Counter:
    """Counts handler calls and tells when the expected number has been reached."""

    def __init__(self) -> None:
        self.expected = 0
        self.seen = 0
        self.done = Event()

    def reset(self, expected: int) -> None:
        self.expected, self.seen = expected, 0
        self.done.clear()

    def hit(self) -> None:
        self.seen += 1
        if self.seen >= self.expected:
            self.done.set()


COUNTER = _Counter()


class Sink(Service):
    """The no-op subscriber."""

    name = 'bench.sink'

    def handle(self) -> None:
        COUNTER.hit()


class Source(Service):
    """Publishes its request to bench.sink: service→service through the broker."""

    name = 'bench.source'

    def handle(self) -> None:
        self.pubsub.publish('bench.sink', self.request.payload)


def _publish_all(rt: TestRuntime, count: int, publishers: int) -> None:
    invoke = rt.invoke

    def publisher(start: int) -> None:
        for n in range(start, count, publishers):
            invoke('bench.source', {'n': n, 'body': BODY})
    gevent.joinall([gevent.spawn(publisher, p) for p in range(publishers)], raise_error=True)


def _queue_empty(rt: TestRuntime) -> bool:
    sub = rt.broker.registry.service_subscription('bench.sink')
    assert sub is not None
    with rt.engine.connect() as conn:
        return statements.queue_depth(conn, sub.id) == 0


def _cpu_secs() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def one_round(rt: TestRuntime, count: int, publishers: int, timeout: float) -> tuple[float, float]:
    """msg/s of one round, end to end, and the process's CPU per message (µs): publishers, worker and driver."""
    COUNTER.reset(count)
    cpu = _cpu_secs()
    started = time.perf_counter()
    _publish_all(rt, count, publishers)
    if not COUNTER.done.wait(timeout):
        raise RuntimeError(f'only {COUNTER.seen} of {count} messages handled within {timeout:g} s')
    while not _queue_empty(rt):
        gevent.sleep(0.001)
    elapsed = time.perf_counter() - started
    cpu = _cpu_secs() - cpu
    if COUNTER.seen != count:
        raise RuntimeError(f'{COUNTER.seen} handler calls for {count} messages')
    return count / elapsed, cpu / count * 1e6


def _leave_out(rt: TestRuntime, parts: frozenset[str]) -> None:
    """Stop the statistics and the metrics from seeing messages and service runs (the archive is a setting)."""
    if 'stats' in parts:
        rt.broker.observers.remove(rt.stats)
        rt.invoker.outcome = None
    if 'metrics' in parts:
        rt.broker.observers.remove(rt.metrics.pubsub)
        rt.invoker.observe = lambda service, secs: None


def quiet_timers(settings: Settings) -> None:
    """Work done by the clock, not per message, once every QUIET_SECS at most (see --quiet-timers)."""
    settings.pubsub.poll_interval_secs = QUIET_SECS
    settings.sync.interval_secs = QUIET_SECS
    settings.scheduler.poll_interval_secs = QUIET_SECS
    settings.archive.flush_interval_secs = QUIET_SECS
    settings.stats.flush_interval_secs = QUIET_SECS


def measure(backend: str, publishers: int, count: int, rounds: int, without: frozenset[str] = frozenset(),
            quiet: bool = False, idle_secs: float = 0.0) -> list[tuple[float, float]]:
    """(msg/s, CPU µs per message) of several rounds against one fresh database (none: idle_secs idle)."""
    with tempfile.TemporaryDirectory(prefix='conduit-bench-') as tmp, common.database(backend, Path(tmp)) as url:
        settings = make_settings(Path(tmp), url)
        settings.archive.enabled = 'archive' not in without
        if quiet:
            quiet_timers(settings)
        rt = TestRuntime(settings)
        rt.start(watch=False)
        _leave_out(rt, without)
        try:
            rt.deploy(Sink, Source)
            # Warm-up: the implicit topic and subscription, the lease, connections, caches.
            COUNTER.reset(1)
            rt.invoke('bench.source', {'n': -1, 'body': BODY})
            if not COUNTER.done.wait(30):
                raise RuntimeError('the warm-up message was not delivered within 30 s')
            if idle_secs:
                gevent.sleep(idle_secs)
                return []
            return [one_round(rt, count, publishers, timeout=max(120.0, count / 100)) for _ in range(rounds)]
        finally:
            rt.stop()


def main(argv: list[str] | None = None) -> None:
    """Measure every backend × publisher concurrency; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backends', default='sqlite,postgresql')
    parser.add_argument('--publishers', default='1,50', help='comma-separated publisher concurrencies')
    parser.add_argument('--count', type=int, default=DEFAULT_COUNT, help='messages per round (concurrent publishers)')
    parser.add_argument('--seq-count', type=int, default=DEFAULT_SEQ_COUNT,
                        help='messages per round with one sequential publisher (each waits for its commit)')
    parser.add_argument('--rounds', type=int, default=DEFAULT_ROUNDS)
    parser.add_argument('--without', default='', help=f'leave out some of {",".join(OPTIONAL_PARTS)} '
                                                          '(with --no-write: not the figures of a server)')
    parser.add_argument('--quiet-timers', action='store_true',
                        help='clock-driven work once a minute at most (for bench/instructions.py; needs --no-write)')
    parser.add_argument('--idle', type=float, default=0.0, metavar='SECS',
                        help='publish nothing: start, deliver the warm-up message, wait SECS, stop (needs --no-write)')
    parser.add_argument('--no-write', action='store_true', help='print only; do not write bench/results')
    args = parser.parse_args(argv)
    for flag, given in (('--quiet-timers', args.quiet_timers), ('--idle', args.idle)):
        if given and not args.no_write:
            parser.error(f'{flag} needs --no-write: its figures are not those of a server')
    without = frozenset(filter(None, args.without.split(',')))
    unknown = sorted(without - set(OPTIONAL_PARTS))
    if unknown:
        parser.error(f'--without takes {", ".join(OPTIONAL_PARTS)}, not {", ".join(unknown)}')
    if without and not args.no_write:
        parser.error('--without needs --no-write: its figures are not those of a server')

    if args.idle:
        for backend in args.backends.split(','):
            measure(backend, 1, 0, 0, without, args.quiet_timers, idle_secs=args.idle)
            print(f'{backend}: idle for {args.idle:g} s', flush=True)
        return
    rows = []
    for backend in args.backends.split(','):
        for publishers in (int(p) for p in args.publishers.split(',')):
            count = args.seq_count if publishers == 1 else args.count
            measured = measure(backend, publishers, count, args.rounds, without, args.quiet_timers)
            rates, cpu = [rate for rate, _ in measured], [us for _, us in measured]
            rows.append({'system': 'conduit', 'broker': backend, 'publishers': publishers, 'count': count,
                         'rates': rates, 'cpu_us_per_message': cpu})
            print(f'{backend} publishers={publishers}: {common.fmt_stats(rates)} msg/s, '
                  f'CPU {common.fmt_stats(cpu)} µs per message', flush=True)
    if args.no_write:
        return
    write(rows, args)


#: (backend, sequential) → the target and its floor in msg/s.
TARGETS = {('sqlite', False): ('≥ 10,000 msg/s', 10_000), ('postgresql', False): ('≥ 8,000 msg/s', 8_000),
           ('sqlite', True): ('≥ 2,500 msg/s', 2_500), ('postgresql', True): ('≥ 1,000 msg/s', 1_000)}


def _target(backend: str, sequential: bool) -> tuple[str, float]:
    return TARGETS[backend, sequential]


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    lines = ['## Conduit: durable service→service messaging, end to end '
             '(targets: 50 publishers ≥ 10,000 msg/s on SQLite, ≥ 8,000 on PostgreSQL; one sequential publisher '
             '≥ 2,500 on SQLite, ≥ 1,000 on PostgreSQL)', '',
             '| backend | publishers | msg/s min / median / max | CPU µs per message | messages per round | target |',
             '|---|---|---|---|---|---|']
    summary = []
    for row in rows:
        median = common.stats(row['rates'])[1]
        target, floor = _target(row['broker'], row['publishers'] == 1)
        lines.append(f"| {row['broker']} | {row['publishers']} | {common.fmt_stats(row['rates'])} | "
                     f"{common.fmt_stats(row['cpu_us_per_message'])} | {row['count']:,} | {target} |")
        summary.append({'figure': f"durable service→service, {row['broker']}, {row['publishers']} publisher(s)",
                        'target': target, 'measured': f'{common.fmt(median)} msg/s (median)',
                        'met': median >= floor})
        if row['broker'] == 'sqlite' and row['publishers'] > 1:
            cpu = common.stats(row['cpu_us_per_message'])[1]
            summary.append({'figure': f"process CPU per message, sqlite, {row['publishers']} publishers",
                            'target': '≤ 50 µs', 'measured': f'{common.fmt(cpu)} µs (median)', 'met': cpu <= 50})
    cmd = common.command_line('throughput.py', [f'--backends {args.backends}', f'--publishers {args.publishers}',
                                                f'--count {args.count}', f'--seq-count {args.seq_count}',
                                                f'--rounds {args.rounds}'])
    lines += ['', f'{args.rounds} rounds per row, each timed from the first publish until the last handler call '
              'returned and the queue was empty in the database (acks stored). One worker (in-process runtime, '
              'gevent), publishers are greenlets invoking a service that publishes to the no-op service '
              '`bench.sink` (GD, SQLite `synchronous=FULL`). A sequential publisher waits for the commit of '
              'each message before it publishes the next, so its rate is bounded by one durable commit (and '
              'one fsync) per message; concurrent publishers share commits (group commit), and the delivery '
              'loop\'s acks ride in the same commits. CPU per message is the whole process\'s (user and system, '
              'from getrusage) over the round: publishers, worker and database driver; the database server\'s '
              'own is not in it.', '', f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {'rows': rows, 'summary': summary})


if __name__ == '__main__':
    main()
