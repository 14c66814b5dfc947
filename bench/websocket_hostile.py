"""Hostile WebSocket clients before sign-in: the worker's memory, and /health under fragment floods.

A real Conduit server (gunicorn, one gevent worker, SQLite, logging at WARNING, every
``[websocket]`` setting at its default) on loopback. The attackers are plain sockets, greenlets of
this process (gevent monkey-patched), each past the upgrade without credentials:

- ``memory``: N connections each send a text frame header announcing just under
  ``max_frame_bytes`` (6 MiB), then 64 KiB of its payload, and never a hello; then (``held``) N
  connections each send an unfinished frame just within ``hello_max_bytes`` (3,900 of the 4,000
  bytes its header announces) and wait for the hello timeout. The worker's RSS is sampled every
  100 ms: idle before, the peak, and 10 s after the last attack connection ended.
- ``flood``: F connections each send a text frame of 1 byte, then 1-byte continuation frames
  as fast as they can, reconnecting at once when the server closes them; meanwhile ``GET /health``
  on a new connection every 20 ms (slow_clients.py's sampler), and a baseline without attackers.

The soft RLIMIT_NOFILE is raised to the hard limit first (the server inherits it).

    .venv/bin/python bench/websocket_hostile.py [--sockets 2000] [--floods 8] [--seconds 10]
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import base64  # noqa: E402
import os  # noqa: E402
import socket  # noqa: E402
import struct  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
from gevent.lock import BoundedSemaphore  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402
from bench.sign_in_flood import process_cpu_seconds, worker_pids  # noqa: E402
from bench.slow_clients import health_figures, raise_nofile, sample_health  # noqa: E402
from tests.live_server import LiveServer  # noqa: E402

NAME = 'websocket_hostile'
HOST = '127.0.0.1'
#: Payload length the memory attack's frame header announces: just under max_frame_bytes' default.
ANNOUNCED = 6 * 1024 * 1024 - 1
#: Bytes of that payload each memory attacker sends.
SENT = 64 * 1024
MASK = b'\x00\x00\x00\x00'


def upgrade(port: int) -> socket.socket:
    """A socket past the WebSocket handshake, without credentials."""
    sock = socket.create_connection((HOST, port), timeout=30)
    key = base64.b64encode(os.urandom(16)).decode('ascii')
    sock.sendall((f'GET /pubsub/ws HTTP/1.1\r\nHost: {HOST}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade'
                  f'\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n').encode('ascii'))
    head = b''
    while b'\r\n\r\n' not in head:
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError('closed during the handshake')
        head += chunk
    if not head.startswith(b'HTTP/1.1 101'):
        raise ConnectionError(head.split(b'\r\n', 1)[0].decode('latin-1'))
    return sock


def close_code(sock: socket.socket) -> str:
    """Read until the server ends the connection: its close code, or how it ended."""
    data = b''
    try:
        while chunk := sock.recv(65536):
            data += chunk
            if len(data) >= 4 and data[0] & 0x0F == 0x8:
                return str(struct.unpack('!H', data[2:4])[0])
    except OSError as e:
        return type(e).__name__
    return 'closed, no closing frame'


def worker(server: LiveServer) -> int:
    """The server's one worker."""
    assert server.proc is not None
    pids = worker_pids(server.proc.pid)
    if len(pids) != 1:
        raise RuntimeError(f'expected one worker, found {pids}')
    return pids[0]


def memory_attack(server: LiveServer, sockets: int, announced: int = ANNOUNCED, sent: int = SENT) -> dict:
    """N unauthenticated connections each sending a partial 6 MiB frame: the worker's RSS before, at peak, after."""
    pid = worker(server)
    gevent.sleep(2.0)
    idle = common.rss_mib(pid)
    outcomes: Counter[str] = Counter()
    state = {'open': 0, 'most_open': 0, 'peak': idle}

    connecting = BoundedSemaphore(200)

    def attacker() -> None:
        with connecting:  # 200 connect at a time; once past its frame, each waits outside
            try:
                sock = upgrade(server.port)
            except OSError as e:
                outcomes[f'upgrade failed: {type(e).__name__}'] += 1
                return
            state['open'] += 1
            state['most_open'] = max(state['most_open'], state['open'])
            try:
                # The shortest length encoding, as RFC 6455 §5.2 requires (wsproto refuses any other).
                head = (struct.pack('!BBH', 0x01, 0x80 | 126, announced) if announced < 1 << 16
                        else struct.pack('!BBQ', 0x01, 0x80 | 127, announced))
                sock.sendall(head + MASK + b'x' * sent)
            except OSError:
                pass
        outcomes[close_code(sock)] += 1
        state['open'] -= 1
        sock.close()

    def sampler() -> None:
        while True:
            state['peak'] = max(state['peak'], common.rss_mib(pid))
            gevent.sleep(0.1)
    watch = gevent.spawn(sampler)
    started = time.perf_counter()
    gevent.joinall([gevent.spawn(attacker) for _ in range(sockets)])
    elapsed = time.perf_counter() - started
    ended = common.rss_mib(pid)
    gevent.sleep(10.0)
    after = common.rss_mib(pid)
    watch.kill()
    row = {'announced': announced, 'sent': sent, 'sockets': sockets, 'idle_mib': idle, 'peak_mib': state['peak'],
           'at_end_mib': ended,
           'after_10s_mib': after, 'most_open': state['most_open'], 'outcomes': dict(outcomes), 'seconds': elapsed}
    print(f"memory: idle {idle:.0f} MiB, peak {state['peak']:.0f} MiB (+{state['peak'] - idle:.0f}), 10 s after "
          f"{after:.0f} MiB (+{after - idle:.0f}); at most {state['most_open']} open; closes {dict(outcomes)}",
          flush=True)
    return row


def flood_attack(server: LiveServer, floods: int, seconds: float) -> dict:
    """F connections sending 1-byte continuation frames, reconnecting; /health meanwhile."""
    pid = worker(server)
    outcomes: Counter[str] = Counter()
    batch = b''.join(struct.pack('!BB', 0x00, 0x81) + MASK + b' ' for _ in range(2000))

    def attacker() -> None:
        while True:
            try:
                sock = upgrade(server.port)
            except OSError as e:
                outcomes[f'upgrade failed: {type(e).__name__}'] += 1
                gevent.sleep(0.1)
                continue
            reader = gevent.spawn(close_code, sock)
            try:
                sock.sendall(struct.pack('!BB', 0x01, 0x81) + MASK + b'{')
                while not reader.ready():
                    sock.sendall(batch)
            except OSError:
                pass
            outcomes[reader.get()] += 1
            sock.close()

    rows = []
    for kind, count in (('baseline', 0), ('fragment flood', floods)):
        attackers = [gevent.spawn(attacker) for _ in range(count)]
        gevent.sleep(1.0 if count else 0)
        cpu0, wall0 = process_cpu_seconds(pid), time.perf_counter()
        samples = sample_health(HOST, server.port, seconds, 0.02, 2.0)
        cpu = (process_cpu_seconds(pid) - cpu0) / (time.perf_counter() - wall0)
        gevent.killall(attackers)
        health = health_figures(samples, 2.0)
        rows.append({'attack': kind, 'connections': count, 'health': health, 'worker_cpu': cpu,
                     'closes': dict(outcomes)})
        print(f"{kind}: /health p50 {common.fmt_ms(health['p50'])} ms, p99 {common.fmt_ms(health['p99'])} ms, "
              f"{health['failed']} of {health['samples']} failed; worker CPU {cpu * 100:.0f} %; "
              f"attack connections ended {dict(outcomes)}", flush=True)
        outcomes.clear()
        gevent.sleep(1.0)
    return {'rows': rows}


def main(argv: list[str] | None = None) -> None:
    """Run both attacks on one server; write the results section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--sockets', type=int, default=2000, help='connections of the memory attack')
    parser.add_argument('--floods', type=int, default=8, help='connections of the fragment flood')
    parser.add_argument('--seconds', type=float, default=10.0, help='how long the flood (and the baseline) is held')
    parser.add_argument('--no-write', action='store_true')
    args = parser.parse_args(argv)
    soft, hard = raise_nofile()
    if soft < args.sockets + 200:
        raise SystemExit(f'RLIMIT_NOFILE is {soft} (hard {hard}): too few for {args.sockets} sockets')
    with tempfile.TemporaryDirectory(prefix='conduit-bench-ws-hostile-') as name:
        base = Path(name)
        server = LiveServer(base, f'sqlite:///{base / "var" / "conduit.db"}', workers=1,
                            extra_config='[logging]\nlevel = "WARNING"\n')
        server.start()
        try:
            memory = memory_attack(server, args.sockets)
            held = memory_attack(server, args.sockets, 4000, 3900)
            flood = flood_attack(server, args.floods, args.seconds)
        finally:
            server.stop()
    if not args.no_write:
        write(memory, held, flood, args)


def write(memory: dict, held: dict, flood: dict, args: argparse.Namespace) -> None:
    """The results section and its raw figures."""
    m = memory
    grew, left = m['peak_mib'] - m['idle_mib'], m['after_10s_mib'] - m['idle_mib']
    held_grew = held['peak_mib'] - held['idle_mib']
    attacked = [r for r in flood['rows'] if r['connections']]
    lines = ['## Hostile WebSocket clients before sign-in (targets: ≤ 100 MB more worker memory under '
             f'{args.sockets:,} partial-frame connections and within 20 MB of idle 10 s after; /health p99 ≤ 100 ms '
             f'under {args.floods} fragment floods)', '',
             '| attack | figure |', '|---|---|',
             f"| {m['sockets']:,} connections, each a frame header announcing 6 MiB and 64 KiB of it, no hello | "
             f"worker RSS idle {m['idle_mib']:.0f} MiB, peak {m['peak_mib']:.0f} MiB (+{grew:.0f} MiB), 10 s after "
             f"the last closed {m['after_10s_mib']:.0f} MiB ({left:+.0f} MiB); at most {m['most_open']:,} open at "
             f"once; how they ended: {', '.join(f'{k}: {v:,}' for k, v in sorted(m['outcomes'].items()))} |",
             f"| {held['sockets']:,} connections, each 3,900 bytes of a 4,000-byte frame (within hello_max_bytes), "
             f"held to the hello timeout | worker RSS idle {held['idle_mib']:.0f} MiB, peak {held['peak_mib']:.0f} MiB "
             f"(+{held_grew:.0f} MiB, {held_grew * 1024 / max(1, held['most_open']):.0f} KiB per open connection), "
             f"10 s after {held['after_10s_mib']:.0f} MiB ({held['after_10s_mib'] - held['idle_mib']:+.0f} MiB); "
             f"at most {held['most_open']:,} open at once; how they ended: "
             f"{', '.join(f'{k}: {v:,}' for k, v in sorted(held['outcomes'].items()))} |"]
    for r in flood['rows']:
        h = r['health']
        lines.append(f"| {r['attack']} ({r['connections']} connections) | /health p50 {common.fmt_ms(h['p50'])} ms, "
                     f"p99 {common.fmt_ms(h['p99'])} ms, {h['failed']} of {h['samples']:,} failed; worker CPU "
                     f"{r['worker_cpu'] * 100:.0f} %; attack connections ended: "
                     f"{', '.join(f'{k}: {v:,}' for k, v in sorted(r['closes'].items())) or '—'} |")
    cmd = common.command_line('websocket_hostile.py', [f'--sockets {args.sockets}', f'--floods {args.floods}',
                                                       f'--seconds {args.seconds:g}'])
    lines += ['', 'One Conduit server (one gevent worker, SQLite, `[websocket]` at its defaults) on loopback; the '
              'attackers are greenlets of the benchmark process, 200 connecting at a time. "Worker RSS": VmRSS of '
              'the worker, sampled every 100 ms. Fragment flood: each connection sends a 1-byte text frame and '
              'then 1-byte continuation frames without pause, and reconnects at once when closed; /health is '
              'asked on a new connection every 20 ms, 2 s allowed, a failure counting as slower than any answer.',
              '', f'Command: `{cmd}`']
    met = (grew * 1.048576 <= 100 and left * 1.048576 <= 20
           and all(r['health']['p99'] is not None and r['health']['p99'] <= 100 for r in attacked))
    summary = [{'figure': 'hostile WebSocket clients before sign-in', 'met': met,
                'target': '≤ 100 MB over idle with 2,000 partial frames, ≤ 20 MB 10 s after; /health p99 ≤ 100 ms',
                'measured': f'+{grew:.0f} MiB at peak, {left:+.0f} MiB after 10 s; /health p99 '
                            + ', '.join(common.fmt_ms(r['health']['p99']) for r in attacked) + ' ms'}]
    common.write_result(NAME, '\n'.join(lines), {'memory': memory, 'held': held, 'flood': flood,
                                                 'summary': summary})


if __name__ == '__main__':
    main()
