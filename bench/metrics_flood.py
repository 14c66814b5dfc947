"""What invented HTTP methods cost /metrics: its size and scrape time after a flood, and /health meanwhile.

Starts a real server (SQLite, one worker), sends ``--requests`` unauthenticated requests, each with
an invented method and path, from ``--clients`` threads, then scrapes ``/metrics`` (with the admin
credentials) while one client polls ``GET /health``. Prints the size of the exposition, the number
of ``conduit_http_requests_total`` series, the scrape time and the slowest ``/health`` meanwhile.
Every label is bounded (runtime.observability.metrics), so the size should not grow with the flood; before that,
20,000 such requests made the exposition 44 MB. It writes nothing.

    .venv/bin/python bench/metrics_flood.py [--requests 20000] [--clients 8]
"""

from __future__ import annotations

import argparse
import random
import socket
import string
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.live_server import LiveServer  # noqa: E402


def _flood(port: int, count: int) -> None:
    for _ in range(count):
        method = ''.join(random.choices(string.ascii_uppercase, k=8))
        with socket.create_connection(('127.0.0.1', port), timeout=10) as s:
            s.sendall(f'{method} /x{random.randrange(10 ** 9)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
                      .encode())
            while s.recv(65536):
                pass


def main(argv: list[str] | None = None) -> int:
    """Flood, scrape, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--requests', type=int, default=20_000)
    parser.add_argument('--clients', type=int, default=8)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        server = LiveServer(base, f'sqlite:///{base / "conduit.db"}').start()
        try:
            per_client = max(1, args.requests // args.clients)
            threads = [threading.Thread(target=_flood, args=(server.port, per_client)) for _ in range(args.clients)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            slowest, done = [0.0], threading.Event()

            def probe() -> None:
                while not done.is_set():
                    started = time.monotonic()
                    requests.get(server.url + '/health', timeout=30)
                    slowest[0] = max(slowest[0], time.monotonic() - started)
                    time.sleep(0.01)

            prober = threading.Thread(target=probe)
            prober.start()
            started = time.monotonic()
            r = requests.get(server.url + '/metrics', auth=server.admin, timeout=120)
            took = time.monotonic() - started
            done.set()
            prober.join()
            r.raise_for_status()
            series = sum(1 for line in r.text.splitlines() if line.startswith('conduit_http_requests_total'))
            print(f'{per_client * args.clients:,} requests with invented methods: /metrics {len(r.content):,} bytes, '
                  f'{series} conduit_http_requests_total series, scrape {took * 1000:.0f} ms, '
                  f'slowest /health meanwhile {slowest[0] * 1000:.0f} ms')
        finally:
            server.stop()
    return 0


if __name__ == '__main__':
    sys.exit(main())
