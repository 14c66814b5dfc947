"""Publish cost with 100, 1,000 and 10,000 topics and as many pattern subscriptions.

One worker (an in-process ``Runtime``, gevent monkey-patched) on SQLite. Topics are
``region{r}.dept{d}.event{e}`` (10 departments × 10 events per region, regions growing with the
size), and there is one subscription per topic, in four shapes taken in turn: the exact name,
``region{r}.dept{d}.*``, ``region{r}.*.event{e}`` and ``region{r}.**``; so a topic matches about the
same number of subscriptions at every size, and only the size of the index grows. The rows are
written straight into the database (through the broker's API, creating 10,000 subscriptions would
measure 10,000 registry reloads) and the broker then loads them as a server does at start.
Subscriptions are pull queues, so no delivery loops run. Measured, per size:

- resolving a publication's subscribers (``Registry.all_subscribers``) for every topic in turn, µs;
- a whole GD publish (validation, resolution, storage) from 50 concurrent publishers, µs per message.

    .venv/bin/python bench/patterns.py [--sizes 100,1000,10000] [--rounds 5] [--publishes 5000]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import itertools  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from sqlalchemy import insert  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from runtime.db.blocking import run_transaction  # noqa: E402
from runtime.db.models import Subscription, Topic  # noqa: E402
from runtime.pubsub.statements import new_sub_key  # noqa: E402
from runtime.pubsub.topics import normalize  # noqa: E402
from runtime.testing import TestRuntime, make_settings  # noqa: E402

NAME = 'patterns'
PUBLISHERS = 50


def names(size: int) -> list[str]:
    """size topic names, 100 per region."""
    return [f'region{i // 100}.dept{i // 10 % 10}.event{i % 10}' for i in range(size)]


def patterns(topics: list[str]) -> list[str]:
    """One subscription pattern per topic, in four shapes taken in turn."""
    out = []
    for i, topic in enumerate(topics):
        region, dept, event = topic.split('.')
        out.append([topic, f'{region}.{dept}.*', f'{region}.*.{event}', f'{region}.**'][i % 4])
    return out


def populate(rt: TestRuntime, topics: list[str]) -> None:
    """Write the topics and subscriptions in one transaction, then load them as a server does."""
    now = time.time()

    def work(conn) -> None:  # type: ignore[no-untyped-def]
        conn.execute(insert(Topic), [{'name': t, 'name_key': normalize(t), 'created_at': now, 'has_gd': True,
                                      'on_no_subs': 'drop', 'origin': 'api'} for t in topics])
        conn.execute(insert(Subscription), [{'sub_key': new_sub_key(), 'pattern': p, 'kind': 'pull', 'options': '{}',
                                             'origin': 'api', 'created_at': now} for p in patterns(topics)])
    run_transaction(rt.engine, work)
    rt.broker.reload()


def measure(size: int, rounds: int, publishes: int) -> dict:
    """Resolution and publish costs at one size."""
    topics = names(size)
    with tempfile.TemporaryDirectory(prefix='conduit-bench-patterns-') as tmp:
        settings = make_settings(Path(tmp))
        settings.archive.enabled = False
        rt = TestRuntime(settings)
        rt.start(watch=False)
        try:
            populate(rt, topics)
            registry = rt.broker.registry
            assert sum(s.kind == 'pull' for s in registry.subs.values()) == size, 'every subscription loaded'
            matched = [len(registry.all_subscribers(t)) for t in topics]
            resolve_us = []
            for _ in range(rounds):
                started = time.perf_counter()
                for t in topics * max(1, 20_000 // size):
                    registry.all_subscribers(t)
                resolve_us.append((time.perf_counter() - started) / (size * max(1, 20_000 // size)) * 1e6)
            publish_us = []
            cycle = itertools.cycle(topics)
            for _ in range(rounds):
                batch = [next(cycle) for _ in range(publishes)]

                def publisher(start: int, batch: list[str] = batch) -> None:
                    for t in batch[start::PUBLISHERS]:
                        rt.broker.publish(t, {'n': 1})
                started = time.perf_counter()
                gevent.joinall([gevent.spawn(publisher, p) for p in range(PUBLISHERS)], raise_error=True)
                publish_us.append((time.perf_counter() - started) / publishes * 1e6)
        finally:
            rt.stop()
    return {'size': size, 'matched_mean': sum(matched) / len(matched), 'resolve_us': resolve_us,
            'publish_us': publish_us}


def main(argv: list[str] | None = None) -> None:
    """Measure every size; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sizes', default='100,1000,10000')
    parser.add_argument('--rounds', type=int, default=5)
    parser.add_argument('--publishes', type=int, default=5000, help='publications per round')
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    rows = []
    for size in (int(s) for s in args.sizes.split(',')):
        row = measure(size, args.rounds, args.publishes)
        rows.append(row)
        print(f"{size:,}: resolve {common.fmt_stats(row['resolve_us'], 2)} µs, "
              f"publish {common.fmt_stats(row['publish_us'], 1)} µs", flush=True)
    if not args.no_write:
        write(rows, args)


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    lines = ['## 10,000 topics and 10,000 pattern subscriptions (target: publish cost grows '
             'sub-linearly)', '',
             '| topics = subscriptions | subscriptions matched per topic (mean) | resolving subscribers, µs '
             '(min / median / max) | GD publish, µs per message (min / median / max) |', '|---|---|---|---|']
    for r in rows:
        lines.append(f"| {r['size']:,} | {r['matched_mean']:.1f} | {common.fmt_stats(r['resolve_us'], 2)} | "
                     f"{common.fmt_stats(r['publish_us'], 1)} |")
    first, last = rows[0], rows[-1]
    grow = last['size'] / first['size']
    resolve_growth = common.stats(last['resolve_us'])[1] / common.stats(first['resolve_us'])[1]
    publish_growth = common.stats(last['publish_us'])[1] / common.stats(first['publish_us'])[1]
    cmd = common.command_line('patterns.py', [f'--sizes {args.sizes}', f'--rounds {args.rounds}',
                                              f'--publishes {args.publishes}'])
    lines += ['', f'From {first["size"]:,} to {last["size"]:,} ({grow:g}× the topics and subscriptions): resolving '
              f'costs {resolve_growth:.2f}× and a publish {publish_growth:.2f}× (medians). A scan of every '
              f'subscription would cost about {grow:g}×.', '',
              f'{args.rounds} rounds per size; publishes from {PUBLISHERS} concurrent greenlets, one worker, SQLite, '
              'pull subscriptions (no delivery loops), archive off.', '', f'Command: `{cmd}`']
    met = publish_growth < grow ** 0.5 and resolve_growth < grow ** 0.5
    common.write_result(NAME, '\n'.join(lines), {
        'rows': rows, 'resolve_growth': resolve_growth, 'publish_growth': publish_growth,
        'summary': [{'figure': f'publish cost, {first["size"]:,} → {last["size"]:,} topics and pattern subscriptions',
                     'target': 'sub-linear', 'measured': f'{publish_growth:.2f}× (resolving {resolve_growth:.2f}×) '
                     f'for {grow:g}× the size', 'met': met}]})


if __name__ == '__main__':
    main()
