"""A REST channel against a bare falcon app under the same gunicorn gevent worker.

Both servers run one gunicorn gevent worker on a loopback port: Conduit (SQLite, logging at
WARNING) serving a channel with Basic Auth to a trivial JSON service (``bench/rest_fixture/``),
and a bare falcon app answering the same JSON body back (``bench/bare_falcon_app.py``). The load
comes from wrk in a separate process: POST of the same small JSON body, 20 connections, 2
threads, a warm-up and then several timed rounds, alternating between the two servers so that
drift on the machine affects both. Every response must be a 200.

    .venv/bin/python bench/rest.py [--seconds 10] [--warmup 2] [--rounds 3] [--connections 20]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from tests.live_server import LiveServer, free_port, poll  # noqa: E402

NAME = 'rest'
BODY = '{"customer_id": 12345, "name": "Jane Doe", "email": "jane@example.com"}'
USER, PASSWORD = 'bench', 'bench-password'
FIXTURE = common.REPO / 'bench' / 'rest_fixture'


def _lua(path: Path, auth: bool) -> Path:
    headers = ['wrk.headers["Content-Type"] = "application/json"']
    if auth:
        token = base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode()
        headers.append(f'wrk.headers["Authorization"] = "Basic {token}"')
    path.write_text('\n'.join(['wrk.method = "POST"', f"wrk.body = '{BODY}'", *headers]) + '\n')
    return path


@contextlib.contextmanager
def falcon_server(tmp: Path) -> Iterator[str]:
    """The bare falcon app under gunicorn, one gevent worker; yields its URL."""
    port = free_port()
    log = open(tmp / 'falcon.log', 'ab')
    proc = subprocess.Popen([str(Path(sys.executable).parent / 'gunicorn'), '-k', 'gevent', '-w', '1',
                             '-b', f'127.0.0.1:{port}', '--log-level', 'warning', 'bench.bare_falcon_app:app'],
                            cwd=common.REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f'http://127.0.0.1:{port}'
    try:
        import requests
        poll(lambda: _answers(requests, url + '/api/echo', None), 30, message='falcon app answers')
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def _answers(requests, url: str, auth: tuple[str, str] | None) -> bool:  # type: ignore[no-untyped-def]
    try:
        r = requests.post(url, data=BODY, headers={'Content-Type': 'application/json'}, auth=auth, timeout=2)
    except requests.RequestException:
        return False
    return r.status_code == 200 and r.json() == {'customer_id': 12345, 'name': 'Jane Doe',
                                                 'email': 'jane@example.com'}


@contextlib.contextmanager
def conduit_server(tmp: Path) -> Iterator[str]:
    """Conduit with the echo channel, one gevent worker, SQLite; yields its URL."""
    server = LiveServer(tmp / 'conduit', f'sqlite:///{tmp / "conduit" / "var" / "conduit.db"}', workers=1,
                        extra_config='[logging]\nlevel = "WARNING"\n')
    shutil.copy(FIXTURE / 'echo_service.py', server.hot_deploy / 'echo_service.py')
    shutil.copy(FIXTURE / 'objects.yaml', server.objects / 'bench.yaml')
    server.start()
    try:
        import requests
        poll(lambda: _answers(requests, server.url + '/api/echo', (USER, PASSWORD)), 30,
             message='the Conduit channel answers')
        yield server.url
    finally:
        server.stop()


def wrk(url: str, script: Path, seconds: float, connections: int) -> dict:
    """One wrk run: requests/s and latency percentiles (ms); fails on any non-2xx answer or socket error."""
    # wrk takes whole seconds.
    out = subprocess.run(['wrk', '-t', '2', '-c', str(connections), '-d', f'{max(1, round(seconds))}s', '--latency',
                          '-s', str(script), url + '/api/echo'], capture_output=True, text=True, check=True,
                         timeout=seconds + 60).stdout
    if 'Non-2xx' in out or 'Socket errors' in out:
        raise RuntimeError(f'wrk saw failed requests against {url}:\n{out}')
    rate = float(re.search(r'Requests/sec:\s+([\d.]+)', out).group(1))  # type: ignore[union-attr]

    def pct(p: str) -> float:
        value, unit = re.search(rf'^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$', out, re.M).groups()  # type: ignore[union-attr]
        return float(value) * {'us': 0.001, 'ms': 1.0, 's': 1000.0}[unit]
    return {'rps': rate, 'p50': pct('50'), 'p99': pct('99')}


def main(argv: list[str] | None = None) -> None:
    """Alternate wrk rounds against both servers; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--warmup', type=float, default=2.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--connections', type=int, default=20)
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    if shutil.which('wrk') is None:
        raise SystemExit('wrk is not installed: apt-get install wrk (make bench does)')
    with tempfile.TemporaryDirectory(prefix='conduit-bench-rest-') as name:
        tmp = Path(name)
        plain, auth = _lua(tmp / 'plain.lua', False), _lua(tmp / 'auth.lua', True)
        results: dict[str, list[dict]] = {'falcon': [], 'conduit': []}
        with falcon_server(tmp) as falcon_url, conduit_server(tmp) as conduit_url:
            targets = {'falcon': (falcon_url, plain), 'conduit': (conduit_url, auth)}
            for url, script in targets.values():
                wrk(url, script, args.warmup, args.connections)
            for _ in range(args.rounds):
                for label, (url, script) in targets.items():
                    results[label].append(wrk(url, script, args.seconds, args.connections))
                    time.sleep(0.5)
    for label, rs in results.items():
        print(f"{label}: {common.fmt_stats([r['rps'] for r in rs])} req/s", flush=True)
    if not args.no_write:
        write(results, args)


def write(results: dict[str, list[dict]], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    med = {label: common.stats([r['rps'] for r in rs])[1] for label, rs in results.items()}
    ratio = med['conduit'] / med['falcon']
    lines = ['## REST channel vs a bare falcon app (target: ≥ 70 % of falcon\'s requests/s)', '',
             '| server | requests/s min / median / max | p50 ms | p99 ms |', '|---|---|---|---|']
    for label, title in (('falcon', f'bare falcon {common.version("falcon")} app, JSON echo'),
                         ('conduit', 'Conduit REST channel, Basic Auth, JSON service')):
        rs = results[label]
        lines.append(f"| {title} | {common.fmt_stats([r['rps'] for r in rs])} | "
                     f"{common.fmt_stats([r['p50'] for r in rs], 2)} | {common.fmt_stats([r['p99'] for r in rs], 2)} |")
    cmd = common.command_line('rest.py', [f'--seconds {args.seconds:g}', f'--warmup {args.warmup:g}',
                                          f'--rounds {args.rounds}', f'--connections {args.connections}'])
    lines += ['', f'Conduit ÷ falcon (medians): **{ratio * 100:.0f} %**.', '',
              f'Both under gunicorn {common.version("gunicorn")}, one gevent worker, on loopback; load from wrk '
              f'({args.connections} connections, 2 threads, {args.rounds} rounds of {args.seconds:g} s after a '
              f'{args.warmup:g} s warm-up, the servers alternating). Every answer was a 200 with the JSON body.',
              '', f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {
        'results': results, 'ratio': ratio,
        'summary': [{'figure': 'REST channel with Basic Auth vs bare falcon, requests/s', 'target': '≥ 70 %',
                     'measured': f'{ratio * 100:.0f} % ({common.fmt(med["conduit"])} vs '
                                 f'{common.fmt(med["falcon"])} req/s)', 'met': ratio >= 0.7}]})


if __name__ == '__main__':
    main()
