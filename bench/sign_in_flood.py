"""A real user's first sign-in while clients flood the pub/sub API with wrong passwords.

A real Conduit server (gunicorn, one gevent worker, SQLite, logging at WARNING) holds one topic
and Basic Auth definitions with the pub permission on it: a ``victim`` one, whose username the
attackers send, and one per real-user sample. N attacker greenlets (in this process, gevent
monkey-patched, one keep-alive connection each from 127.0.0.1) send
``POST /pubsub/topic/<topic>`` with the victim's username and a wrong password in a tight loop,
reconnecting when the server closes a connection. Meanwhile, every ``--interval-ms``, a real user
publishes to the topic with the right credentials of a definition whose password this worker has
never checked (so its scrypt runs), on a new connection, one at a time (a slow answer skips
ticks); the time from connect to the whole answer is the figure.

Scenarios, each on a server of its own (so caches and the throttle start empty):

- ``baseline``: no attackers;
- ``throttled``: every ``[http]`` setting at its default (``auth_max_failures`` 10 per 60 s per
  client address); each attacker sends a new random wrong password on every request; the real
  user signs in from another address (``--user-addr``, 127.0.0.2), i.e. another host;
- ``throttled-same-host``: the same, but the real user signs in from the attackers' address
  (a user behind the same NAT or proxy as the attacker); the real user's own user name keeps its
  own budget (the throttle counts per address and user name);
- ``throttled-rotating``: throttle at its defaults; every attacker request comes on a new
  connection from a new loopback address (127.0.1.0 onwards), as a botnet or an IPv6 prefix
  would: the per-address budget never runs out, only the user name's budget across addresses
  (``auth_max_failures_per_user``) stops the guesses; "guesses/s" is the 401s the attackers got;
- ``cache-only-repeat``: ``[http] auth_max_failures = 0`` (throttle off); each attacker repeats
  one wrong password of its own, so only the failure cache stands between it and scrypt;
- ``cache-only-random``: throttle off; a new random wrong password on every request, the worst
  case for the failure cache.

Sampling starts once every attacker has had its first answer. The section also reports the
attackers' request rate and answers, and the CPU of the server's worker and of this process.

    .venv/bin/python bench/sign_in_flood.py [--clients 20] [--seconds 15] [--interval-ms 250]
                                            [--timeout 10] [--user-addr 127.0.0.2]
                                            [--scenarios baseline,throttled,...]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import base64  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import secrets  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from gevent.pool import Group  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from runtime.config import HttpSection  # noqa: E402
from tests.live_server import LiveServer, poll  # noqa: E402

NAME = 'sign_in_flood'
TOPIC = 'bench.signin'
VICTIM = 'bench.victim'
VICTIM_USER = 'bench-victim'
#: The attackers' address; the real user's is --user-addr unless the scenario says otherwise.
ATTACK_ADDR = '127.0.0.1'


@dataclass(frozen=True)
class Scenario:
    """What one scenario runs."""

    passwords: str | None   # 'random' | 'repeat' | None (no attack)
    throttle: bool          # [http] auth_max_failures at its default, else 0
    same_host: bool = False  # the real user signs in from ATTACK_ADDR
    rotate: bool = False     # every attacker request from a new loopback address, on a new connection


SCENARIOS = {
    'baseline': Scenario(None, True),
    'throttled': Scenario('random', True),
    'throttled-same-host': Scenario('random', True, same_host=True),
    'throttled-rotating': Scenario('random', True, rotate=True),
    'cache-only-repeat': Scenario('repeat', False),
    'cache-only-random': Scenario('random', False),
}
#: Seconds an attacker waits to connect, and for one answer.
CONNECT_TIMEOUT = 5.0
ANSWER_TIMEOUT = 30.0
#: Seconds to wait for every attacker's first answer before sampling starts regardless.
RAMP_LIMIT = 20.0


def _status(head: bytes) -> str:
    """The status code from the start of an answer, or what the bytes were."""
    return common.status_code(head) or 'garbage answer'


def _basic(username: str, password: str) -> str:
    return 'Basic ' + base64.b64encode(f'{username}:{password}'.encode()).decode()


def publish_request(host: str, port: int, username: str, password: str, body: bytes, close: bool) -> bytes:
    """The bytes of one POST /pubsub/topic/TOPIC."""
    return (f'POST /pubsub/topic/{TOPIC} HTTP/1.1\r\nHost: {host}:{port}\r\n'
            f'Authorization: {_basic(username, password)}\r\nContent-Type: application/json\r\n'
            f'Content-Length: {len(body)}\r\n' + ('Connection: close\r\n' if close else '') + '\r\n'
            ).encode() + body


class Reader:
    """Answers, one after the other, from one keep-alive connection (no pipelining)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = b''

    def _more(self) -> None:
        chunk = self.sock.recv(65536)
        if not chunk:
            raise ConnectionResetError('closed by the server')
        self.buf += chunk

    def answer(self) -> tuple[str, bool]:
        """(status code, whether the server closes the connection after it)."""
        while b'\r\n\r\n' not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b'\r\n\r\n', 1)
        length, close = 0, False
        for line in head.split(b'\r\n')[1:]:
            name, _, value = line.partition(b':')
            name = name.strip().lower()
            if name == b'content-length':
                length = int(value.strip())
            elif name == b'connection' and value.strip().lower() == b'close':
                close = True
        while len(self.buf) < length:
            self._more()
        self.buf = self.buf[length:]
        return _status(head), close


# ---------------------------------------------------------------------------------------- the real user


@dataclass
class User:
    """A definition with the pub permission whose password no one has sent yet."""

    name: str
    username: str
    password: str


def sign_in(host: str, port: int, source: str, user: User, timeout: float) -> tuple[float, str]:
    """One publish with user's credentials on a new connection from source: (ms, status or failure)."""
    request = publish_request(host, port, user.username, user.password,
                              b'{"data": {"signed_in": "%s"}}' % user.name.encode(), close=True)
    started = time.perf_counter()
    sock = None
    try:
        with gevent.Timeout(timeout):
            sock = socket.create_connection((host, port), source_address=(source, 0))
            sock.sendall(request)
            status, _ = Reader(sock).answer()
    except gevent.Timeout:
        status = 'timeout'
    except OSError as e:
        status = type(e).__name__
    finally:
        if sock is not None:
            sock.close()
    return (time.perf_counter() - started) * 1000, status


def sample_sign_ins(host: str, port: int, source: str, users: list[User], seconds: float, interval: float,
                    timeout: float) -> list[tuple[float, str]]:
    """A new user signs in at every tick of interval for seconds, one at a time (a late answer skips ticks)."""
    samples = []
    fresh = iter(users)
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
        samples.append(sign_in(host, port, source, next(fresh), timeout))
        k = max(k + 1, int((time.perf_counter() - t0) / interval) + 1)


def user_figures(samples: list[tuple[float, str]]) -> dict:
    """p50 / p99 over every sign-in, one not answered 200 counting as slower than any; max of the 200s."""
    p50, p99 = common.percentiles_failed_last([ms if status == '200' else None for ms, status in samples])
    ok = [ms for ms, status in samples if status == '200']
    return {'samples': len(samples), 'p50': p50, 'p99': p99, 'max_ok': max(ok) if ok else None,
            'min_ok': min(ok) if ok else None, 'statuses': dict(Counter(status for _, status in samples)),
            'failed': len(samples) - len(ok)}


# ---------------------------------------------------------------------------------------- attackers


@dataclass
class AttackStats:
    """What the attackers sent and got."""

    answers: Counter = field(default_factory=Counter)   # status code (or failure) -> count
    answered: int = 0
    first_answers: int = 0                               # attackers that had their first answer
    connections: int = 0
    next_addr: int = 0x000100                            # the next rotating source address (127.0.1.0)

    def rotating_addr(self) -> str:
        """A loopback address no attacker nor real user has used yet."""
        n, self.next_addr = self.next_addr, self.next_addr + 1
        return f'127.{(n >> 16) & 255}.{(n >> 8) & 255}.{n & 255}'


def attacker(mode: str, host: str, port: int, stats: AttackStats, rotate: bool = False) -> None:
    """One attacking client: wrong passwords for the victim's username, in a tight loop, keep-alive
    (or, rotating, one request per connection, each from a new address)."""
    body = b'{"data": "x"}'
    fixed = 'wrong-' + secrets.token_urlsafe(12)
    sock, reader, first = None, None, True
    while True:
        if sock is None:
            try:
                sock = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT,
                                                source_address=(stats.rotating_addr() if rotate else ATTACK_ADDR, 0))
            except OSError:
                stats.answers['connect failed'] += 1
                gevent.sleep(0.1)
                continue
            sock.settimeout(ANSWER_TIMEOUT)
            reader = Reader(sock)
            stats.connections += 1
        password = fixed if mode == 'repeat' else 'wrong-' + secrets.token_urlsafe(12)
        try:
            sock.sendall(publish_request(host, port, VICTIM_USER, password, body, close=rotate))
            status, close = reader.answer()
        except OSError as e:
            status, close = ('closed, no answer' if isinstance(e, ConnectionResetError) else type(e).__name__), True
        stats.answers[status] += 1
        stats.answered += 1
        if first:
            stats.first_answers += 1
            first = False
        if close or rotate:
            sock.close()
            sock = None


# ---------------------------------------------------------------------------------------- CPU


def worker_pids(master: int) -> list[int]:
    """The children of gunicorn's master (its workers)."""
    try:
        return [int(p) for p in Path(f'/proc/{master}/task/{master}/children').read_text().split()]
    except OSError:
        return []


def process_cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) of another process so far."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


# ---------------------------------------------------------------------------------------- one scenario


def objects_yaml(users: list[User], victim_password: str) -> str:
    """The topic, the victim's and every user's definition, and their pub permission."""
    lines = ['# The sign-in flood benchmark (bench/sign_in_flood.py).', 'pubsub_topic:', f'  - name: {TOPIC}',
             '    has_gd: true', 'security:',
             f'  - name: {VICTIM}', '    type: basic_auth', f'    username: {VICTIM_USER}',
             f'    password: {victim_password}']
    for u in users:
        lines += [f'  - name: {u.name}', '    type: basic_auth', f'    username: {u.username}',
                  f'    password: {u.password}']
    lines.append('pubsub_permission:')
    for name in [VICTIM] + [u.name for u in users]:
        lines += [f'  - security: {name}', f'    pub: ["{TOPIC}"]']
    return '\n'.join(lines) + '\n'


def start_server(base: Path, scenario: Scenario, users: list[User]) -> LiveServer:
    """A server with the objects above, ready: the last definition has its permission, the victim publishes."""
    import requests
    if scenario.throttle:
        # LiveServer turns the throttle off in the environment for the tests: put the default back.
        http = HttpSection()
        extra, env = '', {'CONDUIT_HTTP_AUTH_MAX_FAILURES': str(http.auth_max_failures),
                          'CONDUIT_HTTP_AUTH_FAILURE_WINDOW_SECS': str(http.auth_failure_window_secs)}
        if hasattr(http, 'auth_max_failures_per_user'):  # absent before issue 33 (a before/after run)
            env['CONDUIT_HTTP_AUTH_MAX_FAILURES_PER_USER'] = str(http.auth_max_failures_per_user)
    else:
        extra, env = '[http]\nauth_max_failures = 0\n', {'CONDUIT_HTTP_AUTH_MAX_FAILURES': '0'}
    victim_password = 'victim-' + secrets.token_urlsafe(12)
    server = LiveServer(base, f'sqlite:///{base / "var" / "conduit.db"}', workers=1,
                        extra_config='[logging]\nlevel = "WARNING"\n' + extra, env=env)
    server.write_objects('bench.yaml', objects_yaml(users, victim_password))
    server.start()
    try:
        # Through the admin API (right credentials: nothing counts against any address's budget).
        last = users[-1].name

        def loaded() -> bool:
            try:
                r = server.request('GET', f'/admin/security/{last}/permissions', auth=server.admin, timeout=5)
            except requests.RequestException:
                return False
            return r.status_code == 200 and TOPIC in r.json()['permissions'].get('pub', [])
        poll(loaded, 60, interval=0.2, message='the object file is loaded')
        r = server.request('POST', f'/pubsub/topic/{TOPIC}', json={'data': 'ready'},
                           auth=(VICTIM_USER, victim_password))
        if r.status_code != 200:
            raise RuntimeError(f'the victim cannot publish: {r.status_code} {r.text[:300]}')
    except BaseException:
        server.stop()
        raise
    return server


def run_scenario(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    """One scenario on a server of its own; its figures."""
    scenario = SCENARIOS[name]
    count = math.ceil(args.seconds * 1000 / args.interval_ms)
    tag = name.replace('-', '')
    users = [User(f'bench.user.{tag}.{i}', f'bench-user-{tag}-{i}', 'right-' + secrets.token_urlsafe(12))
             for i in range(count)]
    server = start_server(tmp / name, scenario, users)
    host, port = '127.0.0.1', server.port
    source = ATTACK_ADDR if scenario.same_host else args.user_addr
    try:
        workers = worker_pids(server.proc.pid)
        if len(workers) != 1:
            raise RuntimeError(f'expected one worker process, found {workers}')
        gevent.sleep(1.0)
        stats = AttackStats()
        group = Group()
        clients = args.clients if scenario.passwords else 0
        attack_started = time.perf_counter()
        for _ in range(clients):
            group.spawn(attacker, scenario.passwords, host, port, stats, scenario.rotate)
        deadline = attack_started + RAMP_LIMIT
        while stats.first_answers < clients and time.perf_counter() < deadline:
            gevent.sleep(0.01)
        ramp = time.perf_counter() - attack_started
        ramp_answers = dict(stats.answers)
        answered0, cpu0, server_cpu0 = stats.answered, common.cpu_seconds(), process_cpu_seconds(workers[0])
        failed0 = stats.answers['401']
        wall0 = time.perf_counter()
        samples = sample_sign_ins(host, port, source, users, args.seconds, args.interval_ms / 1000, args.timeout)
        wall = time.perf_counter() - wall0
        window_answered = stats.answered - answered0
        window_guesses = stats.answers['401'] - failed0
        cpu = (common.cpu_seconds() - cpu0) / wall
        server_cpu = (process_cpu_seconds(workers[0]) - server_cpu0) / wall
        group.kill(block=True, timeout=10)
        attack_seconds = time.perf_counter() - attack_started
        if server.proc.poll() is not None:
            raise RuntimeError(f'the server exited during {name}:\n{server.log()[-3000:]}')
    finally:
        server.stop()
    answers = dict(stats.answers)
    # Rotating addresses get no 429 from a throttle counting per address only (the figure before issue 33).
    if scenario.passwords and scenario.throttle and not scenario.rotate and not answers.get('429'):
        raise RuntimeError(f'{name}: the attackers never got 429: the sign-in throttle is not on ({answers})')
    if not scenario.throttle and answers.get('429'):
        raise RuntimeError(f'{name}: the attackers got 429 with the throttle off ({answers})')
    row = {'scenario': name, 'rotate': scenario.rotate, 'clients': clients, 'passwords': scenario.passwords,
           'throttle': scenario.throttle,
           'user_addr': source, 'user': user_figures(samples), 'ramp_s': ramp, 'ramp_answers': ramp_answers,
           'window_s': wall, 'window_answered': window_answered,
           'attack_rate': window_answered / wall if clients else None, 'attack_answers': answers,
           'guesses_rate': window_guesses / wall if clients else None,
           'attack_seconds': attack_seconds if clients else None, 'connections': stats.connections,
           'server_cpu': server_cpu, 'bench_cpu': cpu}
    u = row['user']
    print(f"{name}: real user {_describe(u)}; statuses {u['statuses']}; attackers "
          f"{_rate(row)} req/s ({_rate(row, 'guesses_rate')} guesses/s), answers {answers or '—'}; "
          f"server worker CPU {server_cpu * 100:.0f} %, "
          f"this process {cpu * 100:.0f} %", flush=True)
    return row


#: Milliseconds for the report ("failed" when a percentile lands on a failure).
_ms = common.fmt_ms


def _describe(u: dict) -> str:
    return (f"p50 {_ms(u['p50'])} ms, p99 {_ms(u['p99'])} ms, max {_ms(u['max_ok'], '—')} ms, "
            f"{u['failed']:,} of {u['samples']:,} not 200")


def _rate(row: dict, key: str = 'attack_rate') -> str:
    return '—' if row[key] is None else common.fmt(row[key])


def main(argv: list[str] | None = None) -> None:
    """Run each scenario on a server of its own; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--clients', type=int, default=20, help='attacking clients (greenlets, one connection each)')
    parser.add_argument('--seconds', type=float, default=15.0, help='how long the real user is sampled per scenario')
    parser.add_argument('--interval-ms', type=float, default=250.0, help='between two real-user sign-ins')
    parser.add_argument('--timeout', type=float, default=10.0, help='seconds a real-user sign-in may take in all')
    parser.add_argument('--user-addr', default='127.0.0.2',
                        help="the real user's source address (a loopback address other than the attackers')")
    parser.add_argument('--scenarios', default=','.join(SCENARIOS))
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    names = [s for s in args.scenarios.split(',') if s]
    for s in names:
        if s not in SCENARIOS:
            parser.error(f'no scenario {s!r}; choose from {", ".join(SCENARIOS)}')
    rows = []
    with tempfile.TemporaryDirectory(prefix='conduit-bench-signin-') as tmp:
        for name in names:
            rows.append(run_scenario(name, args, Path(tmp)))
            shutil.rmtree(Path(tmp) / name, ignore_errors=True)
    if not args.no_write:
        write(rows, args)


def write(rows: list[dict], args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    http = HttpSection()
    lines = [f"## Sign-in flood: a real user's first sign-in while {args.clients} clients send wrong passwords "
             '(no target; before the fix: 585 ms)', '',
             "| scenario | attackers' passwords | throttle | real user's address | sign-ins | p50 ms | p99 ms | "
             "max ms (200s) | not 200 | attack requests/s | guesses/s (401s) | what the attackers got | "
             "server worker CPU | this process's CPU |",
             '|' + '---|' * 14]
    for row in rows:
        u = row['user']
        not_ok = f"{u['failed']:,}" + (
            f" ({', '.join(f'{k}: {v:,}' for k, v in sorted(u['statuses'].items()) if k != '200')})"
            if u['failed'] else '')
        passwords = {'random': 'new random one per request', 'repeat': 'one each, repeated',
                     None: '— (no attack)'}[row['passwords']]
        per_user = getattr(http, 'auth_max_failures_per_user', 0)
        throttle = (f'on ({http.auth_max_failures} per address and name'
                    + (f', {per_user} per name' if per_user else '') + f' per {http.auth_failure_window_secs:g} s)'
                    if row['throttle'] else 'off')
        if row.get('rotate'):
            passwords += ', a new address per request'
        got = ', '.join(f'{k}: {v:,}' for k, v in sorted(row['attack_answers'].items())) or '—'
        lines.append(f"| {row['scenario']} | {passwords} | {throttle} | {row['user_addr']} | {u['samples']:,} | "
                     f"{_ms(u['p50'])} | {_ms(u['p99'])} | {_ms(u['max_ok'], '—')} | {not_ok} | {_rate(row)} | "
                     f"{_rate(row, 'guesses_rate')} | "
                     f"{got} | {row['server_cpu'] * 100:.0f} % | {row['bench_cpu'] * 100:.0f} % |")
    summary = [{'figure': f"A real user's first sign-in (pub/sub publish) while {args.clients} clients send wrong "
                          'passwords', 'target': 'no target; before the fix: 585 ms', 'met': None,
                'measured': '; '.join(f"{r['scenario']}: p50 {_ms(r['user']['p50'])} ms, p99 "
                                      f"{_ms(r['user']['p99'])} ms" for r in rows)}]
    cmd = common.command_line('sign_in_flood.py', [f'--clients {args.clients}', f'--seconds {args.seconds:g}',
                                                   f'--interval-ms {args.interval_ms:g}', f'--timeout {args.timeout:g}',
                                                   f'--user-addr {args.user_addr}', f'--scenarios {args.scenarios}'])
    lines += ['', f'One Conduit server per scenario (gunicorn {common.version("gunicorn")}, one gevent worker, '
              'SQLite, logging at WARNING) on loopback, so that its failure cache and sign-in throttle start '
              'empty. Its object file declares a topic and Basic Auth definitions with the pub permission on it '
              '(passwords stored as scrypt hashes). Each attacker is a greenlet of this process with one '
              f'keep-alive connection from {ATTACK_ADDR}, sending `POST /pubsub/topic/{TOPIC}` with an existing '
              "definition's username and a wrong password in a tight loop (a connection the server closes is "
              "opened again). All attackers share one address, as one attacking host would, so they share one "
              'throttle budget (in "throttled-rotating", each request comes from a new address instead). '
              f'Every {args.interval_ms:g} ms (one at a time: a slow answer skips ticks) a real '
              'user publishes to the topic with the right credentials of a definition whose password this '
              'worker has never checked, so scrypt runs: the figure is the time from connecting (a new '
              f'connection) to the whole answer, {args.timeout:g} s at most; a sign-in not answered 200 counts '
              'as slower than any ("failed" when that rank is one). Sampling lasts '
              f'{args.seconds:g} s and starts once every attacker has had its first answer. "throttle off": '
              '`[http] auth_max_failures = 0`, so the failure cache (a wrong password is remembered for 60 s) is '
              'all that is measured. "throttled-same-host": the real user signs in from the attackers\' '
              'address. "attack requests/s": answers the attackers got during sampling; "what the attackers '
              'got": over the whole attack, ramp included. CPU: the server\'s worker process (every thread, so '
              'scrypt in its thread pool too; 100 % = one core) and this process (attackers and real user), '
              f'during sampling, on {os.cpu_count()} CPUs.', '', f'Command: `{cmd}`']
    common.write_result(NAME, '\n'.join(lines), {'rows': rows, 'summary': summary})


if __name__ == '__main__':
    main()
