"""Workers add up: durable service→service throughput with one and with two worker processes.

Each worker is a process of its own with an in-process runtime (gevent, as a gunicorn worker runs
it), all on one database. There are S no-op subscriber services (``bench.sink.0`` …), each its own
subscription and so its own delivery lease, which the workers share out among themselves (each takes
its fair share); every worker runs P/W publisher greenlets invoking ``bench.source``, which
publishes to the services in turn. A round of N messages is timed from the start signal until every
worker has published its part and every queue is empty in the database (each message handled and
its ack stored). The CPU time of the workers and of the database server over the round is reported
per message.

    .venv/bin/python bench/workers.py [--backend postgresql] [--workers 1,2] [--sinks 32] [--publishers 50]
                                      [--count 40000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

NAME = 'workers'
#: Payload of every message, as in bench/throughput.py.
BODY = 'x' * 50
#: How long the workers may take to share the leases out before a round.
SPREAD_TIMEOUT = 120.0


# The worker process


def _worker(url: str, base: Path, sinks: int, publishers: int) -> None:
    """One worker: a runtime with the services; publishes when told on stdin, answers on stdout."""
    from gevent import monkey
    monkey.patch_all()
    import gevent

    from runtime.service import Service
    from runtime.testing import TestRuntime, make_settings

    class Source(Service):
        """Publishes its request to the service it names."""

        name = 'bench.source'

        def handle(self) -> None:
            self.pubsub.publish(self.request.payload['to'], self.request.payload)

    def sink(n: int) -> type[Service]:
        return type(f'Sink{n}', (Service,), {'name': f'bench.sink.{n}', 'handle': lambda self: None,
                                             '__doc__': 'A no-op subscriber.'})

    base.mkdir(parents=True, exist_ok=True)
    rt = TestRuntime(make_settings(base, url))
    rt.start(watch=False)
    rt.deploy(Source, *(sink(n) for n in range(sinks)))
    stdin = gevent.get_hub().threadpool.spawn  # reading stdin must not stop the hub

    def publish(count: int, offset: int) -> None:
        def one(start: int) -> None:
            for n in range(start, count, publishers):
                rt.invoke('bench.source', {'n': n, 'to': f'bench.sink.{(n + offset) % sinks}', 'body': BODY})
        gevent.joinall([gevent.spawn(one, p) for p in range(publishers)], raise_error=True)

    _say({'ready': True})
    try:
        while True:
            line = stdin(sys.stdin.readline).get()
            if not line:
                return
            order = json.loads(line)
            if order.get('warm'):  # one message to each service: its topic and subscription exist from now on
                for n in range(sinks):
                    rt.invoke('bench.source', {'n': -1, 'to': f'bench.sink.{n}', 'body': BODY})
                _say({'warm': True})
            else:
                publish(order['count'], order['offset'])
                _say({'published': order['count']})
    finally:
        rt.stop()


def _say(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + '\n')
    sys.stdout.flush()


# The parent


class Worker:
    """A worker process and its pipes."""

    def __init__(self, url: str, base: Path, sinks: int, publishers: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, __file__, '--worker', url, '--base', str(base), '--sinks', str(sinks),
             '--publishers', str(publishers)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in: IO[str] = self.proc.stdin
        self._out: IO[str] = self.proc.stdout

    def tell(self, order: dict[str, Any]) -> None:
        self._in.write(json.dumps(order) + '\n')
        self._in.flush()

    def hear(self) -> dict[str, Any]:
        line = self._out.readline()
        if not line:
            raise RuntimeError(f'worker {self.proc.pid} exited with {self.proc.wait()}')
        return json.loads(line)

    def stop(self) -> None:
        self._in.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _cpu_by_pid(pids: list[int]) -> dict[int, float]:
    """CPU seconds (user + system) each process has used so far; a process that has ended is left out."""
    tick = os.sysconf('SC_CLK_TCK')
    used = {}
    for pid in pids:
        try:
            fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
        except OSError:
            continue
        used[pid] = (int(fields[11]) + int(fields[12])) / tick
    return used


def _cpu_since(before: dict[int, float]) -> float:
    """CPU seconds the processes of before have used since, counting those still running at both readings.

    A database backend may end during a round (another client of the same server disconnecting, as
    the suite's parallel tests do): its last seconds are then not counted, rather than failing the round.
    """
    after = _cpu_by_pid(list(before))
    return sum(after[pid] - before[pid] for pid in after)


def _database_pids() -> list[int]:
    """The database server's processes (all of PostgreSQL's: backends, WAL writer, checkpointer)."""
    pids = []
    for entry in Path('/proc').iterdir():
        if entry.name.isdigit():
            try:
                if (entry / 'comm').read_text().strip() in ('postgres', 'postmaster'):
                    pids.append(int(entry.name))
            except OSError:
                continue
    return pids


def _leases_by_owner(engine: Any) -> dict[str, int]:
    from sqlalchemy import text
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT owner, count(*) FROM conduit_lease WHERE name LIKE 'pubsub:sub:%' "
                                 'AND expires_at > :now GROUP BY owner'), {'now': time.time()}).all()
    return {owner: n for owner, n in rows}


def _queued(engine: Any) -> int:
    from sqlalchemy import text
    with engine.connect() as conn:
        return conn.execute(text('SELECT count(*) FROM conduit_queue')).scalar_one()


def measure(backend: str, workers: int, sinks: int, publishers: int, count: int, rounds: int) -> dict[str, Any]:
    """Rates and CPU per message of several rounds with this many workers, on one fresh database."""
    from sqlalchemy import create_engine
    with tempfile.TemporaryDirectory(prefix='conduit-bench-') as tmp, common.database(backend, Path(tmp)) as url:
        engine = create_engine(url.replace('postgresql://', 'postgresql+psycopg://'))
        procs: list[Worker] = []
        try:
            # The first worker makes the topics and subscriptions; the others find them when they start.
            procs.append(Worker(url, Path(tmp) / 'w0', sinks, publishers // workers))
            procs[0].hear()
            procs[0].tell({'warm': True})
            procs[0].hear()
            for w in range(1, workers):
                procs.append(Worker(url, Path(tmp) / f'w{w}', sinks, publishers // workers))
                procs[-1].hear()
            deadline = time.monotonic() + SPREAD_TIMEOUT
            while True:
                owners = _leases_by_owner(engine)
                if len(owners) == workers and sum(owners.values()) == sinks and \
                        max(owners.values()) - min(owners.values()) <= 1:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f'the leases were not shared out within {SPREAD_TIMEOUT:g} s: {owners}')
                time.sleep(0.2)
            while _queued(engine):  # the warm-up's messages
                time.sleep(0.05)
            pids = [p.proc.pid for p in procs]
            result: dict[str, Any] = {'rates': [], 'worker_cpu_us': [], 'db_cpu_us': [], 'leases': owners}
            for r in range(rounds):
                cpu0, db0 = _cpu_by_pid(pids), _cpu_by_pid(_database_pids())
                started = time.perf_counter()
                for w, proc in enumerate(procs):
                    proc.tell({'count': count // workers, 'offset': w + r})
                for proc in procs:
                    proc.hear()
                while _queued(engine):
                    time.sleep(0.005)
                elapsed = time.perf_counter() - started
                result['rates'].append(count // workers * workers / elapsed)
                result['worker_cpu_us'].append(_cpu_since(cpu0) / count * 1e6)
                result['db_cpu_us'].append(_cpu_since(db0) / count * 1e6)
                print(f"  round {r + 1}: {result['rates'][-1]:,.0f} msg/s, CPU per message: workers "
                      f"{result['worker_cpu_us'][-1]:.0f} µs, database {result['db_cpu_us'][-1]:.0f} µs", flush=True)
            return result
        finally:
            for proc in procs:
                proc.stop()
            engine.dispose()


def main(argv: list[str] | None = None) -> None:
    """Measure each number of workers; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backend', default='postgresql')
    parser.add_argument('--workers', default='1,2')
    parser.add_argument('--sinks', type=int, default=32)
    parser.add_argument('--publishers', type=int, default=50, help='publisher greenlets in all, shared out')
    parser.add_argument('--count', type=int, default=40_000, help='messages per round, in all')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--no-write', action='store_true')
    parser.add_argument('--worker', help=argparse.SUPPRESS)
    parser.add_argument('--base', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker(args.worker, Path(args.base), args.sinks, args.publishers)
        return
    rows = []
    for workers in (int(w) for w in args.workers.split(',')):
        result = measure(args.backend, workers, args.sinks, args.publishers, args.count, args.rounds)
        rows.append({'workers': workers, **result})
        print(f"{args.backend}, {workers} worker(s): {common.fmt_stats(result['rates'])} msg/s; CPU per message: "
              f"workers {common.fmt_stats(result['worker_cpu_us'])} µs, database "
              f"{common.fmt_stats(result['db_cpu_us'])} µs; leases {result['leases']}", flush=True)
    if not args.no_write:
        write(rows, args)


def write(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    lines = [f'## Workers add up: 1 and 2 worker processes on {args.backend} (target: 2 workers ≥ 1.6× one)', '',
             '| workers | msg/s min / median / max | worker CPU per message, µs | database CPU per message, µs |',
             '|---|---|---|---|']
    for row in rows:
        lines.append(f"| {row['workers']} | {common.fmt_stats(row['rates'])} | "
                     f"{common.fmt_stats(row['worker_cpu_us'], 1)} | {common.fmt_stats(row['db_cpu_us'], 1)} |")
    summary = []
    by = {row['workers']: common.stats(row['rates'])[1] for row in rows}
    if 1 in by and 2 in by:
        ratio = by[2] / by[1]
        summary.append({'figure': f'2 workers vs 1, durable service→service, {args.backend}', 'target': '≥ 1.6×',
                        'measured': f'{ratio:.2f}× ({common.fmt(by[2])} vs {common.fmt(by[1])} msg/s, medians)',
                        'met': ratio >= 1.6})
    cmd = common.command_line('workers.py', [f'--backend {args.backend}', f'--workers {args.workers}',
                                             f'--sinks {args.sinks}', f'--publishers {args.publishers}',
                                             f'--count {args.count}', f'--rounds {args.rounds}'])
    lines += ['', f'{args.rounds} rounds per row, each timed from the start signal until every worker had '
              f'published its part and every queue was empty in the database. {args.sinks} no-op subscriber '
              f'services (one subscription, so one lease, each), shared out among the workers before the first '
              f'round; {args.publishers} publisher greenlets in all, shared out among the workers, publishing to '
              'the services in turn. Worker CPU: user + system of the worker processes; database CPU: of all of '
              'the database server\'s processes, over the round. Two cores in all.', '', f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {'rows': rows, 'summary': summary})


if __name__ == '__main__':
    main()
