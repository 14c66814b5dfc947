"""Instructions per message of durable service→service messaging, counted by valgrind, not timed.

CPU time per message (``throughput.py``) moves with the machine: the same code has measured 75 and
190 µs on two days of the same kind of virtual machine. Instructions executed are what the code
asks of the processor, whatever else the machine is doing, so a change to the hot path shows in
them where timings drown it. This runs ``throughput.py`` (one worker, C concurrent publishers, the
no-op service ``bench.sink``) under callgrind twice, with N1 and N2 messages in its one round, and
reports (I(N2) - I(N1)) / (N2 - N1): start-up, imports and the warm-up cancel out. It splits them
into the hub's thread (every greenlet: publishers, delivery loops, the services) and the thread
pool's threads (SQLite statements and commits, archive writes). Only this process is counted: on
PostgreSQL the server's own work is not in the figure.

Under callgrind the process runs about 50 times slower and its threads one at a time, so the group
commit's batches differ a little from a normal run, and from one run to the next. What a worker
does by the clock, whatever it delivers (lease renewals, polls, flushes), goes on at its usual pace
meanwhile, and so counted fifty times as much per message as in a real run (an idle worker counts
16 million instructions per second under callgrind, most of them the subscription poll every 50 ms).
In the counts of 2026-11-25 and before that was 7 to 20 % of each figure, more on a slower machine:
on 2026-11-29 one commit counted 480,701 with the clock and 445,052 without it, and 526,000-575,000
against 449,000-472,000 on a machine half as fast earlier that day. So the runs are made with
``throughput.py --quiet-timers``, which puts off what can wait to once a minute, and what is left
(lease renewals and the hub's own timers, about 2 million per second) is measured in two idle runs
of the same runtime, IDLE_SECS apart, and taken away in proportion to how much longer the larger
round took than the smaller.

    .venv/bin/python bench/instructions.py [--backend sqlite] [--publishers 50] [--counts 1000,5000]
                                           [--repeats 2] [--without archive,stats,metrics --no-write]

``--without`` is throughput.py's: the same runs with those parts left out, to see what they cost.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

NAME = 'instructions'
#: callgrind's total of one output file.
_SUMMARY = re.compile(r'^summary:\s+(\d+)', re.MULTILINE)


def _thread_totals(out_dir: Path, prefix: str) -> tuple[int, int]:
    """(instructions of the main thread, of every other thread) from callgrind's per-thread files."""
    main = other = 0
    # One file per thread, numbered from 01 (the main thread); the file without a number holds nothing.
    for path in sorted(out_dir.glob(f'{prefix}-*')):
        found = _SUMMARY.search(path.read_text(encoding='utf-8', errors='replace'))
        if found is None:
            raise RuntimeError(f'{path.name}: callgrind wrote no summary')
        if path.name.endswith('-01'):
            main += int(found.group(1))
        else:
            other += int(found.group(1))
    if not main:
        raise RuntimeError(f'no callgrind output for the main thread in {out_dir}')
    return main, other


#: The two idle runs (see the module docstring), in seconds.
IDLE_SECS = (10.0, 40.0)
#: A round's rate as throughput.py prints it.
_RATE = re.compile(r'publishers=\d+: ([\d,.]+) /')


@dataclass(frozen=True)
class Count:
    """One run's instructions, by thread, and how long its round (or its idle wait) took."""

    hub: int
    threads: int
    secs: float


def count_run(backend: str, publishers: int, messages: int, out_dir: Path, without: str = '',
              idle_secs: float = 0.0) -> Count:
    """Instructions of one throughput.py run of `messages` messages, or of idle_secs idle."""
    prefix = f'cg-{backend}-{publishers}-{messages}-{idle_secs:g}.out'
    what = (['--idle', f'{idle_secs:g}'] if idle_secs else
            ['--publishers', str(publishers), '--count', str(messages), '--seq-count', str(messages), '--rounds', '1'])
    cmd = ['valgrind', '--tool=callgrind', '--separate-threads=yes', f'--callgrind-out-file={out_dir / prefix}',
           sys.executable, str(common.REPO / 'bench' / 'throughput.py'), '--backends', backend, *what,
           '--no-write', '--quiet-timers', *(['--without', without] if without else [])]
    proc = subprocess.run(cmd, cwd=common.REPO, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f'throughput.py under callgrind failed ({proc.returncode}):\n{proc.stderr[-2000:]}')
    hub, threads = _thread_totals(out_dir, prefix)
    return Count(hub, threads, idle_secs or round_secs(proc.stdout, messages))


def round_secs(stdout: str, messages: int) -> float:
    """How long the round of a throughput.py run took, from the rate it printed."""
    found = _RATE.search(stdout)
    if found is None:
        raise RuntimeError(f'throughput.py printed no rate:\n{stdout[-2000:]}')
    return messages / float(found.group(1).replace(',', ''))


def measure(backend: str, publishers: int, counts: tuple[int, int], without: str = '') -> dict[str, float]:
    """Instructions per message, whole process and by thread, from a pair of rounds and a pair of idle runs."""
    small, large = counts
    with tempfile.TemporaryDirectory(prefix='conduit-callgrind-') as tmp:
        out_dir = Path(tmp)
        # The runs are independent, and callgrind uses one core each: two at once.
        with ThreadPoolExecutor(max_workers=2) as pool:
            low, high = pool.map(lambda n: count_run(backend, publishers, n, out_dir, without), (small, large))
            idle = list(pool.map(lambda secs: count_run(backend, publishers, 0, out_dir, without, secs), IDLE_SECS))
    return per_message(low, high, large - small, clock(*idle))


def clock(short: Count, long: Count) -> tuple[float, float]:
    """Instructions per second that the clock alone costs, (hub, pool threads), from two idle runs."""
    span = long.secs - short.secs
    return max(0.0, (long.hub - short.hub) / span), max(0.0, (long.threads - short.threads) / span)


def per_message(low: Count, high: Count, span: int, per_second: tuple[float, float] = (0.0, 0.0)) -> dict[str, float]:
    """Instructions per message from two runs `span` messages apart, less what the clock cost over the longer round.

    ValueError if they make no sense.
    """
    longer = high.secs - low.secs
    hub = (high.hub - low.hub - per_second[0] * longer) / span
    threads = (high.threads - low.threads - per_second[1] * longer) / span
    if hub <= 0 or threads <= 0:
        # Start-up is not the same from run to run: with too few messages between the runs, it outweighs them.
        raise ValueError(f'the run with more messages counted no more instructions (hub {hub:,.0f}, pool threads '
                         f'{threads:,.0f} per message): make the two counts further apart, like 1000,5000')
    return {'total': hub + threads, 'hub': hub, 'threads': threads, 'clock_per_sec': sum(per_second),
            'clock_per_message': sum(per_second) * longer / span}


def main(argv: list[str] | None = None) -> None:
    """Count, print and (unless --no-write) write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--backend', default='sqlite', choices=('sqlite', 'postgresql'))
    parser.add_argument('--publishers', type=int, default=50)
    parser.add_argument('--counts', default='1000,5000', help='the two message counts, smaller first')
    parser.add_argument('--repeats', type=int, default=2)
    parser.add_argument('--without', default='', help='leave out some of archive,stats,metrics (throughput.py\'s '
                                                      'option; needs --no-write)')
    parser.add_argument('--no-write', action='store_true', help='print only; do not write bench/results')
    args = parser.parse_args(argv)
    if args.without and not args.no_write:
        parser.error('--without needs --no-write: its figures are not those of a server')
    try:
        small, large = (int(n) for n in args.counts.split(','))
    except ValueError:
        parser.error('--counts must be two whole numbers, smaller first, like 1000,5000')
    if not 0 < small < large:
        parser.error('--counts must be two whole numbers, smaller first, like 1000,5000')
    if shutil.which('valgrind') is None:
        sys.exit('valgrind is needed: apt-get install valgrind (make bench installs it)')
    rows = []
    for _ in range(args.repeats):
        try:
            row = measure(args.backend, args.publishers, (small, large), args.without)
        except ValueError as e:
            sys.exit(f'bench/instructions.py: {e}')
        rows.append(row)
        left_out = f' without {args.without}' if args.without else ''
        print(f"{args.backend}, {args.publishers} publishers{left_out}: {row['total']:,.0f} instructions per message "
              f"(hub {row['hub']:,.0f}, pool threads {row['threads']:,.0f}; the clock's "
              f"{row['clock_per_sec']:,.0f} per second, {row['clock_per_message']:,.0f} per message, taken away)",
              flush=True)
    if not args.no_write:
        write(rows, args)


def write(rows: list[dict[str, float]], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    def figures(key: str) -> str:
        return ' · '.join(f'{row[key]:,.0f}' for row in rows)

    cmd = common.command_line('instructions.py', [f'--backend {args.backend}', f'--publishers {args.publishers}',
                                                  f'--counts {args.counts}', f'--repeats {args.repeats}'])
    lines = [f'## Instructions per message, {args.backend}, {args.publishers} publishers (callgrind; no target)', '',
             '| figure | runs |', '|---|---|',
             f"| whole process | {figures('total')} |",
             f"| the hub's thread: publishers, delivery loops, services | {figures('hub')} |",
             f"| the thread pool: SQL statements and commits, archive writes | {figures('threads')} |",
             f"| taken away: what the clock cost per second of the runs (idle runs) | {figures('clock_per_sec')} |",
             '',
             'Counted by valgrind, so they do not move with the machine as CPU time does: the difference '
             f'between runs of {args.counts.replace(",", " and ")} messages, divided by the difference in '
             'messages (start-up and warm-up cancel out), less what the worker does by the clock over the '
             'longer round (lease renewals, timers; measured in two idle runs, the rest put off by '
             '`throughput.py --quiet-timers`). Only the benchmark\'s process is counted.', '',
             f'Command: `{cmd}`']
    median = sorted(row['total'] for row in rows)[len(rows) // 2]
    summary = [{'figure': f'instructions per message, {args.backend}, {args.publishers} publishers (callgrind)',
                'target': '— (CPU per message ≤ 50 µs is the target)', 'measured': f'{median:,.0f}', 'met': None}]
    common.write_result(NAME, '\n'.join(lines), {'rows': rows, 'summary': summary})


if __name__ == '__main__':
    main()
