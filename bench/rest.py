"""A REST channel against a bare falcon app under the same gunicorn gevent worker.

Both servers run one gunicorn gevent worker on a loopback port: Conduit (SQLite, logging at
WARNING) serving a channel with Basic Auth to a trivial JSON service (``bench/rest_fixture/``),
and a bare falcon app answering the same JSON body back (``bench/bare_falcon_app.py``). The load
comes from wrk in a separate process: POST of the same small JSON body, 20 connections, 2
threads, a warm-up and then several timed rounds, alternating between the two servers so that
drift on the machine affects both: first saturated (each connection sends its next request as soon
as it has an answer), then paced at one rate for both (half the REST channel's saturated median,
or ``--rate``), which compares latency at the same load. Every response must be a 200.

    .venv/bin/python bench/rest.py [--seconds 10] [--warmup 2] [--rounds 3] [--connections 20] [--rate N]
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


def _lua(path: Path, auth: bool, delay_ms: int = 0) -> Path:
    """wrk's script: the POST, its headers, and (paced) a delay before each connection's next request."""
    lines = ['wrk.method = "POST"', f"wrk.body = '{BODY}'", 'wrk.headers["Content-Type"] = "application/json"']
    if auth:
        token = base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode()
        lines.append(f'wrk.headers["Authorization"] = "Basic {token}"')
    if delay_ms:
        # wrk starts a request's clock when it writes it, so the pause is not counted as latency.
        lines += ['function delay()', f'  return {delay_ms}', 'end']
    path.write_text('\n'.join(lines) + '\n')
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


def pace(rate: float, connections: int) -> int:
    """The pause (ms, at least 1) each connection takes between requests so that all of them send about rate/s."""
    return max(1, round(connections * 1000 / rate))


def main(argv: list[str] | None = None) -> None:
    """Saturation rounds, then paced rounds at one rate for both servers; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--seconds', type=float, default=10.0)
    parser.add_argument('--warmup', type=float, default=2.0)
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--connections', type=int, default=20)
    parser.add_argument('--rate', type=float, default=0.0,
                        help='requests/s of the paced rounds (default: half the REST channel\'s saturation median)')
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    if shutil.which('wrk') is None:
        raise SystemExit('wrk is not installed: apt-get install wrk (make bench does)')
    with tempfile.TemporaryDirectory(prefix='conduit-bench-rest-') as name:
        tmp = Path(name)
        results: dict[str, list[dict]] = {'falcon': [], 'conduit': []}
        paced: dict[str, list[dict]] = {'falcon': [], 'conduit': []}
        with falcon_server(tmp) as falcon_url, conduit_server(tmp) as conduit_url:
            urls = {'falcon': falcon_url, 'conduit': conduit_url}
            auth = {'falcon': False, 'conduit': True}
            scripts = {label: _lua(tmp / f'{label}.lua', auth[label]) for label in urls}
            for label in urls:
                wrk(urls[label], scripts[label], args.warmup, args.connections)
            for _ in range(args.rounds):
                for label in urls:
                    results[label].append(wrk(urls[label], scripts[label], args.seconds, args.connections))
                    time.sleep(0.5)
            rate = args.rate or common.stats([r['rps'] for r in results['conduit']])[1] / 2
            delay = pace(rate, args.connections)
            scripts = {label: _lua(tmp / f'{label}-paced.lua', auth[label], delay) for label in urls}
            for _ in range(args.rounds):
                for label in urls:
                    paced[label].append(wrk(urls[label], scripts[label], args.seconds, args.connections))
                    time.sleep(0.5)
    for title, rounds in (('saturated', results), (f'paced at {rate:,.0f} req/s', paced)):
        for label, rs in rounds.items():
            print(f"{title}, {label}: {common.fmt_stats([r['rps'] for r in rs])} req/s, p50 "
                  f"{common.fmt_stats([r['p50'] for r in rs], 2)} ms, p99 "
                  f"{common.fmt_stats([r['p99'] for r in rs], 2)} ms", flush=True)
    if not args.no_write:
        write(results, paced, rate, args)


def _table(rounds: dict[str, list[dict]]) -> list[str]:
    lines = ['| server | requests/s min / median / max | p50 ms | p99 ms |', '|---|---|---|---|']
    for label, title in (('falcon', f'bare falcon {common.version("falcon")} app, JSON echo'),
                         ('conduit', 'Conduit REST channel, Basic Auth, JSON service')):
        rs = rounds[label]
        lines.append(f"| {title} | {common.fmt_stats([r['rps'] for r in rs])} | "
                     f"{common.fmt_stats([r['p50'] for r in rs], 2)} | {common.fmt_stats([r['p99'] for r in rs], 2)} |")
    return lines


def write(results: dict[str, list[dict]], paced: dict[str, list[dict]], rate: float,
          args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    def median(rounds: dict[str, list[dict]], label: str, key: str) -> float:
        return common.stats([r[key] for r in rounds[label]])[1]
    ratio = median(results, 'conduit', 'rps') / median(results, 'falcon', 'rps')
    p99_ratio = median(paced, 'conduit', 'p99') / median(paced, 'falcon', 'p99')
    cmd = common.command_line('rest.py', [f'--seconds {args.seconds:g}', f'--warmup {args.warmup:g}',
                                          f'--rounds {args.rounds}', f'--connections {args.connections}'])
    lines = ['## REST channel vs a bare falcon app (targets: ≥ 70 % of falcon\'s requests/s; '
             'p99 within 2× falcon\'s at the same load)', '',
             f'Saturated ({args.connections} connections, each sending its next request as soon as it has '
             'an answer):', '',
             *_table(results), '',
             f'Paced: the same {args.connections} connections, each pausing {pace(rate, args.connections)} ms '
             f'between requests (about {rate:,.0f} req/s, half the REST channel\'s saturated median), '
             'for both servers:',
             '', *_table(paced), '',
             f'Conduit ÷ falcon: requests/s saturated (medians) **{ratio * 100:.0f} %**; '
             f'p99 paced (medians) **{p99_ratio:.2f}×**.', '',
             f'Both under gunicorn {common.version("gunicorn")}, one gevent worker, on loopback; load from wrk '
             f'(2 threads, {args.rounds} rounds of {args.seconds:g} s each way after a {args.warmup:g} s warm-up, '
             'the servers alternating). Every answer was a 200 with the JSON body.',
             '', f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {
        'results': results, 'paced': paced, 'rate': rate, 'ratio': ratio, 'p99_ratio': p99_ratio,
        'summary': [{'figure': 'REST channel with Basic Auth vs bare falcon, requests/s', 'target': '≥ 70 %',
                     'measured': f'{ratio * 100:.0f} % ({common.fmt(median(results, "conduit", "rps"))} vs '
                                 f'{common.fmt(median(results, "falcon", "rps"))} req/s)', 'met': ratio >= 0.7},
                    {'figure': f'REST channel p99 vs bare falcon at the same paced load (~{rate:,.0f} req/s)',
                     'target': '≤ 2×',
                     'measured': f'{p99_ratio:.2f}× ({median(paced, "conduit", "p99"):.2f} vs '
                                 f'{median(paced, "falcon", "p99"):.2f} ms)', 'met': p99_ratio <= 2}]})


if __name__ == '__main__':
    main()
