"""Run every benchmark and write ``bench/RESULTS.md`` (``make bench``).

Each benchmark runs in a process of its own, one after the other (never two at once: they would
measure each other), and leaves its section in ``bench/results/``. The report is then put
together: the machine, a headline table of every performance target with its figure, Conduit side
by side with Celery and Dramatiq, each benchmark's section with the command that reproduces it,
and the hand-written notes of ``bench/notes/`` (the targets as measured since, profiles, bounds, the
fault harness). Whatever is written by hand belongs in ``bench/notes/``: the report is made anew.

    .venv/bin/python bench/run.py [--only throughput,peers] [--skip spark_pipeline]

With ``--only`` or ``--skip``, the sections of the benchmarks not run are kept from their last
run (each says when it was measured).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

#: (name, script and its arguments, time limit in seconds), in the order of the report. The name is the
#: results file.
BENCHMARKS: list[tuple[str, str, int]] = [
    ('throughput', 'throughput.py', 900),
    ('instructions', 'instructions.py', 1800),
    ('workers', 'workers.py', 900),
    ('peers', 'peers.py', 1200),
    ('latency', 'latency.py', 600),
    ('invoke', 'invoke.py', 300),
    ('rest', 'rest.py', 600),
    ('slow_clients', 'slow_clients.py', 300),
    ('sign_in_flood', 'sign_in_flood.py', 400),
    ('websocket_hostile', 'websocket_hostile.py', 400),
    ('backlog', 'backlog.py', 900),
    ('patterns', 'patterns.py', 600),
    ('spark_pipeline', 'spark_pipeline.py', 600),
    ('websockets_idle', 'websockets.py --parts idle', 900),
    ('websockets_fanout', 'websockets.py --parts fanout', 900),
    ('websockets_idle_postgresql', 'websockets.py --parts idle --backends postgresql --idle-modes resume,subscribe',
     900),
    ('websockets_fanout_postgresql', 'websockets.py --parts fanout --backends postgresql', 900),
    ('file_transfer', 'file_transfer.py', 3600),
    ('dashboard', 'dashboard.py', 1800),
]

#: Notes that stand on their own, after the benchmark sections.
EXTRA_NOTES = ('fault_harness', 'architecture')
#: Notes that stand on their own right after the headline table: the targets as measured since the last
#: run of each benchmark, kept by hand, and the runs that measured them. Everything hand-written lives
#: in bench/notes, so that writing the report keeps it.
LEAD_NOTES = ('targets', 'scale_targets')

RESULTS_MD = common.REPO / 'bench' / 'RESULTS.md'
#: The machine and versions of the last run that measured something.
MACHINE_MD = common.RESULTS_DIR / 'machine.md'


def run_one(name: str, script: str, limit: int) -> tuple[bool, float, str]:
    """Run one benchmark script; returns (ok, seconds, last lines of output when it failed)."""
    print(f'== {name}: bench/{script}', flush=True)
    started = time.monotonic()
    try:
        program, *args = script.split()
        proc = subprocess.run([sys.executable, str(common.REPO / 'bench' / program), *args], cwd=common.REPO,
                              capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or '') if isinstance(e.stdout, str) else (e.stdout or b'').decode(errors='replace')
        return False, time.monotonic() - started, f'timed out after {limit} s\n{out[-2000:]}'
    elapsed = time.monotonic() - started
    sys.stdout.write(proc.stdout[-3000:])
    if proc.returncode != 0:
        return False, elapsed, (proc.stdout[-1500:] + proc.stderr[-3000:])
    return True, elapsed, ''


def _load(name: str) -> dict[str, Any] | None:
    path = common.RESULTS_DIR / f'{name}.json'
    return json.loads(path.read_text(encoding='utf-8')) if path.exists() else None


def _median(rates: list[float]) -> float:
    return common.stats(rates)[1]


#: Two benchmarks measured within this much of each other were measured in one `make bench` run.
SAME_RUN_SECS = 3 * 3600


def _measured(data: dict[str, Any]) -> datetime | None:
    text = data.get('measured_at')
    try:
        return datetime.strptime(text, '%Y-%m-%d %H:%M UTC').replace(tzinfo=UTC) if text else None
    except ValueError:
        return None


def comparison(throughput: dict[str, Any] | None, peers: dict[str, Any] | None) -> tuple[str, list[dict]]:
    """Conduit's end-to-end rate beside Celery's and Dramatiq's, per publisher concurrency."""
    if not throughput or not peers:
        return '', []
    # A benchmark run alone later (make bench BENCH_ARGS='--only throughput') leaves the other's figures
    # from an earlier run, perhaps on another day's machine: the table then says so.
    ours, theirs = _measured(throughput), _measured(peers)
    one_run = ours is not None and theirs is not None and abs((ours - theirs).total_seconds()) <= SAME_RUN_SECS
    when = '' if one_run else (f' (Conduit measured {throughput.get("measured_at", "at an unknown time")}, the '
                               f'peers {peers.get("measured_at", "at an unknown time")})')
    conduit = {(r['broker'], r['publishers']): _median(r['rates']) for r in throughput['rows']}
    # A row whose every round failed (bench/peers.py reports it) has no median: its cells stay empty.
    peer = {(r['system'], r['broker'], bool(r.get('confirms')), r['publishers']):
            (_median(r['rates']), r.get('config', '')) for r in peers['rows'] if r['rates']}
    columns = [('celery', 'rabbitmq', False, 'Celery RabbitMQ'),
               ('celery', 'rabbitmq', True, 'Celery RabbitMQ, confirms'),
               ('dramatiq', 'rabbitmq', False, 'Dramatiq RabbitMQ'),
               ('dramatiq', 'rabbitmq', True, 'Dramatiq RabbitMQ, confirms'),
               ('celery', 'redis', False, 'Celery Redis¹'), ('dramatiq', 'redis', False, 'Dramatiq Redis¹')]
    lines = ['## Side by side: durable messaging end to end, msg/s (medians)', '',
             '| publishers | Conduit SQLite | Conduit PostgreSQL | ' + ' | '.join(c[3] for c in columns) +
             ' | Conduit SQLite ÷ Celery RabbitMQ (target ≥ 3×) | Conduit SQLite ÷ Dramatiq RabbitMQ (target ≥ 1.5×) |',
             '|' + '---|' * (5 + len(columns))]
    summary = []
    for publishers in sorted({p for _, p in conduit}):
        sqlite = conduit.get(('sqlite', publishers))
        cells = [str(publishers)]
        for key in (('sqlite', publishers), ('postgresql', publishers)):
            cells.append(common.fmt(conduit[key]) if key in conduit else '—')
        for system, broker, confirms, _ in columns:
            value = peer.get((system, broker, confirms, publishers))
            cells.append(common.fmt(value[0]) if value else '—')
        for system, floor in (('celery', 3.0), ('dramatiq', 1.5)):
            # Against the peer's defaults (no confirms): its faster configuration, so the stricter test.
            value = peer.get((system, 'rabbitmq', False, publishers))
            if sqlite is None or value is None:
                cells.append('—')
                continue
            ratio = sqlite / value[0]
            cells.append(f'{ratio:.2f}×')
            summary.append({'figure': f'Conduit SQLite vs {system.title()} on RabbitMQ, {publishers} publisher(s)',
                            'target': f'≥ {floor:g}×', 'measured': f'{ratio:.2f}×{when}', 'met': ratio >= floor})
        lines.append('| ' + ' | '.join(cells) + ' |')
    configs = sorted({f'{s.title()}: {c}' for (s, _, _, _), (_, c) in peer.items() if c})
    measured = ('measured in the same `make bench` run' if one_run else
                f'**not measured in one run**{when}: the machine may have run at another speed for each')
    lines += ['', f'Same no-op handler, same message counts and publisher concurrency, {measured}; the rows come '
              'from the two sections below. "confirms": publisher confirms on, so '
              'that a send returns only once RabbitMQ has the persistent message, as a Conduit publish returns '
              'only once committed; the ratios are taken against the peers\' defaults (no confirms), their faster '
              'configuration. ¹ This machine\'s Redis keeps nothing on disk (`--save "" --appendonly no`), so '
              'the Redis figures are not durable.']
    if configs:
        lines += [''] + [f'- {c}' for c in configs]
    return '\n'.join(lines), summary


def headline(summaries: list[dict]) -> str:
    """Every performance target with its figure."""
    lines = ['## Performance targets: the last run of each benchmark', '', '| figure | target | measured | met |',
             '|---|---|---|---|']
    for s in summaries:
        met = {True: 'yes', False: '**no**', None: '—'}[s.get('met')]
        lines.append(f"| {s['figure']} | {s['target']} | {s['measured']} | {met} |")
    return '\n'.join(lines)


def _machine() -> str:
    """The machine description saved by the last run that measured something (see main)."""
    if MACHINE_MD.exists():
        return MACHINE_MD.read_text(encoding='utf-8')
    return common.machine_markdown()


def write_report(failures: dict[str, str]) -> None:
    """Put RESULTS.md together from the sections in bench/results and the notes."""
    sections, summaries = [], []
    data = {name: _load(name) for name, _, _ in BENCHMARKS}
    compare_md, compare_summary = comparison(data['throughput'], data['peers'])
    for name, script, _ in BENCHMARKS:
        section_path = common.RESULTS_DIR / f'{name}.md'
        if name in failures:
            sections.append(f'## {name}: FAILED in this run\n\n`bench/{script}` failed:\n\n```\n'
                            f'{failures[name][-1500:]}\n```')
        elif section_path.exists():
            text = section_path.read_text(encoding='utf-8').rstrip()
            measured = (data[name] or {}).get('measured_at', '')
            if measured:
                text += f'\n\nMeasured {measured}.'
            sections.append(text)
        else:
            sections.append(f'## {name}\n\nNot measured yet: run `make bench`.')
        note = common.NOTES_DIR / f'{name}.md'
        if note.exists():
            sections.append(note.read_text(encoding='utf-8').rstrip())
        if data[name] and name not in failures:
            summaries += data[name].get('summary', [])
        if name == 'throughput' and compare_md:
            summaries += compare_summary
    if compare_md:
        sections.insert(1, compare_md)
    lead_paths = (common.NOTES_DIR / f'{name}.md' for name in LEAD_NOTES)
    lead = [path.read_text(encoding='utf-8').rstrip() for path in lead_paths if path.exists()]
    for extra in EXTRA_NOTES:
        note = common.NOTES_DIR / f'{extra}.md'
        if note.exists():
            sections.append(note.read_text(encoding='utf-8').rstrip())
    today = datetime.now(UTC).strftime('%Y-%m-%d')
    report = '\n\n'.join([
        '# Benchmark results',
        f'Written by `make bench` (`bench/run.py`), last on {today}. Every figure was measured on the machine '
        'below, one benchmark at a time; figures are min / median / max over the rounds each section states, '
        'and each section ends with the command that reproduces it.',
        '## Machine\n\n' + _machine().rstrip(),
        headline(summaries),
        *lead,
        *sections,
    ])
    RESULTS_MD.write_text(report + '\n', encoding='utf-8')
    print(f'wrote {RESULTS_MD}')


def main(argv: list[str] | None = None) -> int:
    """Run the chosen benchmarks, then write the report; exit status 1 if any failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--only', default='', help='comma-separated benchmark names')
    parser.add_argument('--skip', default='', help='comma-separated benchmark names')
    parser.add_argument('--report-only', action='store_true', help='only put RESULTS.md together')
    args = parser.parse_args(argv)
    names = [n for n, _, _ in BENCHMARKS]
    only = [n for n in args.only.split(',') if n]
    skip = [n for n in args.skip.split(',') if n]
    for n in only + skip:
        if n not in names:
            parser.error(f'no benchmark {n!r}; choose from {", ".join(names)}')
    failures: dict[str, str] = {}
    if not args.report_only:
        # Saved, so that --report-only later describes the machine and versions the figures come from,
        # not whatever the venv holds then.
        MACHINE_MD.write_text(common.machine_markdown(), encoding='utf-8')
        for name, script, limit in BENCHMARKS:
            if (only and name not in only) or name in skip:
                continue
            ok, elapsed, output = run_one(name, script, limit)
            print(f'== {name}: {"ok" if ok else "FAILED"} in {elapsed:.0f} s', flush=True)
            if not ok:
                failures[name] = output
                print(output, file=sys.stderr)
    write_report(failures)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
