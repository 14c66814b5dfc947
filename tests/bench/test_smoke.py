"""The benchmarks still run: each script, with tiny sizes, end to end (no figure is checked here).

`make bench` is not part of the suite (it takes half an hour and needs a quiet machine), so this
keeps the scripts from rotting between runs. Nothing is written to bench/results (``--no-write``).
The peers and REST benchmarks need what only `make bench` installs (Celery and Dramatiq, wrk);
they run here when it is installed. The scripts whose smallest run still takes the better part of a
minute (they start several servers or hold a flood for seconds) run under `make chaos` only (LONG).
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SMALL = {
    'throughput.py': ['--backends', 'sqlite', '--publishers', '1,10', '--count', '300', '--seq-count', '50',
                      '--rounds', '1'],
    'latency.py': ['--backends', 'sqlite', '--rates', '200', '--seconds', '0.5', '--warmup', '0.2', '--rounds', '1'],
    'backlog.py': ['--backlog', '3000', '--window', '1000', '--windows', '2', '--empty', '1000'],
    'patterns.py': ['--sizes', '40,400', '--rounds', '1', '--publishes', '200'],
    'invoke.py': ['--rounds', '1', '--number', '1000'],
    'slow_clients.py': ['--sockets', '50', '--seconds', '2'],
    'sign_in_flood.py': ['--clients', '4', '--seconds', '2'],
    'websocket_hostile.py': ['--sockets', '50', '--floods', '2', '--seconds', '1'],
    'websockets.py': ['--quick'],
    'file_transfer.py': ['--quick'],
    'dashboard.py': ['--quick', '--requests', '2'],
    'workers.py': ['--workers', '1,2', '--sinks', '4', '--publishers', '4', '--count', '200', '--rounds', '1'],
}


#: Scripts whose smoke run takes 35-105 s on this 2-core machine: `make chaos` runs them.
LONG = {'websockets.py', 'sign_in_flood.py', 'dashboard.py', 'websocket_hostile.py', 'workers.py', 'file_transfer.py'}


def _run(script: str, args: list[str], writes_results: bool = True) -> str:
    no_write = ['--no-write'] if writes_results else []  # a script that writes nothing has no such option
    proc = subprocess.run([sys.executable, str(REPO / 'bench' / script), *args, *no_write], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f'bench/{script} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}'
    return proc.stdout


@pytest.mark.parametrize('script', [pytest.param(s, marks=pytest.mark.chaos) if s in LONG else s
                                    for s in sorted(SMALL)])
def test_benchmark_runs(script: str) -> None:
    out = _run(script, SMALL[script])
    assert out.strip(), f'bench/{script} printed nothing'


def test_throughput_as_instructions_py_runs_it() -> None:
    # bench/instructions.py runs it under valgrind (too slow here): these are its options.
    out = _run('throughput.py', ['--backends', 'sqlite', '--publishers', '10', '--count', '300', '--rounds', '1',
                                 '--without', 'archive,stats,metrics', '--quiet-timers'])
    assert 'sqlite publishers=10' in out
    assert 'idle for 0.5 s' in _run('throughput.py', ['--backends', 'sqlite', '--idle', '0.5', '--quiet-timers'])


def test_metrics_flood_runs() -> None:
    out = _run('metrics_flood.py', ['--requests', '200', '--clients', '2'], writes_results=False)
    assert 'conduit_http_requests_total series' in out


def test_latency_profile_runs() -> None:
    out = _run('latency_profile.py', ['--backend', 'sqlite', '--rate', '200', '--seconds', '0.5', '--warmup', '0.2'],
               writes_results=False)
    assert 'commits:' in out and 'INSERT INTO conduit_message' in out


@pytest.mark.skipif(importlib.util.find_spec('celery') is None or importlib.util.find_spec('dramatiq') is None,
                    reason='Celery and Dramatiq are installed by make bench only')
def test_peers_benchmark_runs() -> None:
    out = _run('peers.py', ['--count', '200', '--seq-count', '50', '--rounds', '1', '--publishers', '1,4',
                            '--brokers', 'rabbitmq', '--confirms', ''])
    assert 'celery rabbitmq' in out and 'dramatiq rabbitmq' in out


@pytest.mark.skipif(shutil.which('wrk') is None, reason='wrk is installed by make bench only')
def test_rest_benchmark_runs() -> None:
    out = _run('rest.py', ['--seconds', '1', '--warmup', '1', '--rounds', '1'])
    assert 'conduit:' in out and 'falcon:' in out
