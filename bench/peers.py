"""Celery and Dramatiq doing what ``bench/throughput.py`` measures for Conduit, on this machine.

Durable messaging end to end: N messages to a no-op handler, timed from the first send until the
N-th handler call has finished, as messages per second. Each peer runs one worker process with
late acks (Celery ``task_acks_late``; Dramatiq acks after the actor returns, by design) and no
result backend, on RabbitMQ (durable queue, persistent messages: the durable comparison) and on
Redis (this machine's Redis keeps nothing on disk: not durable). Publishers: one sequential
publisher, or 50 threads in one publishing process. Neither library waits for publisher confirms
by default (Celery ``confirm_publish`` off, Dramatiq ``confirm_delivery=False``), so a peer's
publisher is answered before its message reaches the disk, unlike Conduit's, which is answered
only once the message is committed; on RabbitMQ each configuration is also measured with
confirms on (``--confirms``), the same guarantee.

Every round starts with an emptied queue and a fresh worker, whose start is not timed (a warm-up
message is handled first). The worker counts calls and writes the time of the last one to a
file; the count must be exactly N. A round that does not finish (seen under load: a peer's
worker that never handles every message) is run again, up to ``RETRIES`` times; after that it is
reported as a failed round in its row of the table, and the run goes on with the next one.

    .venv/bin/python bench/peers.py [--count 20000] [--seq-count 5000] [--rounds 3]
                                    [--publishers 1,50] [--systems celery,dramatiq] [--brokers rabbitmq,redis]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

NAME = 'peers'
VENV_BIN = Path(sys.executable).parent
BROKERS = {'rabbitmq': common.RABBITMQ_URL, 'redis': common.REDIS_URL}
BODY = 'x' * 50

#: How many times a round that did not finish is run again before it is reported as failed.
RETRIES = 2

#: How each peer's worker runs: chosen for its best showing with a no-op handler on 2 cores.
WORKERS = {
    'celery': ([str(VENV_BIN / 'celery'), '-A', 'bench.peer_apps.celery_app', 'worker', '--pool', 'gevent',
                '--concurrency', '100', '--queues', 'conduit-bench-celery', '--loglevel', 'WARNING', '--without-gossip',
                '--without-mingle', '--without-heartbeat'],
               'gevent pool, concurrency 100, prefetch multiplier 16, acks_late'),
    'dramatiq': ([str(VENV_BIN / 'dramatiq'), 'bench.peer_apps.dramatiq_app', '--processes', '1', '--threads', '16',
                  '--queues', 'conduit-bench-dramatiq'],
                 '1 process, 16 threads, acks after the actor returns'),
}


def _sender(system: str):  # type: ignore[no-untyped-def]
    """The send function and a purge function of a peer (imported with BENCH_BROKER_URL set)."""
    if system == 'celery':
        from bench.peer_apps.celery_app import app, noop

        def purge() -> None:
            with app.connection_for_write() as conn:
                conn.default_channel.queue_purge('conduit-bench-celery')
        return noop.delay, purge
    from bench.peer_apps.dramatiq_app import broker, noop
    return noop.send, broker.flush_all


def publish_main(system: str, count: int, publishers: int, ready_file: Path, purge_only: bool) -> None:
    """In a subprocess: empty the queue, or warm up and send count messages; prints the start time."""
    send, purge = _sender(system)
    if purge_only:
        try:
            purge()
        except Exception as e:  # a queue not declared yet has nothing to purge
            print(f'purge: {type(e).__name__}: {e}', file=sys.stderr)
        return
    send({'warmup': True})
    deadline = time.time() + 60
    while not ready_file.exists():
        if time.time() > deadline:
            raise SystemExit('the worker did not handle the warm-up message within 60 s')
        time.sleep(0.01)

    def sender(start: int) -> None:
        for n in range(start, count, publishers):
            send({'n': n, 'body': BODY})
    started = time.time()
    if publishers == 1:
        sender(0)
    else:
        threads = [threading.Thread(target=sender, args=(p,)) for p in range(publishers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print(f'STARTED {started}', flush=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def one_round(system: str, broker: str, count: int, publishers: int, tmp: Path, confirm: bool = False) -> float:
    """msg/s of one round with a fresh worker."""
    done, ready = tmp / 'done', tmp / 'ready'
    for f in (done, ready):
        f.unlink(missing_ok=True)
    env = {**os.environ, 'BENCH_BROKER_URL': BROKERS[broker], 'BENCH_COUNT': str(count),
           'BENCH_DONE_FILE': str(done), 'BENCH_READY_FILE': str(ready), 'PYTHONPATH': str(common.REPO),
           'BENCH_CONFIRM': '1' if confirm else '0'}
    me = [sys.executable, str(Path(__file__).resolve()), '--system', system, '--count', str(count),
          '--publishers', str(publishers), '--ready-file', str(ready)]
    subprocess.run([*me, '--purge'], env=env, cwd=common.REPO, check=True, timeout=60, capture_output=True)
    worker = subprocess.Popen(WORKERS[system][0], env=env, cwd=common.REPO, start_new_session=True,
                              stdout=subprocess.DEVNULL, stderr=open(tmp / f'{system}-worker.log', 'ab'))
    try:
        out = subprocess.run([*me, '--publish'], env=env, cwd=common.REPO, check=True, timeout=900,
                             capture_output=True, text=True)
        started = float(out.stdout.split('STARTED ', 1)[1].split()[0])
        deadline = time.time() + max(120.0, count / 50)
        while not done.exists():
            if time.time() > deadline or worker.poll() is not None:
                raise RuntimeError(f'{system} on {broker}: not all {count} messages were handled '
                                   f'(see {tmp / f"{system}-worker.log"})')
            time.sleep(0.005)
        time.sleep(0.2)  # a count past N would show now
        ended, seen = done.read_text().split()
        if int(seen) != count:
            raise RuntimeError(f'{system} on {broker}: {seen} handler calls for {count} messages')
        return count / (float(ended) - started)
    finally:
        _stop(worker)


def main(argv: list[str] | None = None) -> None:
    """Measure every system × broker × publisher concurrency; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--count', type=int, default=20_000, help='messages per round (concurrent publishers)')
    parser.add_argument('--seq-count', type=int, default=5_000, help='messages per round, one publisher')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--publishers', default='1,50')
    parser.add_argument('--systems', default='celery,dramatiq')
    parser.add_argument('--brokers', default='rabbitmq,redis')
    parser.add_argument('--confirms', default='rabbitmq', help='brokers also measured with publisher confirms '
                        '(a send waits until the broker has the message), or "" for none')
    parser.add_argument('--no-write', action='store_true')
    # Internal: the publishing subprocess.
    parser.add_argument('--system', help=argparse.SUPPRESS)
    parser.add_argument('--ready-file', help=argparse.SUPPRESS)
    parser.add_argument('--purge', action='store_true', help=argparse.SUPPRESS)
    parser.add_argument('--publish', action='store_true', help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.purge or args.publish:
        publish_main(args.system, args.count, int(args.publishers), Path(args.ready_file), args.purge)
        return

    with tempfile.TemporaryDirectory(prefix='conduit-bench-peers-') as tmp:
        rows = measure_all(args, Path(tmp))
    if not args.no_write:
        write(rows, args)


def measure_rounds(run_round: Callable[[], float], rounds: int, label: str,
                   retries: int = RETRIES) -> tuple[list[float], list[str]]:
    """The rates of rounds that finished, and why each other round failed: a round that fails is run again
    up to retries times, then counted as failed (never ending the run)."""
    rates: list[float] = []
    failures: list[str] = []
    for n in range(1, rounds + 1):
        for attempt in range(1, retries + 2):
            try:
                rates.append(run_round())
                break
            except Exception as e:  # whatever went wrong, this round's figure is what is lost, not the run
                error = f'{type(e).__name__}: {e}'
                print(f'{label}: round {n}, attempt {attempt} of {retries + 1} failed: {error}', flush=True)
        else:
            failures.append(f'round {n}: {error}')
    return rates, failures


def measure_all(args: argparse.Namespace, tmp: Path,
                run_round: Callable[..., float] | None = None) -> list[dict]:
    """One row per system × broker × confirms × publishers, with its rates and failed rounds."""
    run_round = run_round or one_round
    rows = []
    for system in args.systems.split(','):
        for broker in args.brokers.split(','):
            confirms = [False, True] if broker in args.confirms.split(',') else [False]
            for confirm in confirms:
                for publishers in (int(p) for p in args.publishers.split(',')):
                    count = args.seq_count if publishers == 1 else args.count
                    label = f'{system} {broker} confirms={confirm} publishers={publishers}'
                    rates, failures = measure_rounds(
                        lambda s=system, b=broker, c=count, p=publishers, k=confirm: run_round(s, b, c, p, tmp, k),
                        args.rounds, label)
                    rows.append({'system': system, 'broker': broker, 'publishers': publishers, 'count': count,
                                 'rates': rates, 'failed': failures, 'config': WORKERS[system][1],
                                 'confirms': confirm})
                    print(f'{label}: {rate_cell(rates, failures)} msg/s', flush=True)
    return rows


def rate_cell(rates: list[float], failures: list[str]) -> str:
    """'min / median / max' of the rounds that finished, and how many failed (after their retries)."""
    rounds = len(rates) + len(failures)
    if not failures:
        return common.fmt_stats(rates)
    failed = f'{len(failures)} of {rounds} rounds failed after {RETRIES} retries each'
    return f'{common.fmt_stats(rates)} ({failed})' if rates else f'failed ({failed})'


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    lines = ['## Peers: Celery and Dramatiq, durable messaging end to end', '',
             '| system | broker | publisher confirms | worker | publishers | msg/s min / median / max '
             '| messages per round |',
             '|---|---|---|---|---|---|---|']
    for r in rows:
        broker = 'RabbitMQ (durable queue, persistent messages)' if r['broker'] == 'rabbitmq' else \
            'Redis (keeps nothing on disk here: not durable)'
        confirms = 'on (a send waits for the broker)' if r.get('confirms') else 'off (default)'
        lines.append(f"| {r['system'].title()} {common.version(r['system'])} | {broker} | {confirms} | {r['config']} | "
                     f"{r['publishers']} | {rate_cell(r['rates'], r.get('failed', []))} | {r['count']:,} |")
    cmd = common.command_line('peers.py', [f'--count {args.count}', f'--seq-count {args.seq_count}',
                                           f'--rounds {args.rounds}', f'--publishers {args.publishers}',
                                           f'--systems {args.systems}', f'--brokers {args.brokers}',
                                           f"--confirms '{args.confirms}'"])
    lines += ['', f'{args.rounds} rounds per row, each with an emptied queue and a fresh worker process (its start '
              'is not timed); timed from the first send until the last handler call finished. The publisher is a '
              'separate process (50 threads, or one sequential loop) sending a small JSON payload to a no-op '
              'handler. Neither peer waits for publisher confirms by default: with the default a send returns '
              'before the message is on disk, so the RabbitMQ rows are also measured with confirms on, the '
              f'guarantee a Conduit publisher gets. kombu {common.version("kombu")}, '
              f'pika {common.version("pika")}, redis-py {common.version("redis")}.', '', f'Command: `{cmd}`']
    failures = [f"{r['system']} on {r['broker']}, confirms {'on' if r.get('confirms') else 'off'}, "
                f"{r['publishers']} publisher(s), {failure}" for r in rows for failure in r.get('failed', [])]
    if failures:
        lines += ['', f'Rounds that did not finish after {RETRIES} retries each (their figures are left out above):',
                  '', *(f'- {f}' for f in failures)]
    common.write_result(NAME, '\n'.join(lines), {'rows': rows, 'summary': []})


if __name__ == '__main__':
    main()
