"""The traffic analytics pipeline over 1,000,000 archived messages on ``local[2]`` (target: ≤ 60 s).

The archive is written by the runtime's own archive writer (``MessageArchive``) — the same
records, partitions and files a server writes — for 10 topics × 3 subscribers over 3 days, with
97 % deliveries, 2 % failed attempts and 1 % dead letters, each with a small JSON payload. The
pipeline then runs as the runtime runs it: ``SparkSubmitter`` → spark-submit → the launcher →
``spark_pipeline/traffic_analytics.py``, with the server's default Spark settings (only the UI
off). Reported: the wall time of the whole spark-submit run (JVM start-up included) and the time
of the pipeline's ``main`` alone; the figures are checked against what was written.

    .venv/bin/python bench/spark_pipeline.py [--messages 1000000] [--master 'local[2]'] [--keep]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import common  # noqa: E402
from runtime.config import ArchiveSection  # noqa: E402
from runtime.pubsub.archive import MessageArchive  # noqa: E402
from runtime.spark.submit import SparkSubmitter, Submission  # noqa: E402

TOPICS = [f'bench.topic{n}' for n in range(10)]
SUBSCRIBERS = ('billing.sync', 'crm.sync', 'audit.log')
DAY_SECS = 86400
BATCH = 50_000


def write_archive(directory: Path, messages: int, seed: int = 6) -> Counter:
    """Write the archive; returns the count of records per (topic, outcome)."""
    rng = random.Random(seed)
    archive = MessageArchive(ArchiveSection(), directory)
    start = time.time() - 3 * DAY_SECS
    counts: Counter = Counter()
    batch = []
    for n in range(messages):
        topic = TOPICS[n % len(TOPICS)]
        sub_index = rng.randrange(len(SUBSCRIBERS))
        roll = rng.random()
        outcome = 'delivered' if roll < 0.97 else 'failed' if roll < 0.99 else 'dead_letter'
        pub_time = start + n * (3 * DAY_SECS / messages)
        latency = rng.lognormvariate(0.5, 0.8) / 1000.0
        error = None if outcome == 'delivered' else 'ValueError: bench failure'
        batch.append((outcome, sub_index + 1, 'service', SUBSCRIBERS[sub_index], f'msg.{n:024x}', topic,
                      1 if outcome == 'delivered' else 2, pub_time, 5, 40, 'bench.publisher', None,
                      'application/json', f'{{"order_id":{n},"amount":{n % 1000}.25}}', pub_time + latency,
                      latency / 2, error, 'max_attempts' if outcome == 'dead_letter' else None))
        counts[topic, outcome] += 1
        if len(batch) == BATCH:
            archive._write(batch)  # the writer's own code, called directly: no server here
            batch = []
    if batch:
        archive._write(batch)
    return counts


def main() -> None:
    """Write the archive, run the pipeline, check and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--messages', type=int, default=1_000_000)
    parser.add_argument('--master', default='local[2]')
    parser.add_argument('--rounds', type=int, default=2, help='pipeline runs over the same archive')
    parser.add_argument('--keep', action='store_true', help='keep the archive and output directory')
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix='conduit-bench-spark-'))
    try:
        started = time.perf_counter()
        counts = write_archive(work / 'archive', opts.messages)
        written = time.perf_counter() - started
        size = sum(p.stat().st_size for p in (work / 'archive').rglob('*.jsonl'))
        files = len(list((work / 'archive').rglob('*.jsonl')))
        print(f'archive: {opts.messages:,} records, {files} files, {size / 1e6:.0f} MB, written in {written:.1f} s')

        walls, mains = [], []
        for round_no in range(opts.rounds):
            output = work / f'output{round_no}'
            sub = Submission(job_id=f'bench{round_no}', pipeline='traffic_analytics',
                             argv=['--archive', str(work / 'archive'), '--output', str(output)],
                             master=opts.master, conf={'spark.ui.enabled': 'false',
                                                       'spark.ui.showConsoleProgress': 'false'},
                             pipelines_dir=REPO / 'spark_pipeline', job_dir=work / f'job{round_no}',
                             output_location=str(output), cwd=work)
            started = time.perf_counter()
            outcome = SparkSubmitter().run(sub, lambda pid: None, lambda: None)
            wall = time.perf_counter() - started
            if outcome.status != 'succeeded':
                raise SystemExit(f'pipeline {outcome.status}: {outcome.error}\nlog: {sub.log_path}')
            report = json.loads(sub.result_path.read_text())
            totals = outcome.result['topics']
            for topic in TOPICS:
                got = totals[topic]
                assert got['delivered'] == counts[topic, 'delivered'], (topic, got)
                assert got['failed_attempts'] == counts[topic, 'failed'], (topic, got)
                assert got['dead_letters'] == counts[topic, 'dead_letter'], (topic, got)
            walls.append(wall)
            mains.append(report['duration_secs'])
            print(f'spark-submit wall time: {wall:.1f} s (pipeline main: {report["duration_secs"]:.1f} s); '
                  f'figures match the {opts.messages:,} records written', flush=True)
        median = common.stats(walls)[1]
        cmd = common.command_line('spark_pipeline.py', [f'--messages {opts.messages}', f"--master '{opts.master}'",
                                                        f'--rounds {opts.rounds}'])
        section = '\n'.join([
            '## Spark analytics pipeline over 1,000,000 archived messages, `local[2]` (target: ≤ 60 s)',
            '',
            '| figure | spark-submit wall time, JVM start-up included (min / median / max) | pipeline `main` alone '
            '| target |',
            '|---|---|---|---|',
            f'| traffic analytics, {opts.messages:,} archived messages, {opts.master} | '
            f'{common.fmt_stats(walls, 1)} s | {common.fmt_stats(mains, 1)} s | ≤ 60 s |',
            '',
            f'The archive is written by the runtime\'s own `MessageArchive` ({opts.messages:,} records, {files} files, '
            f'{size / 1e6:.0f} MB of JSON Lines: 10 topics × 3 subscribers over 3 days, 97 % delivered, 2 % failed '
            'attempts, 1 % dead letters), then the pipeline runs through `SparkSubmitter` as the server runs it '
            f'(UI off), {opts.rounds} times; every per-topic count is checked against what was written.',
            '', f'Command: `{cmd}`'])
        common.write_result('spark_pipeline', section, {
            'walls': walls, 'mains': mains, 'messages': opts.messages, 'master': opts.master,
            'summary': [{'figure': f'Spark analytics pipeline, {opts.messages:,} archived messages, {opts.master}',
                         'target': '≤ 60 s', 'measured': f'{median:.1f} s (median wall time)',
                         'met': median <= 60}]})
    finally:
        if opts.keep:
            print(f'kept: {work}')
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    main()
