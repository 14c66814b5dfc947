"""/health latency while slow clients hold the server's connections (a bound of the HTTP edge).

A real Conduit server (gunicorn, one gevent worker, SQLite, logging at WARNING, every ``[http]``
setting at its default) serves an unsecured JSON REST channel to an echo service. One client asks
``GET /health`` on a fresh connection every 20 ms (one request at a time: the next one starts at
the first tick after the previous answer; each has 2 s in all to connect and be answered) while
one of these is held for ``--seconds``:

- ``slow-body``: N connections each send a POST to the channel with ``Content-Length: 100000``,
  then the body at 1 byte/s;
- ``slow-headers``: N connections each send a request line, then header lines at 1 byte/s, never
  the blank line that ends them; one the server closes reconnects 1 s later (slowloris);
- ``baseline``: nothing.

The attackers are plain sockets, one greenlet each, in this process (gevent monkey-patched); the
section reports this process's CPU so that it can be seen not to be the bottleneck. For each
attack it also reports how many attack connections the server ended, after how long, and what it
answered them (a status code, or closed / reset without an answer). /health is sampled only once
every attack connection has been attempted. The soft RLIMIT_NOFILE is raised to the hard limit
first (the server inherits it).

    .venv/bin/python bench/slow_clients.py [--sockets 1100] [--seconds 20] [--interval-ms 20]
                                           [--timeout 2] [--attacks slow-body,slow-headers,baseline]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import resource  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from itertools import cycle  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from gevent.pool import Group  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from tests.live_server import LiveServer, poll  # noqa: E402

NAME = 'slow_clients'
ATTACKS = ('slow-body', 'slow-headers', 'baseline')
FIXTURE = common.REPO / 'bench' / 'rest_fixture'
#: The channel of bench/rest_fixture's echo service, without security.
OBJECTS = '''# The unsecured channel of the slow-clients benchmark (bench/slow_clients.py).
channel_rest:
  - name: bench.slow.echo
    service: bench.rest.echo
    url_path: /api/echo
    method: POST
    data_format: json
'''
BODY = b'{"customer_id": 12345}'
#: Declared length of a slow-body request: at 1 byte/s it never completes.
SLOW_BODY_LENGTH = 100_000
#: Seconds between two bytes of an attacker, and before a closed slow-headers attacker reconnects.
PACE = 1.0
#: Seconds an attacker waits for its connection to be accepted by the kernel.
CONNECT_TIMEOUT = 5.0
#: Seconds to wait for /health to answer again after an attack.
RECOVERY_LIMIT = 30.0


def raise_nofile() -> tuple[int, int]:
    """Raise the soft limit of open files to the hard limit; returns (soft, hard) now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)


def _status(data: bytes) -> str:
    """'HTTP <code>' from the start of an answer, or what the bytes were."""
    code = common.status_code(data)
    return f'HTTP {code}' if code else 'garbage answer'


# ---------------------------------------------------------------------------------------- /health


def health_once(host: str, port: int, timeout: float) -> tuple[float, str]:
    """One GET /health on a new connection: (milliseconds, 'ok' or why it failed)."""
    request = f'GET /health HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n'.encode()
    started = time.perf_counter()
    sock = None
    data = b''
    try:
        with gevent.Timeout(timeout):
            sock = socket.create_connection((host, port))
            sock.sendall(request)
            while chunk := sock.recv(65536):
                data += chunk
    except gevent.Timeout:
        return (time.perf_counter() - started) * 1000, 'timeout'
    except OSError as e:
        return (time.perf_counter() - started) * 1000, type(e).__name__
    finally:
        if sock is not None:
            sock.close()
    elapsed = (time.perf_counter() - started) * 1000
    if not data:
        return elapsed, 'closed, no answer'
    status = _status(data)
    return elapsed, 'ok' if status == 'HTTP 200' else status


def sample_health(host: str, port: int, seconds: float, interval: float, timeout: float) -> list[tuple[float, str]]:
    """GET /health at every tick of interval for seconds, one at a time (a late answer skips ticks)."""
    samples = []
    t0 = time.perf_counter()
    end = t0 + seconds
    k = 0
    while True:
        at = t0 + k * interval
        if at >= end:
            return samples
        delay = at - time.perf_counter()
        if delay > 0:
            gevent.sleep(delay)
        samples.append(health_once(host, port, timeout))
        # The next tick after this answer.
        k = max(k + 1, int((time.perf_counter() - t0) / interval) + 1)


def health_figures(samples: list[tuple[float, str]], timeout: float) -> dict:
    """p50 / p99 over every sample, a failed one counting as slower than any answer; max of the answers."""
    p50, p99 = common.percentiles_failed_last([ms if outcome == 'ok' else None for ms, outcome in samples])
    answered = [ms for ms, outcome in samples if outcome == 'ok']
    failures = Counter(outcome for _, outcome in samples if outcome != 'ok')
    return {'samples': len(samples), 'p50': p50, 'p99': p99, 'max_answered': max(answered) if answered else None,
            'failed': sum(failures.values()), 'failures': dict(failures), 'timeout_s': timeout}


def wait_healthy(host: str, port: int, timeout: float) -> float:
    """Seconds until /health answers 200 within timeout again (RECOVERY_LIMIT at most)."""
    started = time.perf_counter()
    while time.perf_counter() - started < RECOVERY_LIMIT:
        if health_once(host, port, timeout)[1] == 'ok':
            return time.perf_counter() - started
        gevent.sleep(0.05)
    raise RuntimeError(f'/health did not answer again within {RECOVERY_LIMIT:g} s of the attack ending')


# ---------------------------------------------------------------------------------------- attackers


@dataclass
class AttackStats:
    """What the attack connections went through."""

    attempted: int = 0        # attackers past their first connect (succeeded or not)
    opened: int = 0           # connections established, reconnects included
    connect_failed: int = 0
    ended: int = 0            # connections the server ended (answered, closed or reset) before the attack stopped
    end_after: list[float] = field(default_factory=list)  # seconds from connect to that end
    answers: Counter = field(default_factory=Counter)


def _opening(kind: str, host: str, port: int) -> tuple[bytes, cycle]:
    """What an attacker sends at once, and the bytes it then sends one per PACE."""
    if kind == 'slow-body':
        head = (f'POST /api/echo HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n'
                f'Content-Length: {SLOW_BODY_LENGTH}\r\n\r\n').encode()
        return head, cycle(BODY)
    return f'GET /api/echo HTTP/1.1\r\nHost: {host}:{port}\r\n'.encode(), cycle(b'X-Slow: a\r\n')


def _answer(sock: socket.socket, data: bytes) -> str:
    """The status the server sent (data holds its first bytes)."""
    deadline = time.monotonic() + 1.0
    while b'\r\n' not in data and time.monotonic() < deadline:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        try:
            chunk = sock.recv(4096)
        except OSError:
            break
        if not chunk:
            break
        data += chunk
    return _status(data)


def hold(sock: socket.socket, kind: str, host: str, port: int) -> str:
    """Feed one connection at PACE until the server ends it; returns what it answered."""
    opening, trickle = _opening(kind, host, port)
    started = time.monotonic()
    try:
        sock.sendall(opening)
    except OSError:
        return 'reset, no answer'
    k = 1
    while True:
        sock.settimeout(max(0.001, started + k * PACE - time.monotonic()))
        try:
            data = sock.recv(4096)
        except TimeoutError:
            try:
                sock.send(bytes([next(trickle)]))
            except OSError:
                # The server may have answered before closing: look.
                sock.settimeout(0.2)
                try:
                    data = sock.recv(4096)
                except OSError:
                    return 'reset, no answer'
                return _answer(sock, data) if data else 'reset, no answer'
            k += 1
            continue
        except OSError:
            return 'reset, no answer'
        return _answer(sock, data) if data else 'closed, no answer'


def attacker(kind: str, host: str, port: int, stats: AttackStats) -> None:
    """One attacking client: connects, holds, and (slow-headers) reconnects after the server ends it."""
    first = True
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT)
        except OSError:
            stats.connect_failed += 1
            if first:
                stats.attempted += 1
                first = False
            gevent.sleep(PACE)
            continue
        connected = time.monotonic()
        stats.opened += 1
        if first:
            stats.attempted += 1
            first = False
        try:
            outcome = hold(sock, kind, host, port)
        finally:
            sock.close()
        stats.ended += 1
        stats.end_after.append(time.monotonic() - connected)
        stats.answers[outcome] += 1
        if kind != 'slow-headers':
            return
        gevent.sleep(PACE)


# ---------------------------------------------------------------------------------------- one attack


def run_attack(server: LiveServer, kind: str, args: argparse.Namespace) -> dict:
    """Hold one attack for args.seconds while sampling /health; its figures."""
    host, port = '127.0.0.1', server.port
    stats = AttackStats()
    group = Group()
    sockets = 0 if kind == 'baseline' else args.sockets
    ramp_started = time.perf_counter()
    for _ in range(sockets):
        group.spawn(attacker, kind, host, port, stats)
    deadline = time.perf_counter() + 2 * CONNECT_TIMEOUT
    while stats.attempted < sockets and time.perf_counter() < deadline:
        gevent.sleep(0.05)
    ramp = time.perf_counter() - ramp_started
    if sockets and stats.opened == 0:
        group.kill(block=True, timeout=10)
        raise RuntimeError(f'{kind}: not one attack connection could be opened')
    cpu0, wall0 = common.cpu_seconds(), time.perf_counter()
    samples = sample_health(host, port, args.seconds, args.interval_ms / 1000, args.timeout)
    cpu = (common.cpu_seconds() - cpu0) / (time.perf_counter() - wall0)
    held = {'opened': stats.opened, 'ended': stats.ended, 'end_after': list(stats.end_after),
            'answers': dict(stats.answers), 'connect_failed': stats.connect_failed}
    group.kill(block=True, timeout=10)
    if server.proc is not None and server.proc.poll() is not None:
        raise RuntimeError(f'the server exited during {kind}:\n{server.log()[-3000:]}')
    recovery = wait_healthy(host, port, args.timeout)
    ends = held.pop('end_after')
    row = {'attack': kind, 'sockets': sockets, 'ramp_s': ramp, 'attacker_cpu': cpu, 'recovery_s': recovery,
           'health': health_figures(samples, args.timeout), **held,
           'open_at_end': held['opened'] - held['ended'],
           'end_after_median_s': statistics.median(ends) if ends else None,
           'end_after_min_s': min(ends) if ends else None, 'end_after_max_s': max(ends) if ends else None}
    print(f"{kind}: /health {_describe(row['health'])}; attack connections opened {row['opened']:,}, "
          f"ended by the server {row['ended']:,}, answers {row['answers'] or '—'}; "
          f"this process's CPU {cpu * 100:.0f} %", flush=True)
    gevent.sleep(1.0)
    return row


#: Milliseconds for the report ("failed" when a percentile lands on a failure).
_ms = common.fmt_ms


def _describe(health: dict) -> str:
    return (f"p50 {_ms(health['p50'])} ms, p99 {_ms(health['p99'])} ms, "
            f"{health['failed']:,} of {health['samples']:,} failed")


def start_server(tmp: Path) -> LiveServer:
    """Conduit with the unsecured echo channel, one gevent worker, SQLite, [http] at its defaults."""
    import requests
    server = LiveServer(tmp / 'conduit', f'sqlite:///{tmp / "conduit" / "var" / "conduit.db"}', workers=1,
                        extra_config='[logging]\nlevel = "WARNING"\n')
    shutil.copy(FIXTURE / 'echo_service.py', server.hot_deploy / 'echo_service.py')
    (server.objects / 'bench.yaml').write_text(OBJECTS, encoding='utf-8')
    server.start()

    def answers() -> bool:
        try:
            r = requests.post(server.url + '/api/echo', data=BODY, headers={'Content-Type': 'application/json'},
                              timeout=2)
        except requests.RequestException:
            return False
        return r.status_code == 200 and r.json() == {'customer_id': 12345}
    try:
        poll(answers, 30, message='the unsecured echo channel answers')
    except BaseException:
        server.stop()
        raise
    return server


def main(argv: list[str] | None = None) -> None:
    """Run each attack against one server; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sockets', type=int, default=1100, help='attack connections held at once')
    parser.add_argument('--seconds', type=float, default=20.0, help='how long each attack is held')
    parser.add_argument('--interval-ms', type=float, default=20.0, help='between two /health requests')
    parser.add_argument('--timeout', type=float, default=2.0, help='seconds a /health request may take in all')
    parser.add_argument('--attacks', default=','.join(ATTACKS))
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    attacks = [a for a in args.attacks.split(',') if a]
    for a in attacks:
        if a not in ATTACKS:
            parser.error(f'no attack {a!r}; choose from {", ".join(ATTACKS)}')
    soft, hard = raise_nofile()
    if soft < args.sockets + 200:
        raise SystemExit(f'RLIMIT_NOFILE is {soft} (hard {hard}): too few for {args.sockets} sockets')
    rows = []
    with tempfile.TemporaryDirectory(prefix='conduit-bench-slow-') as name:
        server = start_server(Path(name))
        try:
            gevent.sleep(1.0)
            for kind in attacks:
                rows.append(run_attack(server, kind, args))
        finally:
            server.stop()
    if not args.no_write:
        write(rows, args, soft)


def _seconds(value: float | None) -> str:
    return '—' if value is None else common.fmt(value, 1)


def write(rows: list[dict], args: argparse.Namespace, nofile: int) -> None:
    """The results section and its raw figures."""
    title = f'{args.sockets:,} slow-body / slow-header sockets'
    lines = [f'## Slow clients: /health under {title} (target: /health p99 < 100 ms)', '',
             '| attack | attack sockets | /health requests | p50 ms | p99 ms | max ms (answered) | failed | '
             'attack connections opened | ended by the server | their time to end, median (min–max) s | '
             'what the attackers got | /health back after (s) | this process\'s CPU |',
             '|' + '---|' * 13]
    for row in rows:
        h = row['health']
        failed = f"{h['failed']:,}" + (f" ({', '.join(f'{k} {v:,}' for k, v in sorted(h['failures'].items()))})"
                                       if h['failures'] else '')
        answers = ', '.join(f'{k}: {v:,}' for k, v in sorted(row['answers'].items())) or '—'
        if row['sockets']:
            answers += f"; still open at the end: {row['open_at_end']:,}"
            if row['connect_failed']:
                answers += f"; connects failed: {row['connect_failed']:,}"
        ended = ('—' if row['end_after_median_s'] is None else
                 f"{_seconds(row['end_after_median_s'])} ({_seconds(row['end_after_min_s'])}–"
                 f"{_seconds(row['end_after_max_s'])})")
        lines.append(f"| {row['attack']} | {row['sockets']:,} | {h['samples']:,} | {_ms(h['p50'])} | "
                     f"{_ms(h['p99'])} | {_ms(h['max_answered'], '—')} | {failed} | {row['opened']:,} | "
                     f"{row['ended']:,} | {ended} | {answers} | {row['recovery_s']:.2f} | "
                     f"{row['attacker_cpu'] * 100:.0f} % |")
    attacked = [r for r in rows if r['sockets']]
    summary = []
    if attacked:
        met = all(r['health']['p99'] is not None and r['health']['p99'] < 100 for r in attacked)
        summary.append({'figure': f'/health under {title}', 'target': '/health p99 < 100 ms', 'met': met,
                        'measured': '; '.join(f"{r['attack']}: {_describe(r['health'])}" for r in attacked)})
    cmd = common.command_line('slow_clients.py', [f'--sockets {args.sockets}', f'--seconds {args.seconds:g}',
                                                  f'--interval-ms {args.interval_ms:g}', f'--timeout {args.timeout:g}',
                                                  f'--attacks {args.attacks}'])
    lines += ['', f'One Conduit server (gunicorn {common.version("gunicorn")}, one gevent worker, SQLite, every '
              '`[http]` setting at its default) on loopback, with an unsecured JSON REST channel to an echo '
              f'service. Each attack is held for {args.seconds:g} s, once: slow-body connections send a POST to '
              f'the channel declaring `Content-Length: {SLOW_BODY_LENGTH}`, then the body at 1 byte/s; '
              'slow-header connections send a request line, then header lines at 1 byte/s without ever ending '
              'them, and reconnect 1 s after the server closes them. Meanwhile one client asks `GET /health` on '
              f'a new connection every {args.interval_ms:g} ms, one request at a time (a slow answer skips '
              f'ticks), each with {args.timeout:g} s in all to connect and be answered; the p50 and p99 count a '
              'failed or timed-out request as slower than any answer ("failed" when that rank is a failure). '
              'Sampling starts once every attack connection has been attempted. "Ended by the server": '
              'attack connections that got an answer or were closed or reset before the attack stopped, timed '
              'from their connect. "/health back after": from the attackers closing their sockets to the '
              'first 200. The attackers and the /health client are greenlets of one process, whose CPU share '
              f'is the last column. Open files limit {nofile:,}.', '', f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {'rows': rows, 'summary': summary, 'nofile': nofile})


if __name__ == '__main__':
    main()
