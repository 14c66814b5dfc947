"""File transfer: small JSON files per second, a 1 GB CSV's rows per second and the workers' peak RSS.

One Conduit server (gunicorn, ``--workers`` gevent workers, logging at WARNING) on SQLite per
measurement, fresh database each time. The channel publishes to one topic that has no
subscription, so every publication stays in the topic as one row of ``conduit_message``: the count
of those rows is the count of messages published (committed). The topic's depth limit is raised
above the run's size and read once per 1,000,000 publications (``depth_check_freq``): the default
(every 100) counts the topic's rows each time, which at millions of rows would measure that count.

- **files**: ``--files`` (10,000) small JSON files (one object of about 150 bytes each) are written
  into one local directory, then the channel is created through the admin API (format ``json``, one
  message per file, ``after: delete``, ``complete_when: stable`` over one poll, polling every
  ``--poll`` seconds). The clock starts at that request; the figure is files per second to the last
  publication, and the same from the first publication to the last (the detection delay left out:
  one poll to see the files, one more to find them stable).
- **csv**: one CSV of ``--csv-mb`` MiB (1,024) with rows of about ``--row-bytes`` bytes, one message
  per row, committed ``--batch-size`` rows at a time. Rows per second, and the peak resident set
  (``VmHWM``) of every worker process, read from /proc when the file is done, besides its RSS
  sampled every second while it runs. The target: under 200 MB.
- **sftp**: the files part with the directory on a real OpenSSH server on loopback (``tests.sshd``),
  the channel signing in with a private key given as a ``${CONDUIT_SECRET_...}`` reference and the
  host key pinned.

    .venv/bin/python bench/file_transfer.py [--parts files,csv,sftp] [--files 10000] [--csv-mb 1024]
        [--row-bytes 200] [--workers 1] [--rounds 2] [--poll 0.5] [--profile DIR] [--quick] [--no-write]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Run as bench/file_transfer.py, this file's folder comes first on sys.path: put the repository there.
sys.path[:] = [p for p in sys.path if Path(p or '.').resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

NAME = 'file_transfer'
TOPIC = 'bench.files'
CHANNEL = 'bench-files'
#: The workers' peak RSS the issue sets as the target for the large CSV.
RSS_TARGET_MB = 200
FILES_TARGET = 1000.0


# ============================================================================================ the server


def worker_pids(master: int) -> list[int]:
    """The worker processes of gunicorn's master."""
    return [int(p) for p in Path(f'/proc/{master}/task/{master}/children').read_text().split()]


def proc_status_kib(pid: int, field: str) -> int:
    """A figure of /proc/<pid>/status in KiB (VmRSS, VmHWM); 0 when the process is gone."""
    try:
        for line in Path(f'/proc/{pid}/status').read_text().splitlines():
            if line.startswith(field + ':'):
                return int(line.split()[1])
    except OSError:
        return 0
    return 0


def process_cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) of another process so far; 0 when it is gone."""
    try:
        fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


def objects_yaml(total: int) -> str:
    """The one topic every part publishes to: holds the whole run, depth read rarely."""
    depth = max(2 * total, 100_000)
    return (f'pubsub_topic:\n  - name: {TOPIC}\n    has_gd: true\n    max_depth_gd: {depth}\n'
            f'    on_max_depth: reject\n    depth_check_freq: 1000000\n')


class Server:
    """A Conduit server on a fresh SQLite database: its workers, its admin API, what it published."""

    #: The server's log level (--log-level): WARNING for the figures, INFO to see each file's time.
    log_level = 'WARNING'
    #: Where each server's log is copied when it stops (--keep), or None.
    keep: Path | None = None

    def __init__(self, base: Path, workers: int, env: dict[str, str], total: int) -> None:
        from tests.live_server import LiveServer
        self.db_path = base / 'conduit.db'
        self.live = LiveServer(base / 'server', f'sqlite:///{self.db_path}', workers=workers, env=env,
                               extra_config=f'[logging]\nlevel = "{self.log_level}"\n')
        self.live.write_objects('bench.yaml', objects_yaml(total))
        self._engine: Any = None

    def start(self) -> Server:
        from tests.live_server import poll
        self.live.start(60)

        def topic_loaded() -> bool:
            r = self.live.request('GET', f'/admin/topics/{TOPIC}', auth=self.live.admin)
            return r.status_code == 200
        poll(topic_loaded, 30, interval=0.1, message='the bench topic loaded')
        return self

    def workers(self) -> list[int]:
        assert self.live.proc is not None
        return worker_pids(self.live.proc.pid)

    def engine(self) -> Any:
        if self._engine is None:
            from runtime.db.engine import make_engine
            self._engine = make_engine(f'sqlite:///{self.db_path}', pool_size=1)
        return self._engine

    def published(self) -> int:
        """Messages stored in the topic so far."""
        from sqlalchemy import text
        with self.engine().connect() as conn:
            return conn.execute(text('SELECT count(*) FROM conduit_message WHERE topic_name = :t'),
                                {'t': TOPIC}).scalar_one()

    def run_progress(self) -> tuple[int, int, str]:
        """(runs, records published by them, states) of the channel: cheap, for watching a large file."""
        from sqlalchemy import text
        with self.engine().connect() as conn:
            rows = conn.execute(text('SELECT state, published FROM conduit_file_run WHERE channel = :c'),
                                {'c': CHANNEL}).all()
        return len(rows), sum(r.published or 0 for r in rows), ','.join(sorted({r.state for r in rows}))

    def create_channel(self, definition: dict[str, Any]) -> float:
        """Create the channel through the admin API; returns the time the request was sent."""
        sent = time.monotonic()
        r = self.live.request('POST', '/admin/file-channels', json={'name': CHANNEL, **definition},
                              auth=self.live.admin, timeout=30)
        if r.status_code not in (200, 201):
            raise RuntimeError(f'creating the channel answered {r.status_code}: {r.text}')
        return sent

    def check_alive(self) -> None:
        if self.live.proc is None or self.live.proc.poll() is not None:
            raise RuntimeError(f'the server exited:\n{self.live.log()[-3000:]}')

    def errors(self) -> list[str]:
        """Lines of the server's log at ERROR or worse (it logs at WARNING: nothing else is expected)."""
        return [line for line in self.live.log().splitlines()
                if ' ERROR ' in line or ' CRITICAL ' in line or line.startswith('Traceback')]

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
        self.live.stop(30)
        if self.keep is not None:
            self.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(self.live.log_path, self.keep / f'{self.live.base.parent.name}.log')


@contextlib.contextmanager
def server(tmp: Path, label: str, workers: int, total: int, env: dict[str, str] | None = None) -> Iterator[Server]:
    """A fresh server on a fresh database, stopped afterwards."""
    base = tmp / label
    base.mkdir(exist_ok=True)
    srv = Server(base, workers, env or {}, total)
    try:
        yield srv.start()
    finally:
        srv.stop()


class Profiler:
    """py-spy recording the server's workers (every thread, idle frames left out) while a part runs."""

    def __init__(self, pids: list[int], out_dir: Path, label: str) -> None:
        py_spy = shutil.which('py-spy') or str(Path(sys.executable).parent / 'py-spy')
        out_dir.mkdir(parents=True, exist_ok=True)
        self.outs = [out_dir / f'{label}-{pid}.txt' for pid in pids]
        self.procs = [subprocess.Popen([py_spy, 'record', '--pid', str(pid), '--rate', '100', '--format', 'raw',
                                        '--output', str(out), '--nonblocking'],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                      for pid, out in zip(pids, self.outs, strict=True)]

    def finish(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for out in self.outs:
            if out.exists():
                print(common.summarize_profile(out), flush=True)




# ============================================================================================ the parts


def write_small_files(directory: Path, count: int) -> int:
    """count small JSON files (about 150 bytes each); returns their total size."""
    directory.mkdir(parents=True, exist_ok=True)
    total = 0
    for n in range(count):
        body = json.dumps({'id': n, 'customer': f'customer-{n % 997}', 'amount': round(n * 1.07, 2),
                           'currency': 'EUR', 'note': 'bench file ' + 'x' * 48}).encode()
        (directory / f'order-{n:06d}.json').write_bytes(body)
        total += len(body)
    return total


def write_csv(path: Path, megabytes: float, row_bytes: int) -> tuple[int, int]:
    """A CSV of about megabytes MiB with rows of about row_bytes bytes; returns (rows, bytes)."""
    target = int(megabytes * 1024 * 1024)
    header = 'id,customer,invoice_date,due_date,amount,currency,status,description\n'
    # The description pads each row to about row_bytes.
    sample = f'{10**7},customer-00000,2024-01-01,2024-02-01,12345.67,EUR,open,'
    pad = 'd' * max(1, row_bytes - len(sample) - 1)
    rows = 0
    written = 0
    with open(path, 'w', encoding='utf-8', newline='') as f:
        f.write(header)
        written += len(header)
        chunk: list[str] = []
        while written < target:
            for n in range(rows, rows + max(1, min(10_000, (target - written) // row_bytes + 1))):
                chunk.append(f'{n},customer-{n % 99991:05d},2024-{n % 12 + 1:02d}-{n % 28 + 1:02d},'
                             f'2024-{(n + 1) % 12 + 1:02d}-01,{n % 100000}.{n % 100:02d},EUR,open,{pad}\n')
            text = ''.join(chunk)
            f.write(text)
            written += len(text.encode())
            rows += len(chunk)
            chunk.clear()
    return rows, written


def channel_values(directory: str, fmt: str, args: argparse.Namespace, **more: Any) -> dict[str, Any]:
    """The channel's definition, as the admin API takes it."""
    return {'directory': directory, 'patterns': ['*.json' if fmt == 'json' else '*.csv'],
            'poll_interval_secs': args.poll, 'complete_when': 'stable', 'stable_polls': 1, 'format': fmt,
            'topics': [TOPIC], 'after': 'delete', **more}


def wait_published(srv: Server, total: int, timeout: float,
                   interval: float) -> tuple[float | None, float | None, int]:
    """Watch the topic until total messages are in it: (first seen, last seen, count) in monotonic time."""
    first = None
    deadline = time.monotonic() + timeout
    count = 0
    while time.monotonic() < deadline:
        srv.check_alive()
        count = srv.published()
        now = time.monotonic()
        if count and first is None:
            first = now
        if count >= total:
            return first, now, srv.published()
        time.sleep(interval)
    return first, None, srv.published()


def files_round(kind: str, args: argparse.Namespace, tmp: Path, label: str, sshd: Any = None) -> dict[str, Any]:
    """One measurement of the small-files part, local or over SFTP."""
    env: dict[str, str] = {}
    extra: dict[str, Any] = {'max_parallel_files': args.parallel} if args.parallel else {}
    if kind == 'sftp':
        directory = sshd.root / label
        env.update(sshd.secret_env)
        extra.update({'sftp_host': sshd.host, 'sftp_port': sshd.port, 'sftp_username': sshd.username,
                      'sftp_private_key': sshd.key_reference, 'sftp_host_key': sshd.host_key_line})
        channel_dir = str(directory)
    else:
        directory = tmp / label / 'in'
        channel_dir = str(directory)
    size = write_small_files(directory, args.files)
    with server(tmp, label, args.workers, args.files, env) as srv:
        workers = srv.workers()
        cpu_before = sum(process_cpu_seconds(pid) for pid in workers)
        profiler = Profiler(workers, Path(args.profile), label) if args.profile else None
        started = srv.create_channel(channel_values(channel_dir, 'json', args, **extra))
        first, last, count = wait_published(srv, args.files, args.timeout, 0.05)
        cpu = sum(process_cpu_seconds(pid) for pid in workers) - cpu_before
        if profiler:
            profiler.finish()
        left = len(list(directory.iterdir()))
        errors = srv.errors()
    if last is None:
        raise RuntimeError(f'{label}: {count} of {args.files} files published within {args.timeout:g} s')
    row = {'kind': kind, 'files': args.files, 'bytes': size, 'published': count, 'left_in_dir': left,
           'seconds': last - started, 'first_after': (first or last) - started,
           'files_per_sec': args.files / (last - started),
           'steady_files_per_sec': (args.files - 1) / (last - first) if first and last > first else None,
           'worker_cpu_secs': cpu, 'cpu_us_per_file': cpu / args.files * 1e6,
           'worker_cpu_share': cpu / (last - started) / len(workers), 'errors': errors[:5]}
    print(f"{label}: {args.files} files in {row['seconds']:.2f} s = {row['files_per_sec']:,.0f} files/s "
          f"(first after {row['first_after']:.2f} s; {left} left in the directory); workers' CPU "
          f"{row['cpu_us_per_file']:,.0f} µs per file, {row['worker_cpu_share'] * 100:.0f} % of a core each",
          flush=True)
    return row


def csv_round(args: argparse.Namespace, tmp: Path, label: str) -> dict[str, Any]:
    """The large CSV: rows per second and the workers' peak RSS."""
    directory = tmp / label / 'in'
    directory.mkdir(parents=True)
    path = directory / 'invoices.csv'
    t0 = time.monotonic()
    rows, size = write_csv(path, args.csv_mb, args.row_bytes)
    print(f'{label}: wrote {rows:,} rows, {size / 2**20:,.0f} MiB in {time.monotonic() - t0:.1f} s', flush=True)
    extra = {'batch_size': args.batch_size} if args.batch_size else {}
    with server(tmp, label, args.workers, rows) as srv:
        workers = srv.workers()
        before = {pid: proc_status_kib(pid, 'VmRSS') for pid in workers}
        cpu_before = sum(process_cpu_seconds(pid) for pid in workers)
        profiler = Profiler(workers, Path(args.profile), label) if args.profile else None
        started = srv.create_channel(channel_values(str(directory), 'csv', args, **extra))
        first = last = None
        samples: list[float] = []
        deadline = time.monotonic() + args.timeout
        done = 0
        while time.monotonic() < deadline:
            srv.check_alive()
            samples.append(max(proc_status_kib(pid, 'VmRSS') for pid in workers) / 1024)
            _, done, states = srv.run_progress()
            now = time.monotonic()
            if done and first is None:
                first = now
            if done >= rows and 'running' not in states:
                last = now
                break
            time.sleep(1.0)
        if profiler:
            profiler.finish()
        hwm = {pid: proc_status_kib(pid, 'VmHWM') / 1024 for pid in workers}
        cpu = sum(process_cpu_seconds(pid) for pid in workers) - cpu_before
        count = srv.published()
        errors = srv.errors()
    if last is None:
        raise RuntimeError(f'{label}: {done:,} of {rows:,} rows published within {args.timeout:g} s')
    row = {'rows': rows, 'bytes': size, 'published': count, 'seconds': last - started,
           'first_after': (first or last) - started, 'rows_per_sec': rows / (last - started),
           'mib_per_sec': size / 2**20 / (last - started), 'rss_before_mib': max(before.values()) / 1024,
           'rss_max_sampled_mib': max(samples), 'peak_rss_mib': max(hwm.values()), 'workers': len(workers),
           'worker_cpu_secs': cpu, 'cpu_us_per_row': cpu / rows * 1e6, 'errors': errors[:5]}
    print(f"{label}: {rows:,} rows in {row['seconds']:.1f} s = {row['rows_per_sec']:,.0f} rows/s; "
          f"worker peak RSS {row['peak_rss_mib']:.0f} MiB (before {row['rss_before_mib']:.0f} MiB); workers' CPU "
          f"{row['cpu_us_per_row']:,.0f} µs per row", flush=True)
    return row


# ============================================================================================ main


def main(argv: list[str] | None = None) -> None:
    """Run the chosen parts; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--parts', default='files,csv,sftp')
    parser.add_argument('--files', type=int, default=10_000, help='small JSON files of the files and sftp parts')
    parser.add_argument('--csv-mb', type=float, default=1024.0, help='size of the CSV in MiB')
    parser.add_argument('--row-bytes', type=int, default=200, help='bytes per CSV row, about')
    parser.add_argument('--batch-size', type=int, default=0, help="the channel's batch_size (0: its default)")
    parser.add_argument('--parallel', type=int, default=0, help="the channel's max_parallel_files (0: its default)")
    parser.add_argument('--workers', type=int, default=1, help='gunicorn workers of the server')
    parser.add_argument('--poll', type=float, default=0.5, help="the channel's poll interval in seconds")
    parser.add_argument('--rounds', type=int, default=2, help='rounds of the files and sftp parts (csv: one)')
    parser.add_argument('--timeout', type=float, default=3600.0, help='seconds a part may take')
    parser.add_argument('--profile', default='', help='record the workers with py-spy into this folder')
    parser.add_argument('--log-level', default='WARNING', help="the server's log level")
    parser.add_argument('--keep', default='', help='copy each server log into this folder')
    parser.add_argument('--quick', action='store_true', help='a smoke run: tiny sizes')
    parser.add_argument('--no-write', action='store_true')
    parser.add_argument('--report-only', action='store_true',
                        help="rewrite the section from the last run's raw figures (bench/results/file_transfer.json)")
    args = parser.parse_args(argv)
    if args.report_only:
        saved = json.loads((common.RESULTS_DIR / f'{NAME}.json').read_text(encoding='utf-8'))
        args = argparse.Namespace(**{**vars(args), **saved['args']})
        write({k: saved[k] for k in ('files', 'csv', 'sftp')}, saved['load'], args, saved.get('commit', ''),
              saved.get('machine', ''), measured_at=saved.get('measured_at'))
        return
    if args.quick:
        args.files, args.csv_mb, args.rounds, args.timeout, args.poll = 50, 1.0, 1, 120.0, 0.1
    Server.log_level = args.log_level
    Server.keep = Path(args.keep) if args.keep else None
    parts = [p for p in args.parts.split(',') if p]
    for p in parts:
        if p not in ('files', 'csv', 'sftp'):
            parser.error(f'no part {p!r}; choose from files, csv, sftp')
    rows: dict[str, list[dict[str, Any]]] = {'files': [], 'csv': [], 'sftp': []}
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix='conduit-bench-ft-') as name:
        tmp = Path(name)
        if 'files' in parts:
            for r in range(args.rounds):
                rows['files'].append({'round': r + 1, **files_round('local', args, tmp, f'files-r{r + 1}')})
                load.append(os.getloadavg())
        if 'csv' in parts:
            rows['csv'].append({'round': 1, **csv_round(args, tmp, 'csv-r1')})
            load.append(os.getloadavg())
        if 'sftp' in parts:
            from tests.sshd import SshServer
            sshd = SshServer(tmp)
            sshd.start()
            try:
                for r in range(args.rounds):
                    rows['sftp'].append({'round': r + 1, **files_round('sftp', args, tmp, f'sftp-r{r + 1}', sshd)})
                    load.append(os.getloadavg())
            finally:
                sshd.stop()
    if not args.no_write:
        write(rows, load, args, commit_measured(), common.machine_markdown())


# ============================================================================================ the report


def commit_measured() -> str:
    """The commit of the code measured, with '+changes' when the work tree differs from it."""
    def git(*args: str) -> str:
        try:
            return subprocess.run(['git', *args], cwd=common.REPO, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return ''
    commit = git('rev-parse', '--short', 'HEAD') or 'unknown'
    dirty = git('status', '--porcelain', '--untracked-files=no', '--', 'runtime', 'bench', 'tests')
    return commit + (' +changes' if dirty else '')


def _stats(rows: list[dict[str, Any]], key: str, digits: int | None = None) -> str:
    values = [r[key] for r in rows if r.get(key) is not None]
    return common.fmt_stats(values, digits) if values else '—'


def write(rows: dict[str, list[dict[str, Any]]], load: list[tuple[float, ...]], args: argparse.Namespace,
          commit: str, machine: str, measured_at: str | None = None) -> None:
    """The results section and the raw figures."""
    lines = ['## File transfer', '',
             f'One server, {args.workers} gevent worker(s), SQLite, logging at WARNING; a fresh server and database '
             'per round. Published = committed to a topic with no subscription (stored in the topic).', '']
    summary: list[dict[str, Any]] = []
    files = [(kind, rows[kind]) for kind in ('files', 'sftp') if rows[kind]]
    if files:
        lines += ['| directory | files | files/s to the last publication | files/s, first to last publication '
                  '| first publication after (s) | seconds | workers\' CPU per file (µs) | worker busy (% of a core) |',
                  '|---|---|---|---|---|---|---|---|']
        for kind, rs in files:
            where = 'local' if kind == 'files' else 'SFTP, loopback'
            busy = [{'pct': r['worker_cpu_share'] * 100} for r in rs]
            lines.append(f"| {where} | {rs[0]['files']:,} | {_stats(rs, 'files_per_sec')} | "
                         f"{_stats(rs, 'steady_files_per_sec')} | {_stats(rs, 'first_after', 2)} | "
                         f"{_stats(rs, 'seconds', 1)} | {_stats(rs, 'cpu_us_per_file')} | {_stats(busy, 'pct')} |")
            median = common.stats([r['files_per_sec'] for r in rs])[1]
            place = 'in a local directory' if kind == 'files' else 'over SFTP (loopback)'
            summary.append({'figure': f'10,000 small JSON files {place}, files/s to published (SQLite)'
                            if rs[0]['files'] == 10_000 else f"{rs[0]['files']:,} small JSON files {place} (SQLite)",
                            'target': f'≥ {FILES_TARGET:,.0f} files/s' if kind == 'files' else '—',
                            'measured': f'{common.fmt(median)} files/s (median of {len(rs)})',
                            'met': median >= FILES_TARGET if kind == 'files' else None})
        lines += ['', f'min / median / max over {args.rounds} round(s). The clock starts when the channel is created '
                  f'(admin API) with the files already there; it polls every {args.poll:g} s and takes a file once '
                  'it is unchanged over one poll, so the first publication comes one to two polls later.', '']
    if rows['csv']:
        r = rows['csv'][0]
        lines += ['| CSV | rows | rows/s | MiB/s | seconds | workers\' CPU per row (µs) | worker RSS before '
                  '| worker peak RSS (VmHWM) | max sampled RSS |', '|---|---|---|---|---|---|---|---|---|',
                  f"| {r['bytes'] / 2**20:,.0f} MiB, ~{args.row_bytes} bytes a row | {r['rows']:,} | "
                  f"{common.fmt(r['rows_per_sec'])} | {r['mib_per_sec']:.1f} | {r['seconds']:,.0f} | "
                  f"{r['cpu_us_per_row']:.0f} | {r['rss_before_mib']:.0f} MiB | {r['peak_rss_mib']:.0f} MiB "
                  f"({r['peak_rss_mib'] * 1.048576:.0f} MB) | {r['rss_max_sampled_mib']:.0f} MiB |", '']
        summary.append({'figure': f"one {r['bytes'] / 2**20:,.0f} MiB CSV, rows/s to published (SQLite)",
                        'target': '—', 'measured': f"{common.fmt(r['rows_per_sec'])} rows/s", 'met': None})
        summary.append({'figure': f"one {r['bytes'] / 2**20:,.0f} MiB CSV, peak RSS of the worker",
                        'target': f'< {RSS_TARGET_MB} MB',
                        'measured': f"{r['peak_rss_mib'] * 1.048576:.0f} MB ({r['peak_rss_mib']:.0f} MiB)",
                        'met': r['peak_rss_mib'] * 1.048576 < RSS_TARGET_MB})
    loads = ', '.join(f'{a:.2f}' for a, _, _ in load)
    lines += [f'Load average (1 min) at the start and after each measurement: {loads} ({os.cpu_count()} CPUs).', '']
    options = [f'--parts {args.parts}', f'--files {args.files}', f'--csv-mb {args.csv_mb:g}',
               f'--row-bytes {args.row_bytes}', f'--workers {args.workers}', f'--poll {args.poll:g}',
               f'--rounds {args.rounds}']
    if args.batch_size:
        options.append(f'--batch-size {args.batch_size}')
    if args.parallel:
        options.append(f'--parallel {args.parallel}')
    lines.append(f"Command: `{common.command_line('file_transfer.py', options)}`")
    lines += ['', f'Code measured: commit {commit or "unknown"}. Machine:', '', machine.rstrip()]
    saved = {k: v for k, v in vars(args).items() if k not in ('no_write', 'quick', 'profile', 'report_only', 'keep',
                                                              'log_level')}
    data = {**rows, 'load': load, 'summary': summary, 'args': saved, 'commit': commit, 'machine': machine}
    if measured_at:  # the section rewritten from saved figures: they were measured then, not now
        data['measured_at'] = measured_at
    common.write_result(NAME, '\n'.join(lines), data)


if __name__ == '__main__':
    main()
