"""Publish→handler latency of durable service→service messages at fixed rates.

One worker (an in-process ``Runtime``, gevent monkey-patched and its start-up heap frozen, as
gunicorn's gevent worker runs it) on SQLite and on PostgreSQL. An open-loop generator starts
publication k at t0 + k/rate, each in a greenlet of its own (a publish waits until its message is
stored, and a slow one must not delay the schedule): it invokes ``bench.source``, which publishes
to the service ``bench.sink`` (guaranteed delivery). Latency is the time from the scheduled send to
the start of ``bench.sink``'s handler, so it includes the commit, the wake-up of the delivery loop,
the transaction that takes the message from the queue and the invocation. The first seconds of each
round are a warm-up and are not counted.

    .venv/bin/python bench/latency.py [--rates 100,1000] [--seconds 10] [--warmup 2] [--rounds 3]
                                      [--backends sqlite,postgresql]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from gevent.pool import Group  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from runtime.server import freeze_start_up_heap  # noqa: E402
from runtime.service import Service  # noqa: E402
from runtime.testing import TestRuntime, make_settings, wait_until  # noqa: E402

NAME = 'latency'
BODY = 'x' * 50

#: Handler start time (perf_counter) per sequence number.
STARTS: dict[int, float] = {}


class Sink(Service):
    """The no-op subscriber: notes when its handler starts."""

    name = 'bench.sink'

    def handle(self) -> None:
        STARTS.setdefault(self.request.payload['k'], time.perf_counter())


class Source(Service):
    """Publishes its request to bench.sink."""

    name = 'bench.source'

    def handle(self) -> None:
        self.pubsub.publish('bench.sink', self.request.payload)


def one_round(rt: TestRuntime, rate: int, seconds: float, warmup: float, base: int) -> dict:
    """Latencies (ms) of one round, warm-up excluded, and the rate the generator kept."""
    total = int(rate * (seconds + warmup))
    skip = int(rate * warmup)
    scheduled: dict[int, float] = {}
    group = Group()
    t0 = time.perf_counter() + 0.05
    for i in range(total):
        k = base + i
        at = t0 + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        scheduled[k] = at
        group.spawn(rt.invoke, 'bench.source', {'k': k, 'body': BODY})
    sent_in = time.perf_counter() - t0
    group.join(raise_error=True)
    wait_until(lambda: all(base + i in STARTS for i in range(total)), timeout=60, message='every message handled')
    latencies = sorted((STARTS[base + i] - scheduled[base + i]) * 1000 for i in range(skip, total))
    return {'p50': common.percentile(latencies, 50), 'p90': common.percentile(latencies, 90),
            'p99': common.percentile(latencies, 99), 'max': latencies[-1], 'count': len(latencies),
            'achieved_rate': total / sent_in}


def measure(backend: str, rate: int, seconds: float, warmup: float, rounds: int) -> list[dict]:
    """Several rounds at one rate against one fresh database."""
    STARTS.clear()
    with tempfile.TemporaryDirectory(prefix='conduit-bench-') as tmp, common.database(backend, Path(tmp)) as url:
        rt = TestRuntime(make_settings(Path(tmp), url))
        rt.start(watch=False)
        try:
            rt.deploy(Sink, Source)
            freeze_start_up_heap()  # as a server's worker does once started
            rt.invoke('bench.source', {'k': -1, 'body': BODY})
            wait_until(lambda: -1 in STARTS, timeout=30, message='warm-up message handled')
            results = []
            for r in range(rounds):
                results.append(one_round(rt, rate, seconds, warmup, base=(r + 1) * 10_000_000))
                gevent.sleep(0.5)
            return results
        finally:
            rt.stop()


def main(argv: list[str] | None = None) -> None:
    """Measure each backend × rate; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backends', default='sqlite,postgresql')
    parser.add_argument('--rates', default='100,1000')
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--warmup', type=float, default=2.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    rows = []
    for backend in args.backends.split(','):
        for rate in (int(r) for r in args.rates.split(',')):
            results = measure(backend, rate, args.seconds, args.warmup, args.rounds)
            rows.append({'backend': backend, 'rate': rate, 'rounds': results})
            print(f"{backend} {rate}/s: p50 {common.fmt_stats([r['p50'] for r in results], 2)} ms, "
                  f"p99 {common.fmt_stats([r['p99'] for r in results], 2)} ms", flush=True)
    if not args.no_write:
        write(rows, args)


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    lines = ['## Publish→handler latency at fixed rates '
             '(target at 1,000 msg/s: p50 ≤ 2 ms, p99 ≤ 20 ms)', '',
             '| backend | rate (msg/s) | p50 ms | p90 ms | p99 ms | max ms | rate kept (msg/s) | messages counted '
             'per round |', '|---|---|---|---|---|---|---|---|']
    summary = []
    for row in rows:
        rs = row['rounds']
        cells = [common.fmt_stats([r[k] for r in rs], 2) for k in ('p50', 'p90', 'p99', 'max')]
        lines.append(f"| {row['backend']} | {row['rate']:,} | {' | '.join(cells)} | "
                     f"{common.fmt_stats([r['achieved_rate'] for r in rs])} | {rs[0]['count']:,} |")
        if row['rate'] == 1000:
            p50 = common.stats([r['p50'] for r in rs])[1]
            p99 = common.stats([r['p99'] for r in rs])[1]
            summary.append({'figure': f"publish→handler latency at 1,000 msg/s, {row['backend']}",
                            'target': 'p50 ≤ 2 ms, p99 ≤ 20 ms',
                            'measured': f'p50 {p50:.2f} ms, p99 {p99:.2f} ms (medians)',
                            'met': p50 <= 2 and p99 <= 20})
    cmd = common.command_line('latency.py', [f'--backends {args.backends}', f'--rates {args.rates}',
                                             f'--seconds {args.seconds:g}', f'--warmup {args.warmup:g}',
                                             f'--rounds {args.rounds}'])
    lines += ['', f'Each cell is min / median / max over {args.rounds} rounds of {args.seconds:g} s (after a '
              f'{args.warmup:g} s warm-up that is not counted). Open-loop schedule: latency runs from the time a '
              'publication was due to the start of the subscriber\'s handler, so a stalled publisher counts '
              'against the figure. One worker, in-process, GD messages service→service.', '', f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {'rows': rows, 'summary': summary})


if __name__ == '__main__':
    main()
