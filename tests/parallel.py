"""Run the whole suite as ``make test`` does: test files shared out to a few pytest processes.

Most of the suite's time is spent waiting (for a real gunicorn server to start, answer or stop, for
spark-submit, for a redelivery to come due), not computing, so a second process roughly halves the
wall time even on two cores. Each process runs one file at a time, taken from one queue, longest
first, so that a long file started last does not leave the others idle at the end (the files marked
``unit``, most of which take well under a second, run together as one); each runs under
``python -m gevent.monkey`` as a worker is patched by gunicorn. A file's output is printed whole
when it ends, so that two files' lines never interleave.

Exit status: 0 when every file passed (or had nothing to run), 1 otherwise; the summary at the end
names every failed test.

    python tests/parallel.py [--workers N] [-- extra pytest arguments]
"""

from __future__ import annotations

import argparse
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: What the unit files run as: one pytest process for all of them (UNIT says why).
UNIT = 'unit'

#: Files (and the unit batch) that take longest, started first, longest first: measured in a
#: fresh-clone run with 4 processes (the "(N s, ...)" of each file's line); the rest follow by name.
LONG_FIRST = (
    'tests/dashboard/test_core_pages.py',
    'tests/deploy/test_hot_deploy.py',
    'tests/spark/test_spark.py',
    'tests/reliability/test_websocket_faults.py',
    'tests/dashboard/test_stale_answers.py',
    UNIT,
    'tests/scheduler/test_scheduler_server.py',
    'tests/bench/test_smoke.py',
    'tests/dashboard/test_scheduler_spark.py',
    'tests/project/test_smoke.py',
    'tests/http/test_admin_writes.py',
    'tests/dashboard/test_pubsub_pages.py',
    'tests/dashboard/test_sessions_end.py',
    'tests/websocket/test_websocket.py',
    'tests/insight/test_admin_insight.py',
    'tests/channels/test_channels_http.py',
    'tests/cli/test_cli.py',
    'tests/deploy/test_hot_deploy_imports.py',
    'tests/reliability/test_db_outage.py',
    'tests/http/test_openapi_fuzz.py',
    'tests/spark/test_pipelines.py',
    'tests/objects/test_objects_config.py',
    'tests/reliability/test_kill_loop.py',
    'tests/pubsub/test_progressive_acks.py',
    'tests/pubsub/test_rest_api.py',
    'tests/dashboard/test_sign_in.py',
    'tests/reliability/test_kill_duplicates.py',
    'tests/dashboard/test_overview.py',
    'tests/pubsub/test_broker.py',
    'tests/files/test_transfer_live.py',
    'tests/cli/test_cli_admin.py',
    'tests/project/test_packaging.py',
    'tests/files/test_subscriber.py',
    'tests/reliability/test_cluster.py',
    'tests/pubsub/test_zato_compat.py',
    'tests/pubsub/test_admin_dead_letters.py',
    'tests/files/test_channels.py',
    'tests/dashboard/test_core_routes.py',
    'tests/scheduler/test_scheduler.py',
)

#: How a file declares that it is a unit file: ``pytestmark = pytest.mark.unit`` (or a list holding the
#: mark), which tests/conftest.py enforces (a unit test takes no database, server, browser or sshd).
#: The unit files run together in one pytest process: most take well under a second, and a process
#: of its own costs each about 3 s of CPU to start (pytest, the imports).
UNIT_MARK = re.compile(r'^pytestmark\s*=.*\bpytest\.mark\.unit\b', re.M)

#: pytest's exit status when a file has no test to run (e.g. everything deselected by -k).
NO_TESTS_COLLECTED = 5


def unit_files() -> list[str]:
    """The test files marked ``unit``, by path."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / 'tests').rglob('test_*.py')
                  if UNIT_MARK.search(p.read_text(encoding='utf-8')))


def suite_files(units: list[str]) -> list[str]:
    """What each pytest process runs: a file, or UNIT for all the unit files (units); the long ones first."""
    batched = set(units)
    found = sorted(str(p.relative_to(ROOT)) for p in (ROOT / 'tests').rglob('test_*.py'))
    found = ([UNIT] if units else []) + [f for f in found if f not in batched]
    first = [f for f in LONG_FIRST if f in found]
    return first + [f for f in found if f not in first]


def run_file(path: str, extra: list[str], units: list[str]) -> tuple[int, str, float, float]:
    """Run one file's tests (or, for UNIT, those of every file of units) in a pytest process of its
    own; returns its status, output, seconds and CPU seconds.

    The CPU seconds are the process's and those of every process it waited for (the servers it
    started, the browser): not the database servers'.
    """
    started = time.monotonic()
    paths = units if path == UNIT else [path]
    proc = subprocess.Popen([sys.executable, '-m', 'gevent.monkey', '--module', 'pytest', '-q', '-p',
                             'no:cacheprovider', *extra, *paths], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read()
    proc.stdout.close()
    _pid, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (proc.returncode, output.decode('utf-8', 'replace'), time.monotonic() - started,
            usage.ru_utime + usage.ru_stime)


def main(argv: list[str] | None = None) -> int:
    """Run the suite; the exit status says whether it passed."""
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--workers', type=int, default=int(os.environ.get('CONDUIT_TEST_WORKERS', '2')))
    parser.add_argument('pytest_args', nargs='*', help='passed to every pytest process (after --)')
    args = parser.parse_args(argv)
    units = unit_files()
    files = suite_files(units)
    todo: queue.Queue[str] = queue.Queue()
    for f in files:
        todo.put(f)
    failed: list[tuple[str, str]] = []
    totals = [0.0, 0.0]  # seconds, CPU seconds of all files
    lock = threading.Lock()
    started = time.monotonic()

    def worker() -> None:
        while True:
            try:
                path = todo.get_nowait()
            except queue.Empty:
                return
            status, output, secs, cpu = run_file(path, args.pytest_args, units)
            with lock:
                totals[0] += secs
                totals[1] += cpu
                print(f'===== {path} ({secs:.0f} s, CPU {cpu:.0f} s, exit {status})', flush=True)
                print(output.rstrip(), flush=True)
                if status not in (0, NO_TESTS_COLLECTED):
                    names = re.findall(r'^(?:FAILED|ERROR) (\S+)', output, re.M)
                    failed.extend((path, n) for n in names or [f'{path} (exit {status})'])

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, args.workers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(f'===== {len(files)} files and directories in {time.monotonic() - started:.0f} s '
          f'with {args.workers} processes ({totals[0]:.0f} s of file time, {totals[1]:.0f} s of CPU)', flush=True)
    if failed:
        print(f'===== {len(failed)} failed:', flush=True)
        for _path, name in failed:
            print(f'FAILED {name}', flush=True)
        return 1
    print('===== all passed', flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
