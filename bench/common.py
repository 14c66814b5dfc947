"""What every benchmark shares: statistics, result files, machine facts, throw-away databases.

Each benchmark script measures one figure family and calls ``write_result(name, section_md, data)``:
``bench/results/<name>.md`` holds its section of ``bench/RESULTS.md`` (a heading, a table with
min / median / max over the rounds, the command that reproduces it) and ``<name>.json`` the raw
numbers. ``bench/run.py`` runs every script in its own process and puts the sections together
under a description of the machine (``machine_markdown``). Hand-written analysis (profiles, why a
target is out of reach) lives in ``bench/notes/<name>.md`` and is appended after the section.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

#: The repository root (bench/ is one level down).
REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / 'bench' / 'results'
NOTES_DIR = REPO / 'bench' / 'notes'

#: The machine's PostgreSQL (trust auth); every benchmark run gets a database of its own from it.
PG_ADMIN_URL = os.environ.get('CONDUIT_BENCH_PG_URL', 'postgresql://127.0.0.1:5432/test')
RABBITMQ_URL = os.environ.get('CONDUIT_BENCH_AMQP_URL', 'amqp://guest:guest@127.0.0.1:5672//')
REDIS_URL = os.environ.get('CONDUIT_BENCH_REDIS_URL', 'redis://127.0.0.1:6379/0')

#: Packages whose versions the results name.
VERSIONED = ('gevent', 'greenlet', 'gunicorn', 'falcon', 'SQLAlchemy', 'psycopg', 'celery', 'kombu',
             'dramatiq', 'pika', 'redis')


def stats(values: Sequence[float]) -> tuple[float, float, float]:
    """min, median, max."""
    return min(values), statistics.median(values), max(values)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """The p-th percentile (0-100) of already sorted values, nearest-rank."""
    if not sorted_values:
        raise ValueError('no values')
    rank = max(1, min(len(sorted_values), round(p / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def percentiles_failed_last(samples: Sequence[float | None]) -> tuple[float | None, float | None]:
    """p50 and p99 of latencies where None is a failure, ranked slower than any answer (None if it lands there)."""
    ranked = sorted(float('inf') if v is None else v for v in samples)
    if not ranked:
        return None, None
    p50, p99 = percentile(ranked, 50), percentile(ranked, 99)
    return (None if p50 == float('inf') else p50), (None if p99 == float('inf') else p99)


def fmt_ms(value: float | None, missing: str = 'failed') -> str:
    """Milliseconds with one decimal, or missing for no figure."""
    return missing if value is None else fmt(value, 1)


def status_code(head: bytes) -> str | None:
    """The status code at the start of an HTTP answer ('408'), or None if the bytes are not one."""
    parts = head.split(b'\r\n', 1)[0].split()
    if len(parts) >= 2 and parts[0].startswith(b'HTTP/') and parts[1].isdigit():
        return parts[1].decode()
    return None


def cpu_seconds() -> float:
    """CPU time (user + system) of this process so far."""
    t = os.times()
    return t.user + t.system


def fmt(value: float, digits: int | None = None) -> str:
    """A figure for a table: thousands separated, sensible precision."""
    if digits is None:
        digits = 0 if abs(value) >= 100 else 1 if abs(value) >= 10 else 2 if abs(value) >= 1 else 3
    return f'{value:,.{digits}f}'


def fmt_stats(values: Sequence[float], digits: int | None = None) -> str:
    """'min / median / max' of values."""
    return ' / '.join(fmt(v, digits) for v in stats(values))


def command_line(script: str, args: Sequence[str] = ()) -> str:
    """The command that reproduces a figure, as the results print it."""
    return ' '.join(['.venv/bin/python', f'bench/{script}', *args]).strip()


def write_result(name: str, section_md: str, data: dict[str, Any]) -> Path:
    """Store a benchmark's section of RESULTS.md and its raw figures; returns the section's path."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    data = {'measured_at': datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC'), **data}
    path = RESULTS_DIR / f'{name}.md'
    path.write_text(section_md.rstrip() + '\n', encoding='utf-8')
    (RESULTS_DIR / f'{name}.json').write_text(json.dumps(data, indent=1, sort_keys=True) + '\n', encoding='utf-8')
    print(section_md)
    return path


def version(package: str) -> str:
    """Installed version of a distribution, or 'not installed'."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return 'not installed'


def _first_line(cmd: list[str]) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return 'not found'
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else 'not found'


def machine_markdown() -> str:
    """The machine and software the figures were measured on."""
    cpu = 'unknown CPU'
    with contextlib.suppress(OSError):
        for line in Path('/proc/cpuinfo').read_text().splitlines():
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    mem_gib = 0.0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kib = int(Path('/proc/meminfo').read_text().split('\n')[0].split()[1])
        mem_gib = mem_kib / 1024 / 1024
    disk = _first_line(['sh', '-c', f"df -h {REPO} | tail -1 | awk '{{print $1\" (\"$2\")\"}}'"])
    versions = ', '.join(f'{p} {version(p)}' for p in VERSIONED)
    servers = '; '.join([
        'PostgreSQL ' + _first_line(['sh', '-c', 'psql -V | cut -d" " -f3']),
        'Redis ' + _first_line(['sh', '-c', "redis-server --version | sed 's/.*v=\\([^ ]*\\).*/\\1/'"]),
        'RabbitMQ ' + _first_line(['sh', '-c', "rabbitmqctl version 2>/dev/null || echo unknown"]),
        'wrk ' + _first_line(['sh', '-c', "command -v wrk >/dev/null && wrk -v 2>&1 | head -1 | cut -d' ' -f2 "
                                            "|| echo 'not installed'"]),
    ])
    return (f'- CPU: {os.cpu_count()} × {cpu}; memory {mem_gib:.0f} GiB; disk {disk}; '
            f'{platform.system()} {platform.release()}\n'
            f'- Python {platform.python_version()} ({sys.implementation.name}); {versions}\n'
            f'- Servers: {servers}\n')


@contextlib.contextmanager
def pg_database(prefix: str = 'conduit_bench') -> Iterator[str]:
    """A new, empty PostgreSQL database for one run, dropped afterwards; yields its URL."""
    import psycopg
    from psycopg import sql
    name = f'{prefix}_{uuid.uuid4().hex[:10]}'
    with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql.SQL('CREATE DATABASE {}').format(sql.Identifier(name)))
    try:
        yield PG_ADMIN_URL.rsplit('/', 1)[0] + '/' + name
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute(sql.SQL('DROP DATABASE IF EXISTS {} WITH (FORCE)').format(sql.Identifier(name)))


@contextlib.contextmanager
def database(backend: str, tmp: Path) -> Iterator[str]:
    """The URL of an empty database for one run: a file in tmp for 'sqlite', else a new PostgreSQL database."""
    if backend == 'sqlite':
        yield f'sqlite:///{tmp / "conduit.db"}'
    else:
        with pg_database() as url:
            yield url


def rss_mib(pid: int | None = None) -> float:
    """Resident set size of a process (this one by default), in MiB."""
    status = Path(f'/proc/{pid or os.getpid()}/status').read_text()
    for line in status.splitlines():
        if line.startswith('VmRSS:'):
            return int(line.split()[1]) / 1024
    raise RuntimeError('no VmRSS in /proc status')


def summarize_profile(path: Path, top: int = 25) -> str:
    """The functions with the most samples (inclusive and self) in a py-spy raw (collapsed) profile."""
    inclusive: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(' ')
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [f.strip() for f in stack.split(';')]
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    lines = [f'profile {path.name}: {total} samples']
    lines += [f'  incl {c / max(total, 1) * 100:5.1f} %  {f}' for f, c in inclusive.most_common(top)]
    lines += [f'  self {c / max(total, 1) * 100:5.1f} %  {f}' for f, c in own.most_common(top)]
    return '\n'.join(lines)
