"""WebSocket subscribers: 10,000 idle connections on one worker; fan-out delivery beside REST pull.

One Conduit server (gunicorn, one gevent worker, logging at WARNING, ``[http] max_connections``
raised to 11,000) per measurement, on loopback. Its object file declares the topics and one Basic
Auth definition with the pub and sub permissions on them. The clients are separate processes (this
script again, ``--role``), gevent and websocket-client, so that their memory and CPU are not the
server's; each process binds its own loopback source address.

- **idle**: N connections (10,000), each authenticated by Basic Auth on the upgrade and holding
  one subscription, then held idle for ``--hold`` seconds (the server pings every 20 s; the client
  answers). Two ways to set them up, each on a fresh server:
  ``subscribe``: every connection sends ``subscribe {topic}``, making a new subscription (stopped
  after ``--subscribe-budget`` seconds if not done: the figures then say how far it got);
  ``resume``: the N subscriptions are made first in one transaction straight in the database (the
  statement the hub runs, ``statements.create_subscription``), then every connection sends
  ``subscribe {sub_key}``. The figures: worker RSS before (empty), with the subscriptions and no
  connection (resume), after the set-up and after the hold; RSS per connection; the set-up time;
  the worker's CPU while the connections idle; every connection still open and attached at the end.
- **fanout**: S WebSocket subscribers of one topic (1,000 connections in a client process, each
  acking every message as it arrives), GD messages published over REST (``POST /pubsub/topic``,
  open loop, each publication in a greenlet of its own) at rate R so that deliveries are S × R per
  second (1,000/s and 10,000/s). Each message carries its publication time (``time.time()`` when it
  was due); the client notes ``time.time()`` on receipt: publish→client latency per delivery, and
  the deliveries per second achieved. Then the same through REST pull: P pull subscriptions (made
  through the admin API), each read by one poller (keep-alive connection, ``POST
  /pubsub/messages/get`` with ``ack: auto``, the next poll as soon as an answer came, after
  ``--pull-idle-ms`` when it was empty, or long-polling with ``wait`` = ``--pull-wait`` seconds),
  the publication rate scaled so that deliveries per second are the same.

    .venv/bin/python bench/websockets.py [--parts idle,fanout] [--backends sqlite] [--connections 10000]
        [--idle-modes subscribe,resume] [--hold 30] [--subscribers 1000] [--pull-subscribers 1000] [--pull-wait 0]
        [--deliveries 1000,10000] [--seconds 20] [--warmup 3] [--rounds 2] [--profile DIR] [--quick]
"""

from __future__ import annotations

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import base64  # noqa: E402
import collections  # noqa: E402
import contextlib  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.lock import BoundedSemaphore  # noqa: E402
from gevent.pool import Group  # noqa: E402
from gevent.queue import Queue  # noqa: E402

# Run as bench/websockets.py, this file's folder comes first on sys.path: keep it from shadowing any
# library of the same name, and put the repository in its place.
sys.path[:] = [p for p in sys.path if Path(p or '.').resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

NAME = 'websockets'
USER, PASSWORD = 'bench-ws', 'bench-ws-password'
SECURITY = 'bench.ws'
IDLE_TOPIC, FANOUT_TOPIC, PULL_TOPIC = 'bench.ws.idle', 'bench.ws.fanout', 'bench.ws.pull'
#: Above the 10,000 connections of the idle part (the default is 10,000, including /health and the admin API).
MAX_CONNECTIONS = 11_000
#: Padding of each published message's data (so that a message is not trivially small).
PAD = 'x' * 100
#: WebSocket connections one idle-client process opens (the open-files limit is 20,000 per process).
PER_PROCESS = 5_000
#: Connections an idle client process sets up at once.
SETUP_CONCURRENCY = 100


def _auth_header() -> str:
    return 'Authorization: Basic ' + base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode()


def _emit(event: str, **fields: Any) -> None:
    """One event of a client process to the controller: a JSON line on stdout."""
    sys.stdout.write(json.dumps({'event': event, **fields}) + '\n')
    sys.stdout.flush()


# ============================================================================================ the clients


def _ws_connect(spec: dict[str, Any]) -> Any:
    """A WebSocket connection to the server, Basic Auth on the upgrade, from the process's source address."""
    import websocket
    sock = socket.create_connection((spec['host'], spec['port']), timeout=120, source_address=(spec['source'], 0))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return websocket.create_connection(f"ws://{spec['host']}:{spec['port']}/pubsub/ws", socket=sock, timeout=120,
                                       header=[_auth_header()], enable_multithread=False,
                                       skip_utf8_validation=True)


def _answer(ws: Any) -> dict[str, Any]:
    """The next frame from the server as JSON."""
    return json.loads(ws.recv())


class ClientState:
    """What a client process counts, reported to the controller every half second."""

    def __init__(self) -> None:
        self.done = 0
        self.failed = 0
        self.closed = 0
        self.received = 0
        self.polls = 0
        self.errors: collections.Counter[str] = collections.Counter()

    def progress(self) -> dict[str, Any]:
        return {'done': self.done, 'failed': self.failed, 'closed': self.closed, 'received': self.received,
                'polls': self.polls, 'errors': dict(self.errors.most_common(5)), 'cpu': common.cpu_seconds(),
                'rss_mib': common.rss_mib()}


def _report_progress(state: ClientState, stop: Event) -> None:
    while not stop.is_set():
        _emit('progress', **state.progress())
        stop.wait(0.5)


def _wait_for_signal(signum: int) -> Event:
    event = Event()
    gevent.signal_handler(signum, event.set)
    return event


def idle_client(spec: dict[str, Any]) -> None:
    """Open spec['count'] connections, each subscribing (topic) or resuming (sub_keys), then read until closed."""
    state = ClientState()
    stop = _wait_for_signal(signal.SIGTERM)
    gate = BoundedSemaphore(SETUP_CONCURRENCY)
    setup_times: list[float] = []      # completion time (time.time()) of each subscribe, in order
    answer_ms: list[float] = []        # subscribe frame → its answer
    sub_keys: list[str] = []
    resume = spec.get('sub_keys')
    sockets: list[Any] = []

    def one(i: int) -> None:
        try:
            with gate:
                ws = _ws_connect(spec)
                sockets.append(ws)
                if spec.get('connect_only'):
                    frame, expected = {'action': 'ping', 'id': str(i)}, 'pong'
                elif resume:
                    frame, expected = {'action': 'subscribe', 'id': str(i), 'sub_key': resume[i]}, 'subscribed'
                else:
                    frame, expected = {'action': 'subscribe', 'id': str(i), 'topic': spec['topic']}, 'subscribed'
                t0 = time.time()
                ws.send(json.dumps(frame))
                answer = _answer(ws)
                if answer.get('action') != expected or (resume and not answer.get('resumed')):
                    raise RuntimeError(f"answer {answer.get('action')} {answer.get('status')} "
                                       f"{str(answer.get('details'))[:80]}")
                now = time.time()
                answer_ms.append((now - t0) * 1000)
                setup_times.append(now)
                sub_keys.append(answer.get('sub_key', ''))
                state.done += 1
        except Exception as e:  # noqa: BLE001 - counted and reported, the others go on
            state.failed += 1
            state.errors[f'{type(e).__name__}: {str(e)[:100]}'] += 1
            return
        ws.settimeout(None)
        try:
            while True:
                ws.recv()  # nothing is expected but the server's pings, which recv answers
        except Exception as e:  # noqa: BLE001
            if not stop.is_set():
                state.closed += 1
                state.errors[f'closed: {type(e).__name__}: {str(e)[:80]}'] += 1

    gevent.spawn(_report_progress, state, stop)
    group = Group()
    started = time.time()
    for i in range(spec['count']):
        group.spawn(one, i)
    while state.done + state.failed < spec['count'] and not stop.is_set():
        gevent.sleep(0.05)
    _emit('setup', started=started, completed_at=setup_times, answer_ms=answer_ms, sub_keys=sub_keys,
          **state.progress())
    stop.wait()
    _emit('final', **state.progress())
    os._exit(0)  # the connections close with the process (no 10,000 closing handshakes to wait for)


def fanout_client(spec: dict[str, Any]) -> None:
    """spec['count'] subscribers of one topic, each acking every message at once; records (k, ms) per delivery."""
    state = ClientState()
    stop = _wait_for_signal(signal.SIGTERM)
    dump = _wait_for_signal(signal.SIGUSR1)
    records: list[tuple[int, float]] = []

    def one(i: int) -> None:
        try:
            ws = _ws_connect(spec)
            ws.send(json.dumps({'action': 'subscribe', 'id': str(i), 'sub_key': spec['sub_keys'][i]}))
            answer = _answer(ws)
            if answer.get('action') != 'subscribed':
                raise RuntimeError(f"answer {answer.get('action')} {answer.get('status')} {answer.get('details')}")
            state.done += 1
        except Exception as e:  # noqa: BLE001
            state.failed += 1
            state.errors[f'{type(e).__name__}: {str(e)[:100]}'] += 1
            return
        ws.settimeout(None)
        try:
            while True:
                raw = ws.recv()
                now = time.time()
                frame = json.loads(raw)
                action = frame.get('action')
                if action == 'message':
                    data = frame['data']
                    records.append((data['k'], (now - data['t']) * 1000))
                    state.received += 1
                    ws.send(json.dumps({'action': 'ack', 'ack_ids': [frame['ack_id']]}))
                elif action == 'error':
                    state.errors[f"error {frame.get('status')}: {str(frame.get('details'))[:80]}"] += 1
        except Exception as e:  # noqa: BLE001
            if not stop.is_set():
                state.closed += 1
                state.errors[f'closed: {type(e).__name__}: {str(e)[:80]}'] += 1

    gevent.spawn(_report_progress, state, stop)
    for i in range(spec['count']):
        gevent.spawn(one, i)
    _dump_on_signal(spec, state, records, stop, dump)


def _dump_on_signal(spec: dict[str, Any], state: ClientState, records: list[tuple[int, float]], stop: Event,
                    dump: Event) -> None:
    """Write the records to spec['out'] each time the controller asks (SIGUSR1); exit on SIGTERM."""
    while not stop.is_set():
        if dump.wait(0.2):
            dump.clear()
            Path(spec['out']).write_text(json.dumps(records))
            _emit('dumped', records=len(records), **state.progress())
    os._exit(0)


class HttpConnection:
    """One keep-alive HTTP/1.1 connection: a request, then its whole answer (no pipelining)."""

    def __init__(self, host: str, port: int, source: str) -> None:
        self.host, self.port = host, port
        self.sock = socket.create_connection((host, port), timeout=60, source_address=(source, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b''

    def post(self, path: str, body: bytes, auth: str) -> tuple[str, bytes]:
        """(status code, body) of one POST."""
        self.sock.sendall((f'POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAuthorization: {auth}\r\n'
                           f'Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n').encode() + body)
        while b'\r\n\r\n' not in self.buf:
            self._more()
        head, self.buf = self.buf.split(b'\r\n\r\n', 1)
        length = 0
        for line in head.split(b'\r\n')[1:]:
            name, _, value = line.partition(b':')
            if name.strip().lower() == b'content-length':
                length = int(value.strip())
        while len(self.buf) < length:
            self._more()
        answer, self.buf = self.buf[:length], self.buf[length:]
        return common.status_code(head) or 'garbage', answer

    def _more(self) -> None:
        chunk = self.sock.recv(262144)
        if not chunk:
            raise ConnectionResetError('closed by the server')
        self.buf += chunk

    def close(self) -> None:
        self.sock.close()


def _basic() -> str:
    return 'Basic ' + base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode()


def pull_client(spec: dict[str, Any]) -> None:
    """One poller per sub_key, each on its own keep-alive connection; records (k, ms) per message pulled."""
    state = ClientState()
    stop = _wait_for_signal(signal.SIGTERM)
    dump = _wait_for_signal(signal.SIGUSR1)
    records: list[tuple[int, float]] = []
    auth = _basic()
    idle = spec['idle_ms'] / 1000

    def poller(sub_key: str) -> None:
        ask = {'sub_key': sub_key, 'max_messages': spec['max_messages'], 'ack': 'auto'}
        if spec['wait']:
            ask['wait'] = spec['wait']  # long polling: the answer comes when a message does
        body = json.dumps(ask).encode()
        try:
            conn = HttpConnection(spec['host'], spec['port'], spec['source'])
            state.done += 1
            while True:
                status, answer = conn.post('/pubsub/messages/get', body, auth)
                now = time.time()
                state.polls += 1
                if status != '200':
                    try:  # counted by status and details: the cid differs every time
                        details = str(json.loads(answer).get('details'))[:80]
                    except ValueError:
                        details = repr(answer[:80])
                    state.errors[f'pull {status}: {details}'] += 1
                    gevent.sleep(0.1)
                    continue
                messages = json.loads(answer).get('messages') or []
                for m in messages:
                    records.append((m['data']['k'], (now - m['data']['t']) * 1000))
                state.received += len(messages)
                if not messages and idle:
                    gevent.sleep(idle)
        except Exception as e:  # noqa: BLE001
            if not stop.is_set():
                state.closed += 1
                state.errors[f'closed: {type(e).__name__}: {str(e)[:80]}'] += 1

    gevent.spawn(_report_progress, state, stop)
    for key in spec['sub_keys']:
        gevent.spawn(poller, key)
    _dump_on_signal(spec, state, records, stop, dump)


ROLES: dict[str, Callable[[dict[str, Any]], None]] = {
    'idle-client': idle_client, 'fanout-client': fanout_client, 'pull-client': pull_client}


# ============================================================================================ the controller


class ClientProcess:
    """A client process of this script: its spec in a file, its events read from its stdout by a greenlet."""

    _sources = itertools.count()

    def __init__(self, role: str, spec: dict[str, Any], tmp: Path) -> None:
        n = next(self._sources)
        # Each process connects from its own loopback address, so that rounds never run short of ports.
        spec = {**spec, 'source': f'127.0.{1 + n // 250}.{1 + n % 250}', 'out': str(tmp / f'client-{n}.json')}
        self.spec = spec
        spec_path = tmp / f'client-{n}.spec.json'
        spec_path.write_text(json.dumps(spec))
        self.log_path = tmp / f'client-{n}.log'
        with open(self.log_path, 'wb') as log:
            self.proc = subprocess.Popen([sys.executable, __file__, '--role', role, '--spec', str(spec_path)],
                                         stdout=subprocess.PIPE, stderr=log, cwd=common.REPO)
        self.last: dict[str, dict[str, Any]] = {}
        self.changed = Event()
        self._reader = gevent.spawn(self._read)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            self.last[event['event']] = event
            self.changed.set()

    @property
    def progress(self) -> dict[str, Any]:
        return self.last.get('progress', {})

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(f'a client process exited with {self.proc.returncode}:\n'
                               f'{self.log_path.read_text(errors="replace")[-3000:]}')

    def wait_for(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while event not in self.last:
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f'no {event!r} from a client process within {timeout:g} s (last: {self.progress})')
            self.changed.clear()
            self.changed.wait(0.2)
        return self.last[event]

    def records(self, timeout: float = 60) -> list[tuple[int, float]]:
        """Every (k, latency ms) so far, dumped by the client on request."""
        self.last.pop('dumped', None)
        self.proc.send_signal(signal.SIGUSR1)
        self.wait_for('dumped', timeout)
        return [tuple(r) for r in json.loads(Path(self.spec['out']).read_text())]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)


@contextlib.contextmanager
def clients(role: str, specs: list[dict[str, Any]], tmp: Path) -> Iterator[list[ClientProcess]]:
    """Client processes, stopped on the way out."""
    procs: list[ClientProcess] = []
    try:
        for spec in specs:
            procs.append(ClientProcess(role, spec, tmp))
        yield procs
    finally:
        for p in procs:
            p.stop()


def objects_yaml() -> str:
    """The topics, the one definition the clients sign in with, and its permissions."""
    return '\n'.join([
        '# The WebSocket benchmark (bench/websockets.py).', 'pubsub_topic:',
        f'  - name: {IDLE_TOPIC}', '    has_gd: true',
        f'  - name: {FANOUT_TOPIC}', '    has_gd: true',
        f'  - name: {PULL_TOPIC}', '    has_gd: true',
        'security:', f'  - name: {SECURITY}', '    type: basic_auth', f'    username: {USER}',
        f'    password: {PASSWORD}',
        'pubsub_permission:', f'  - security: {SECURITY}', '    pub: ["bench.ws.**"]', '    sub: ["bench.ws.**"]',
    ]) + '\n'


def worker_pid(master: int) -> int:
    """The one worker of gunicorn's master."""
    children = [int(p) for p in Path(f'/proc/{master}/task/{master}/children').read_text().split()]
    if len(children) != 1:
        raise RuntimeError(f'expected one worker process, found {children}')
    return children[0]


def process_cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) of another process so far."""
    fields = Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


class Server:
    """A Conduit server for one measurement: its URL, worker, database and settled RSS."""

    def __init__(self, base: Path, db_url: str) -> None:
        from tests.live_server import LiveServer
        self.live = LiveServer(base, db_url, workers=1, extra_config=(
            '[logging]\nlevel = "WARNING"\n'
            f'[http]\nmax_connections = {MAX_CONNECTIONS}\n'))
        self.live.write_objects('bench.yaml', objects_yaml())
        self.db_url = db_url
        self.pid = 0
        self._engine: Any = None

    def start(self) -> Server:
        import requests
        self.live.start(60)
        self.pid = worker_pid(self.live.proc.pid)

        def loaded() -> bool:
            try:
                r = self.live.request('GET', f'/admin/security/{SECURITY}/permissions', auth=self.live.admin,
                                      timeout=5)
            except requests.RequestException:
                return False
            return r.status_code == 200 and 'bench.ws.**' in r.json()['permissions'].get('sub', [])
        from tests.live_server import poll
        poll(loaded, 60, interval=0.2, message='the object file is loaded')
        return self

    @property
    def spec(self) -> dict[str, Any]:
        return {'host': '127.0.0.1', 'port': self.live.port}

    def engine(self) -> Any:
        """An engine on the server's database, for the set-up phase and checks."""
        if self._engine is None:
            from runtime.db.engine import make_engine
            self._engine = make_engine(self.db_url, pool_size=2)
        return self._engine

    def attached(self) -> int:
        """WebSocket subscriptions whose client is attached to a worker now (their conduit_ws_client rows)."""
        from sqlalchemy import text
        with self.engine().connect() as conn:
            return conn.execute(text("SELECT count(*) FROM conduit_ws_client WHERE owner <> ''")).scalar_one()

    def rss(self) -> float:
        return common.rss_mib(self.pid)

    def cpu(self) -> float:
        return process_cpu_seconds(self.pid)

    def check_alive(self) -> None:
        if self.live.proc is None or self.live.proc.poll() is not None:
            raise RuntimeError(f'the server exited:\n{self.live.log()[-3000:]}')

    def stop(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
        self.live.stop(30)


@contextlib.contextmanager
def server(backend: str, tmp: Path, label: str) -> Iterator[Server]:
    """A fresh server on a fresh database."""
    base = tmp / label
    base.mkdir()
    with common.database(backend, base) as url:
        srv = Server(base / 'server', url)
        try:
            yield srv.start()
        finally:
            srv.stop()


def warm_up(srv: Server) -> None:
    """One connection subscribes, a second one resumes the subscription: the paths the figures use, imported.

    The subscription is left (detached): removing it would let SQLite give its id to the next
    subscription, which the worker then never delivered (see bench/notes/websockets.md).
    """
    spec = {**srv.spec, 'source': '127.0.0.1'}
    first = _ws_connect(spec)
    first.send(json.dumps({'action': 'subscribe', 'id': 'w', 'topic': IDLE_TOPIC}))
    answer = _answer(first)
    if answer.get('action') != 'subscribed':
        raise RuntimeError(f'the warm-up subscribe was answered {answer}')
    second = _ws_connect(spec)
    second.send(json.dumps({'action': 'subscribe', 'id': 'r', 'sub_key': answer['sub_key']}))
    resumed = _answer(second)
    if resumed.get('action') != 'subscribed':
        raise RuntimeError(f'the warm-up resume was answered {resumed}')
    first.close()
    second.close()


def settle(seconds: float = 3.0) -> None:
    gevent.sleep(seconds)


# -------------------------------------------------------------------------------------------- idle


def bulk_subscriptions(srv: Server, count: int, topic: str = IDLE_TOPIC, kind: str = 'websocket',
                       window: int = 100) -> tuple[list[str], float]:
    """count subscriptions of the definition to topic, made in one transaction; (sub_keys, seconds).

    The set-up phase of the figures that are not about subscribing: each subscribe through the
    hub, REST or the admin API reloads the whole registry, which makes thousands of them take
    minutes (the idle part measures that).
    """
    from runtime.cluster.sync import bump
    from runtime.config import PubSubSection
    from runtime.db.engine import transaction
    from runtime.pubsub import statements
    from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
    from runtime.pubsub.subscribers.websocket import KIND_WEBSOCKET
    started = time.perf_counter()
    keys = []
    with transaction(srv.engine(), write=True) as conn:
        registry = statements.load_registry(conn, PubSubSection(), SUBSCRIBER_KINDS.options)
        for _ in range(count):
            _, key = statements.create_subscription(
                conn, registry, SUBSCRIBER_KINDS, topic, kind, security=SECURITY, origin='api',
                options={'delivery_batch_size': window} if kind == KIND_WEBSOCKET else None)
            keys.append(key)
        bump(conn, 'pubsub')
    return keys, time.perf_counter() - started


def registry_load_ms(srv: Server, times: int = 3) -> float:
    """Median milliseconds of one load of the whole registry (what every subscribe does twice), in this process."""
    from runtime.config import PubSubSection
    from runtime.db.engine import transaction
    from runtime.pubsub import statements
    from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
    took = []
    for _ in range(times):
        started = time.perf_counter()
        with transaction(srv.engine()) as conn:
            statements.load_registry(conn, PubSubSection(), SUBSCRIBER_KINDS.options)
        took.append((time.perf_counter() - started) * 1000)
    return common.stats(took)[1]


def _per_thousand(completed: list[float], started: float) -> list[float]:
    """Seconds taken by each successive 1,000 set-ups (a quarter of them when fewer than 2,000)."""
    chunk = 1000 if len(completed) >= 2000 else max(1, len(completed) // 4)
    marks = [started] + [completed[i - 1] for i in range(chunk, len(completed) + 1, chunk)]
    return [b - a for a, b in zip(marks, marks[1:], strict=False)]


def idle_round(backend: str, mode: str, args: argparse.Namespace, tmp: Path, label: str) -> dict[str, Any]:
    """One fresh server: N connections set up by mode, held idle; the worker's RSS and CPU, the set-up time."""
    n = args.connections
    with server(backend, tmp, label) as srv:
        warm_up(srv)
        settle()
        row: dict[str, Any] = {'backend': backend, 'mode': mode, 'connections': n, 'rss_empty': srv.rss()}
        resume_keys = None
        if mode == 'resume':
            resume_keys, row['bulk_s'] = bulk_subscriptions(srv, n)
            row['registry_load_ms'] = registry_load_ms(srv)
            # One resume makes the worker reload its registry now (it would at its next sync anyway).
            probe = _ws_connect({**srv.spec, 'source': '127.0.0.1'})
            probe.send(json.dumps({'action': 'subscribe', 'id': 'p', 'sub_key': resume_keys[-1]}))
            if _answer(probe).get('action') != 'subscribed':
                raise RuntimeError('the probe could not resume a bulk-made subscription')
            probe.close()
            gevent.sleep(1)
            settle()
            row['rss_subscriptions'] = srv.rss()
        counts = [PER_PROCESS] * (n // PER_PROCESS) + ([n % PER_PROCESS] if n % PER_PROCESS else [])
        specs, offset = [], 0
        for c in counts:
            spec = {**srv.spec, 'count': c, 'topic': IDLE_TOPIC, 'connect_only': mode == 'connect'}
            if resume_keys:
                spec['sub_keys'] = resume_keys[offset:offset + c]
            specs.append(spec)
            offset += c
        cpu0 = srv.cpu()
        profiler = _profiler(args, srv, f'idle-{mode}-{label}', args.subscribe_budget if mode == 'subscribe' else 120)
        with clients('idle-client', specs, tmp) as procs:
            started = time.time()
            deadline = time.monotonic() + (args.subscribe_budget if mode == 'subscribe' else 600)
            timeline = []  # (time, connections set up so far), for the pace when the budget stops them
            while True:
                for p in procs:
                    p.check_alive()
                srv.check_alive()
                timeline.append((time.time(), sum(p.progress.get('done', 0) for p in procs)))
                if all('setup' in p.last for p in procs) or time.monotonic() > deadline:
                    break
                gevent.sleep(0.2)
            setup_s = time.time() - started
            if profiler:
                profiler.finish()
            complete = all('setup' in p.last for p in procs)
            done = sum(p.last.get('setup', p.progress).get('done', 0) for p in procs)
            failed = sum(p.last.get('setup', p.progress).get('failed', 0) for p in procs)
            completed = sorted(t for p in procs for t in p.last.get('setup', {}).get('completed_at', []))
            if not complete:  # only the progress reports: when each connection was set up, to 0.2 s
                completed = [next(t for t, n in timeline if n > i) for i in range(timeline[-1][1])]
            answer_ms = sorted(ms for p in procs for ms in p.last.get('setup', {}).get('answer_ms', []))
            row.update(setup_s=(completed[-1] - started) if complete and completed else setup_s,
                       setup_cpu=srv.cpu() - cpu0, done=done, failed=failed, complete=complete,
                       per_thousand=_per_thousand(completed, started),
                       answer_p50=common.percentile(answer_ms, 50) if answer_ms else None,
                       answer_p99=common.percentile(answer_ms, 99) if answer_ms else None,
                       errors=dict(collections.Counter(
                           e for p in procs for e, c in p.progress.get('errors', {}).items() for _ in range(c))))
            print(f"  {label}: {done:,} of {n:,} set up in {row['setup_s']:.1f} s "
                  f"({'complete' if complete else 'stopped at the budget'}), {failed} failed, "
                  f"s per 1,000: {', '.join(f'{s:.1f}' for s in row['per_thousand'])}; worker CPU "
                  f"{row['setup_cpu'] / max(1e-9, setup_s) * 100:.0f} %; answers p50 "
                  f"{common.fmt_ms(row['answer_p50'], '—')} ms, p99 {common.fmt_ms(row['answer_p99'], '—')} ms",
                  flush=True)
            if not complete:
                row['rate_last'] = _recent_rate(completed)
            settle(5)
            row['rss_setup'] = srv.rss()
            row['attached_setup'] = srv.attached()
            hold_cpu0, hold0 = srv.cpu(), time.perf_counter()
            profiler = _profiler(args, srv, f'hold-{label}', args.hold)
            gevent.sleep(args.hold)
            if profiler:
                profiler.finish()
            row['hold_s'] = time.perf_counter() - hold0
            row['hold_cpu'] = (srv.cpu() - hold_cpu0) / row['hold_s']
            row['rss_hold'] = srv.rss()
            row['attached_hold'] = srv.attached()
            row['closed'] = sum(p.progress.get('closed', 0) for p in procs)
            row['client_rss'] = sum(p.progress.get('rss_mib', 0) for p in procs)
            srv.check_alive()
        base = row.get('rss_subscriptions', row['rss_empty'])
        row['kib_per_connection'] = (row['rss_hold'] - base) * 1024 / max(1, done)
        row['kib_per_connection_all'] = (row['rss_hold'] - row['rss_empty']) * 1024 / max(1, done)
        row['setup_cpu_share'] = row['setup_cpu'] / max(1e-9, row['setup_s'])
    print(f"  {label}: worker RSS empty {row['rss_empty']:.0f} MiB, "
          + (f"with {n:,} subscriptions {row['rss_subscriptions']:.0f} MiB (one registry load "
             f"{row['registry_load_ms']:.0f} ms), " if 'rss_subscriptions' in row else '')
          + f"after set-up {row['rss_setup']:.0f} MiB, after {args.hold:g} s idle {row['rss_hold']:.0f} MiB; "
          f"{row['kib_per_connection']:.1f} KiB per connection; attached {row['attached_hold']:,}; "
          f"closed {row['closed']}; idle CPU {row['hold_cpu'] * 100:.1f} %; errors {row['errors'] or 'none'}",
          flush=True)
    return row


def _recent_rate(completed: list[float]) -> float | None:
    """Set-ups per second over the last 10 % of those done (when the budget stopped them)."""
    if len(completed) < 20:
        return None
    tail = completed[-max(10, len(completed) // 10):]
    return (len(tail) - 1) / max(1e-9, tail[-1] - tail[0])


# -------------------------------------------------------------------------------------------- fan-out


class Publisher:
    """Open-loop GD publications over REST, each in a greenlet of its own, on pooled keep-alive connections."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.pool: Queue = Queue()
        self.failures: collections.Counter[str] = collections.Counter()
        self.auth = _basic()

    def _publish(self, topic: str, k: int, due: float) -> None:
        body = json.dumps({'data': {'k': k, 't': due, 'pad': PAD}}).encode()
        pooled = not self.pool.empty()
        conn = self.pool.get() if pooled else self._connect()
        try:
            status, answer = conn.post(f'/pubsub/topic/{topic}', body, self.auth)
        except OSError as e:
            conn.close()
            if not pooled:
                self.failures[type(e).__name__] += 1
                return
            # A keep-alive connection the server closed while it sat in the pool (between rounds): the
            # request was not read, so it is sent again on a new connection.
            conn = self._connect()
            try:
                status, answer = conn.post(f'/pubsub/topic/{topic}', body, self.auth)
            except OSError as e2:
                self.failures[type(e2).__name__] += 1
                conn.close()
                return
        if status != '200':
            self.failures[f'{status} {answer[:80]!r}'] += 1
        self.pool.put(conn)

    def _connect(self) -> HttpConnection:
        return HttpConnection('127.0.0.1', self.srv.live.port, '127.0.0.1')

    def run(self, topic: str, rate: float, count: int, base: int) -> float:
        """Publish count messages (k = base + i) at rate per second; returns the rate kept."""
        group = Group()
        t0 = time.time() + 0.05
        for i in range(count):
            due = t0 + i / rate
            delay = due - time.time()
            if delay > 0:
                gevent.sleep(delay)
            group.spawn(self._publish, topic, base + i, due)
        kept = count / max(1e-9, time.time() - t0) if count > 1 else rate
        group.join()
        return kept


def _client_errors(procs: list[ClientProcess]) -> collections.Counter[str]:
    """What the client processes have counted so far, by error (the five most frequent of each)."""
    counts: collections.Counter[str] = collections.Counter()
    for p in procs:
        counts.update(p.progress.get('errors', {}))
    return counts


def delivery_round(srv: Server, procs: list[ClientProcess], publisher: Publisher, topic: str, subscribers: int,
                   deliveries: int, args: argparse.Namespace, base: int, label: str) -> dict[str, Any]:
    """Publish so that deliveries per second = subscribers × rate; wait for every delivery; the figures."""
    rate = deliveries / subscribers
    total = max(2, round(rate * (args.seconds + args.warmup)))
    skip = round(rate * args.warmup)
    expected = total * subscribers
    received0 = sum(p.progress.get('received', 0) for p in procs)
    polls0 = sum(p.progress.get('polls', 0) for p in procs)
    errors0 = _client_errors(procs)
    client_cpu0 = sum(p.progress.get('cpu', 0) for p in procs)
    cpu0, wall0 = srv.cpu(), time.perf_counter()
    profiler = _profiler(args, srv, label, args.seconds + args.warmup + 10)
    kept = publisher.run(topic, rate, total, base)
    # Wait until everything published has arrived, or nothing has arrived for a while.
    last_count, last_change = -1, time.monotonic()
    while True:
        received = sum(p.progress.get('received', 0) for p in procs) - received0
        if received >= expected:
            break
        if received != last_count:
            last_count, last_change = received, time.monotonic()
        elif time.monotonic() - last_change > args.drain_timeout:
            break
        for p in procs:
            p.check_alive()
        gevent.sleep(0.2)
    if profiler:
        profiler.finish()
    wall = time.perf_counter() - wall0
    server_cpu = (srv.cpu() - cpu0) / wall
    client_cpu = (sum(p.progress.get('cpu', 0) for p in procs) - client_cpu0) / wall
    polls = sum(p.progress.get('polls', 0) for p in procs) - polls0
    records = [r for p in procs for r in p.records() if base <= r[0] < base + total]
    counted = sorted(ms for k, ms in records if k >= base + skip)
    # The deliveries of the counted messages over the time they took: from the due time of the first one
    # until the last delivery arrived (message k was due at t0 + (k - base) / rate), or the time their
    # publication took if that is longer (a server that keeps up is not credited with more than the rate).
    last_arrival = max(((k - base) / rate + ms / 1000 for k, ms in records if k >= base + skip), default=0.0)
    window = max(last_arrival - skip / rate, (total - skip) / rate)
    achieved = len(counted) / window if window > 0 else 0.0
    row = {'deliveries_target': deliveries, 'subscribers': subscribers, 'publish_rate': rate, 'published': total,
           'counted_messages': total - skip, 'expected': (total - skip) * subscribers, 'delivered': len(counted),
           'delivered_all': len(records), 'expected_all': expected, 'achieved': achieved, 'window_s': window,
           'wall_s': wall, 'cpu_us_per_delivery': server_cpu * wall / max(1, len(records)) * 1e6,
           'rate_kept': kept,
           'p50': common.percentile(counted, 50) if counted else None,
           'p99': common.percentile(counted, 99) if counted else None,
           'max': counted[-1] if counted else None, 'server_cpu': server_cpu, 'client_cpu': client_cpu,
           'polls_per_s': polls / wall if polls else None, 'publish_failures': dict(publisher.failures),
           'client_errors': dict(_client_errors(procs) - errors0)}
    publisher.failures.clear()
    print(f"  {label}: {deliveries:,}/s target ({subscribers:,} subscribers × {rate:g} msg/s): "
          f"{achieved:,.0f} deliveries/s, p50 {common.fmt_ms(row['p50'], '—')} ms, p99 "
          f"{common.fmt_ms(row['p99'], '—')} ms, delivered {len(counted):,} of {row['expected']:,}; "
          f"server CPU {server_cpu * 100:.0f} %, clients {client_cpu * 100:.0f} %"
          + (f"; publish failures {row['publish_failures']}" if row['publish_failures'] else '')
          + (f"; client errors {row['client_errors']}" if row['client_errors'] else ''), flush=True)
    return row


def fanout_part(backend: str, args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """WebSocket fan-out rounds, then REST pull rounds, on one server."""
    rows = []
    with server(backend, tmp, f'fanout-{backend}') as srv:
        warm_up(srv)
        publisher = Publisher(srv)
        keys = bulk_subscriptions(srv, args.subscribers, FANOUT_TOPIC, window=args.window)[0]
        per_proc = args.subscribers_per_process
        specs = [{**srv.spec, 'count': len(keys[i:i + per_proc]), 'sub_keys': keys[i:i + per_proc]}
                 for i in range(0, len(keys), per_proc)]
        base = 0
        with clients('fanout-client', specs if args.subscribers else [], tmp) as procs:
            t0 = time.time()
            while procs and sum(p.progress.get('done', 0) + p.progress.get('failed', 0)
                                for p in procs) < args.subscribers:
                for p in procs:
                    p.check_alive()
                gevent.sleep(0.2)
            failed = sum(p.progress.get('failed', 0) for p in procs)
            if failed:
                raise RuntimeError(f'{failed} WebSocket subscribers failed to subscribe: '
                                   f'{[p.progress.get("errors") for p in procs]}')
            print(f'  {args.subscribers:,} WebSocket subscribers resumed their subscriptions in '
                  f'{time.time() - t0:.1f} s', flush=True)
            settle(2)
            for r in range(args.rounds if procs else 0):
                for deliveries in args.deliveries:
                    base += 10_000_000
                    row = delivery_round(srv, procs, publisher, FANOUT_TOPIC, args.subscribers, deliveries, args,
                                         base, f'ws-{backend}-{deliveries}-r{r + 1}')
                    rows.append({'backend': backend, 'via': 'websocket', 'round': r + 1, **row})
                    settle(1)
        if args.pull_subscribers:
            keys = bulk_subscriptions(srv, args.pull_subscribers, PULL_TOPIC, kind='pull')[0]
            # The worker knows them at its next sync: wait until a pull with the last one is answered.
            last = HttpConnection('127.0.0.1', srv.live.port, '127.0.0.1')
            from tests.live_server import poll
            poll(lambda: last.post('/pubsub/messages/get', json.dumps({'sub_key': keys[-1]}).encode(),
                                   _basic())[0] == '200', 30, interval=0.2, message='the pull subscriptions are known')
            last.close()
            per_proc = args.pollers_per_process
            specs = [{**srv.spec, 'sub_keys': keys[i:i + per_proc], 'idle_ms': args.pull_idle_ms,
                      'wait': args.pull_wait, 'max_messages': 100} for i in range(0, len(keys), per_proc)]
            with clients('pull-client', specs, tmp) as procs:
                while sum(p.progress.get('done', 0) for p in procs) < len(keys):
                    for p in procs:
                        p.check_alive()
                    gevent.sleep(0.2)
                settle(2)
                for r in range(args.rounds):
                    for deliveries in args.deliveries:
                        base += 10_000_000
                        row = delivery_round(srv, procs, publisher, PULL_TOPIC, args.pull_subscribers, deliveries,
                                             args, base, f'pull-{backend}-{deliveries}-r{r + 1}')
                        rows.append({'backend': backend, 'via': 'rest_pull', 'round': r + 1, **row})
                        settle(1)
    return rows


# -------------------------------------------------------------------------------------------- profiling


class Profiler:
    """py-spy recording the server's worker (every thread, idle frames left out) for a while."""

    def __init__(self, pid: int, out: Path, seconds: float) -> None:
        self.out = out
        py_spy = shutil.which('py-spy') or str(Path(sys.executable).parent / 'py-spy')
        self.proc = subprocess.Popen([py_spy, 'record', '--pid', str(pid), '--rate', '200', '--format', 'raw',
                                      '--duration', str(int(seconds)), '--output', str(out), '--nonblocking'],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def finish(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.out.exists():
            print(common.summarize_profile(self.out), flush=True)


def _profiler(args: argparse.Namespace, srv: Server, label: str, seconds: float) -> Profiler | None:
    if not args.profile:
        return None
    Path(args.profile).mkdir(parents=True, exist_ok=True)
    return Profiler(srv.pid, Path(args.profile) / f'{label}.txt', seconds)


# -------------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> None:
    """Run the chosen parts on each backend; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--role', choices=sorted(ROLES), help=argparse.SUPPRESS)
    parser.add_argument('--spec', help=argparse.SUPPRESS)
    parser.add_argument('--parts', default='idle,fanout')
    parser.add_argument('--backends', default='sqlite')
    parser.add_argument('--connections', type=int, default=10_000, help='idle connections')
    parser.add_argument('--idle-modes', default='resume,subscribe,connect')
    parser.add_argument('--subscribe-budget', type=float, default=60.0,
                        help='seconds the subscribe set-up may take before it is stopped and reported as far as it got')
    parser.add_argument('--hold', type=float, default=30.0, help='seconds the idle connections are held')
    parser.add_argument('--subscribers', type=int, default=1000, help='WebSocket subscribers of the fan-out topic')
    parser.add_argument('--subscribers-per-process', type=int, default=1000)
    parser.add_argument('--window', type=int, default=100, help='window of each fan-out subscription')
    parser.add_argument('--pull-subscribers', type=int, default=1000, help='REST pull subscriptions (0: none)')
    parser.add_argument('--pollers-per-process', type=int, default=1000)
    parser.add_argument('--pull-idle-ms', type=float, default=0.0,
                        help='a poller that got nothing waits this long before its next poll')
    parser.add_argument('--pull-wait', type=float, default=0.0,
                        help="each poll's wait: seconds it may wait for a message (long polling; 0: none)")
    parser.add_argument('--deliveries', default='1000,10000', help='deliveries per second to aim at')
    parser.add_argument('--seconds', type=float, default=10.0, help='publishing time counted per round')
    parser.add_argument('--warmup', type=float, default=3.0, help='publishing time not counted, first')
    parser.add_argument('--drain-timeout', type=float, default=20.0,
                        help='a round ends when nothing more arrived for this long')
    parser.add_argument('--rounds', type=int, default=2)
    parser.add_argument('--profile', default='', help='record the worker with py-spy into this folder')
    parser.add_argument('--quick', action='store_true', help='a smoke run: tiny numbers')
    parser.add_argument('--no-write', action='store_true')
    parser.add_argument('--report-only', action='store_true',
                        help="rewrite the section from the last run's raw figures (bench/results/*.json)")
    args = parser.parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(Path(args.spec).read_text()))
        return
    if args.quick:
        args.connections, args.hold, args.subscribe_budget, args.idle_modes = 200, 1.0, 60.0, 'resume,subscribe'
        args.subscribers, args.pull_subscribers = 20, 20
        args.deliveries, args.seconds, args.warmup, args.rounds = '100,400', 2.0, 0.5, 1
        args.drain_timeout = 10.0
    args.deliveries = [int(d) for d in args.deliveries.split(',') if d]
    parts = [p for p in args.parts.split(',') if p]
    modes = [m for m in args.idle_modes.split(',') if m]
    for p in parts:
        if p not in ('idle', 'fanout'):
            parser.error(f'no part {p!r}; choose from idle, fanout')
    for m in modes:
        if m not in ('subscribe', 'resume', 'connect'):
            parser.error(f'no idle mode {m!r}; choose from subscribe, resume, connect')
    if args.report_only:
        saved = json.loads((common.RESULTS_DIR / f'{result_name(parts, args.backends)}.json').read_text(
            encoding='utf-8'))
        args = argparse.Namespace(**{**vars(args), **saved.get('args', {})})
        write(saved['idle'], saved['delivery'], saved['load'], args, measured_at=saved.get('measured_at'))
        return
    idle_rows: list[dict[str, Any]] = []
    delivery_rows: list[dict[str, Any]] = []
    load = [os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix='conduit-bench-ws-') as name:
        tmp = Path(name)
        for backend in args.backends.split(','):
            if 'idle' in parts:
                for r in range(args.rounds):
                    for mode in modes:
                        idle_rows.append({'round': r + 1, **idle_round(backend, mode, args, tmp,
                                                                         f'idle-{backend}-{mode}-r{r + 1}')})
                        load.append(os.getloadavg())
            if 'fanout' in parts:
                delivery_rows += fanout_part(backend, args, tmp)
                load.append(os.getloadavg())
    if not args.no_write:
        write(idle_rows, delivery_rows, load, args)


# -------------------------------------------------------------------------------------------- the report


def _both(rows: list[dict[str, Any]], fmt: Callable[[dict[str, Any]], str]) -> str:
    """Every round's figure, in order."""
    return ' · '.join(fmt(r) for r in rows)


def _mib(v: float | None) -> str:
    return '—' if v is None else f'{v:,.0f}'


def _done(r: dict[str, Any]) -> str:
    failed = f", {r['failed']:,} failed" if r.get('failed') else ''
    return f"{r['done']:,}{failed}" + ('' if r['complete'] else ' (stopped at the budget)')


def _backends(args: argparse.Namespace) -> str:
    names = {'sqlite': 'SQLite', 'postgresql': 'PostgreSQL'}
    return ' and '.join(names.get(b, b) for b in args.backends.split(','))


def _first_last(r: dict[str, Any]) -> str:
    per = r['per_thousand']
    if not per:
        return '—'
    if r['done'] >= 2000:
        return f'{per[0]:.1f} → {per[-1]:.1f}'
    # Fewer than 2,000 (stopped at the budget): quarters of what was done, scaled to 1,000.
    chunk = r['done'] // 4
    return f'{per[0] * 1000 / chunk:.0f} → {per[-1] * 1000 / chunk:.0f} (pace of the first and last {chunk:,})'


def _if_complete(fmt: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any]], str]:
    """fmt, or '—' for a set-up stopped at the budget."""
    # Such a set-up leaves subscribes queued in the worker: its later figures are not an idle worker's.
    return lambda row: fmt(row) if row['complete'] else '—'


def _open(r: dict[str, Any]) -> str:
    return f"{r['attached_hold']:,} attached, {r['closed']} closed"


def _pct(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: f'{r[key] * 100:.0f} %'


def _num(key: str, digits: int = 0) -> Callable[[dict[str, Any]], str]:
    return lambda r: '—' if r.get(key) is None else f'{r[key]:,.{digits}f}'


def _ms(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: common.fmt_ms(r[key], '—')


def _delivered(r: dict[str, Any]) -> str:
    return f"{r['delivered']:,} of {r['expected']:,}"


def idle_lines(idle_rows: list[dict[str, Any]], args: argparse.Namespace) -> tuple[list[str], list[dict]]:
    """The idle table, its explanation and its headline figures."""
    by_key: dict[tuple[str, str], list[dict[str, Any]]] = collections.defaultdict(list)
    for row in idle_rows:
        by_key[(row['backend'], row['mode'])].append(row)
    lines = [f'## WebSocket: {args.connections:,} idle subscribers on one worker, {_backends(args)} '
             '(target: ≤ 400 MB)', '',
             '| backend | set-up | connections set up | set-up time s | s per 1,000 set-ups (first → last) | '
             'worker CPU per set-up, ms | '
             'worker RSS empty, MiB | with the subscriptions, no connection | after set-up | '
             f'after {args.hold:g} s idle | KiB per connection | worker CPU while idle | at the end |',
             '|' + '---|' * 13]
    summary = []
    for (backend, mode), rows in by_key.items():
        setup = {'subscribe': '`subscribe {topic}` (a new subscription each)',
                 'resume': '`subscribe {sub_key}` (resume; made beforehand)',
                 'connect': 'authenticated, no subscription (`ping`; for comparison)'}[mode]
        idle = _if_complete
        cells = [backend, setup, _both(rows, _done), _both(rows, _num('setup_s', 1)), _both(rows, _first_last),
                 _both(rows, lambda r: f"{r['setup_cpu'] / max(1, r['done']) * 1000:.1f}"),
                 _both(rows, _num('rss_empty')), _both(rows, _num('rss_subscriptions')),
                 _both(rows, idle(_num('rss_setup'))), _both(rows, idle(_num('rss_hold'))),
                 _both(rows, idle(_num('kib_per_connection', 1))),
                 _both(rows, idle(lambda r: f"{r['hold_cpu'] * 100:.1f} %")), _both(rows, idle(_open))]
        lines.append('| ' + ' | '.join(cells) + ' |')
        if mode == 'connect':
            continue  # connections without a subscription: for taking the figure apart, not a target's
        if all(r['complete'] for r in rows):
            worst = max(r['rss_hold'] for r in rows) * 1.048576  # MiB → MB
            summary.append({'figure': f'{args.connections:,} idle WebSocket subscribers, worker RSS, {backend}, '
                                      f'set up by {mode}', 'target': '≤ 400 MB',
                            'measured': f"{worst:,.0f} MB at most ({_both(rows, _num('kib_per_connection', 1))} KiB "
                                        f"per connection; set-up {_both(rows, _num('setup_s'))} s)",
                            'met': worst <= 400})
        else:
            summary.append({'figure': f'{args.connections:,} idle WebSocket subscribers set up by {mode}, {backend}',
                            'target': 'within minutes',
                            'measured': f"{_both(rows, _num('done'))} set up in {args.subscribe_budget:g} s",
                            'met': False})
    resumes = [r for r in idle_rows if r['mode'] == 'resume']
    lines += ['', 'Each cell: every round in order, each on a fresh server and database. The connections come from '
              f'{-(-args.connections // PER_PROCESS)} client processes (gevent and websocket-client, up to '
              f'{PER_PROCESS:,} connections each, {SETUP_CONCURRENCY} being set up at a time per process), each '
              'authenticated by Basic Auth on the upgrade (one definition for all) and holding one subscription '
              'of one topic (window 100). "Set-up time": from starting the client processes to the last subscribe '
              'answered. "resume": the subscriptions were made first, in one transaction straight in the database '
              '(`statements.create_subscription`, the statement the hub runs)'
              + (f", which took {_both(resumes, _num('bulk_s', 1))} s" if resumes else '') +
              ', then each connection resumed one by its sub_key'
              + (f"; one load of the worker's registry with them took {_both(resumes, _num('registry_load_ms'))} ms "
                 '(`statements.load_registry`, timed in this process: a subscribe runs it twice)' if resumes else '') +
              '. RSS is the worker process\'s VmRSS, read after '
              'a warm-up (one subscribe, and a resume of it) and 3 s of quiet; "KiB per connection": (after '
              'idle − before the connections) ÷ connections, where "before" is with the subscriptions when they '
              f'were made beforehand. Worker CPU while idle: over the {args.hold:g} s hold (the server pings every '
              'connection every 20 s). "At the end": conduit_ws_client rows with an owner, and connections the '
              'clients saw closed.', '']
    return lines, summary


def delivery_lines(delivery_rows: list[dict[str, Any]], args: argparse.Namespace) -> tuple[list[str], list[dict]]:
    """The fan-out table, its explanation and its headline figures."""
    lines = [f'## WebSocket: fan-out of GD messages to {args.subscribers:,} subscribers, and REST pull beside it, '
             f'{_backends(args)} (targets: ≥ 10,000 deliveries/s; p99 ≤ 100 ms at 10,000 deliveries/s)', '',
             '| backend | via | subscribers | deliveries/s aimed at (publications/s) | deliveries/s achieved | '
             'publish→client p50 ms | p99 ms | max ms | delivered of expected | worker CPU | '
             'worker CPU per delivery, µs | clients\' CPU |', '|' + '---|' * 12]
    summary = []
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    for row in delivery_rows:
        groups[(row['backend'], row['via'], row['deliveries_target'])].append(row)
    for (backend, via, target), rows in groups.items():
        r0 = rows[0]
        for r in rows:
            if 'window_s' not in r:  # figures of a run before the window was kept: the same rule, from them
                r['window_s'] = max(r['delivered'] / r['achieved'], r['counted_messages'] / r['publish_rate'])
                r['achieved'] = r['delivered'] / r['window_s']
        cells = [backend, 'WebSocket' if via == 'websocket' else 'REST pull', f"{r0['subscribers']:,}",
                 f"{target:,} ({r0['publish_rate']:g})", _both(rows, _num('achieved')), _both(rows, _ms('p50')),
                 _both(rows, _ms('p99')), _both(rows, _ms('max')), _both(rows, _delivered),
                 _both(rows, _pct('server_cpu')), _both(rows, _num('cpu_us_per_delivery')),
                 _both(rows, _pct('client_cpu'))]
        lines.append('| ' + ' | '.join(cells) + ' |')
        if via == 'websocket' and target == min(args.deliveries) and target < max(args.deliveries):
            summary.append({'figure': f'publish→WebSocket client latency at {target:,} deliveries/s, {backend}',
                            'target': '— (p99 ≤ 100 ms is set at 10,000/s)',
                            'measured': f"p50 {_both(rows, _ms('p50'))} ms, p99 {_both(rows, _ms('p99'))} ms, "
                                        f"{_both(rows, _num('achieved'))} deliveries/s (rounds)", 'met': None})
        if via == 'websocket' and target == max(args.deliveries):
            achieved = min(r['achieved'] for r in rows)
            p99s = [r['p99'] for r in rows]
            summary.append({'figure': f"WebSocket deliveries/s, {r0['subscribers']:,} subscribers of one topic, "
                                      f'{backend}', 'target': '≥ 10,000 deliveries/s',
                            'measured': f"{_both(rows, _num('achieved'))} deliveries/s (rounds), the worker at "
                                        f"{_both(rows, _pct('server_cpu'))} of a core"
                                        + (f", {_both(rows, _num('cpu_us_per_delivery'))} µs of its CPU per delivery"
                                           if all('cpu_us_per_delivery' in r for r in rows) else ''),
                            'met': achieved >= 10_000})
            summary.append({'figure': f'publish→WebSocket client latency at {target:,} deliveries/s, {backend}',
                            'target': 'p99 ≤ 100 ms',
                            'measured': f"p50 {_both(rows, _ms('p50'))} ms, p99 {_both(rows, _ms('p99'))} ms (rounds)",
                            'met': all(p is not None and p <= 100 for p in p99s)})
    pull_wait = (f', after {args.pull_idle_ms:g} ms when it was empty' if args.pull_idle_ms else ', empty or not')
    if args.pull_wait:
        pull_wait = f' (each poll long-polling: `wait` {args.pull_wait:g} s, answered when a message arrives)'
    lines += ['', 'Each cell: every round in order. One server per backend. WebSocket: '
              f'{args.subscribers:,} subscriptions of the topic (window {args.window}), made beforehand in one '
              'transaction straight in the database, each resumed by `subscribe {sub_key}` on a connection of its '
              'own (one client process), which acks every message with an ack frame as it arrives. '
              f'REST pull: {args.pull_subscribers:,} pull subscriptions of another topic, made the same way for '
              'the same definition, each read by one poller on a keep-alive connection (`POST '
              '/pubsub/messages/get`, `max_messages` 100, `ack: auto`), the next poll as soon as an answer came'
              f'{pull_wait}. GD messages are published over REST (`POST /pubsub/topic/...`, about '
              f'{len(PAD) + 40} bytes of JSON data) by the controlling process, open loop: publication k is due at '
              't0 + k / rate, each in a greenlet of its own, and its data carries that due time; latency runs from '
              'it to the receipt by the client (`time.time()` on both sides, one machine). '
              f'{args.seconds:g} s of publishing counted per round after {args.warmup:g} s not counted; a round '
              f'ends once every delivery arrived (or none for {args.drain_timeout:g} s). "Deliveries/s achieved": '
              'deliveries of the counted messages ÷ the time from the first one\'s due time to the last '
              "delivery's arrival, or ÷ the time their publication took if that is longer. "
              '"Worker CPU per delivery": the worker\'s CPU time over the round ÷ the deliveries in it, the figure '
              'least moved by other work on the machine. '
              'CPU over the round: the worker process and the client processes (100 % = one '
              'core).', '']
    return lines, summary


def result_name(parts: list[str], backends: str = 'sqlite') -> str:
    """The results file of a run: one per part and backend, so that make bench runs each within its time limit."""
    name = NAME if len(parts) != 1 else f'{NAME}_{parts[0]}'
    return name if backends == 'sqlite' else f"{name}_{backends.replace(',', '_')}"


def write(idle_rows: list[dict[str, Any]], delivery_rows: list[dict[str, Any]], load: list[tuple[float, ...]],
          args: argparse.Namespace, measured_at: str | None = None) -> None:
    """The results section(s) and the raw figures."""
    lines: list[str] = []
    summary: list[dict] = []
    parts = [p for p in args.parts.split(',') if p]
    if idle_rows:
        more, figures = idle_lines(idle_rows, args)
        lines += more
        summary += figures
    if delivery_rows:
        more, figures = delivery_lines(delivery_rows, args)
        lines += more
        summary += figures
    loads = ', '.join(f'{a:.2f}' for a, _, _ in load)
    lines += [f'Load average (1 min) at the start and after each measurement: {loads} (the machine is shared by other '
              f'work; {os.cpu_count()} CPUs).', '']
    options = [f'--parts {args.parts}', f'--backends {args.backends}']
    if 'idle' in parts:
        options += [f'--connections {args.connections}', f'--idle-modes {args.idle_modes}',
                    f'--subscribe-budget {args.subscribe_budget:g}', f'--hold {args.hold:g}']
    if 'fanout' in parts:
        options += [f'--subscribers {args.subscribers}', f'--pull-subscribers {args.pull_subscribers}',
                    f"--deliveries {','.join(str(d) for d in args.deliveries)}", f'--seconds {args.seconds:g}',
                    f'--warmup {args.warmup:g}']
    options.append(f'--rounds {args.rounds}')
    lines += [f"Command: `{common.command_line('websockets.py', options)}`"]
    saved_args = {k: v for k, v in vars(args).items() if k not in ('role', 'spec', 'report_only', 'no_write')}
    data = {'idle': idle_rows, 'delivery': delivery_rows, 'load': load, 'summary': summary, 'args': saved_args}
    if measured_at:  # the section rewritten from saved figures: they were measured then, not now
        data['measured_at'] = measured_at
    common.write_result(result_name(parts, args.backends), '\n'.join(lines), data)


if __name__ == '__main__':
    main()
