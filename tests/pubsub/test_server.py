"""The broker inside real servers: crash recovery (SIGKILL) and delivery ownership across workers."""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.live_server import LiveServer

#: Delivery settings that make a test's waits short.
FAST_PUBSUB = '''
[pubsub]
delivery_batch_size = 50
wait_non_sock_err = 0.05
lease_ttl_secs = 2.0
lease_renew_secs = 0.3
poll_interval_secs = 0.05
'''

SERVICES = '''
import os
import gevent
from runtime import Service

OUT = os.environ['CONDUIT_TEST_OUT']


class Sink(Service):
    """Slow handler: records each message as 'n pid start end'."""

    name = 'test.sink'

    def handle(self):
        start = __import__('time').time()
        gevent.sleep(self.request.payload.get('sleep', 0.003))
        with open(OUT, 'a') as f:
            f.write(f"{self.request.payload['n']} {os.getpid()} {start} {__import__('time').time()}\\n")


class Load(Service):
    """Publishes count messages to test.sink from several greenlets at once."""

    name = 'test.load'

    def handle(self):
        p = self.request.payload
        numbers = list(range(p['start'], p['start'] + p['count']))
        concurrency = p.get('concurrency', 10)
        def worker(i):
            for n in numbers[i::concurrency]:
                self.publish('test.sink', {'n': n, 'sleep': p.get('sleep', 0.003)})
        gevent.joinall([gevent.spawn(worker, i) for i in range(concurrency)], raise_error=True)
        self.response.payload = {'published': len(numbers)}
'''


def _records(path: Path) -> list[tuple[int, int, float, float]]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            rows.append((int(parts[0]), int(parts[1]), float(parts[2]), float(parts[3])))
    return rows


def _wait(condition, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError(f'{what} not reached within {timeout} s')


def _wait_handled(out: Path, count: int) -> list[tuple[int, int, float, float]]:
    def enough() -> list[tuple[int, int, float, float]] | None:
        rows = _records(out)
        return rows if len({r[0] for r in rows}) >= count else None
    return _wait(enough, 60, f'{count} messages handled')


def _make(server_factory, tmp_path: Path, workers: int = 1) -> tuple[LiveServer, Path]:  # type: ignore[no-untyped-def]
    out = tmp_path / 'handled.txt'
    server = server_factory(workers=workers, extra_config=FAST_PUBSUB, env={'CONDUIT_TEST_OUT': str(out)})
    (server.hot_deploy / 'sink.py').write_text(textwrap.dedent(SERVICES))
    return server, out


@pytest.mark.slow
def test_sigkill_mid_delivery_loses_nothing(server_factory, tmp_path):
    """1,000 GD messages, SIGKILL while they are delivered, restart: all handled, few duplicates."""
    server, out = _make(server_factory, tmp_path)
    server.start()
    assert server.invoke('test.load', {'start': 0, 'count': 1000}) == {'published': 1000}
    _wait(lambda: len(_records(out)) >= 200, 60, '200 messages handled')
    server.kill()
    handled_before = len(_records(out))
    assert handled_before < 1000, 'the kill came too late to test anything'

    server.start()
    _wait(lambda: len({r[0] for r in _records(out)}) == 1000, 90, 'every message handled')
    counts = Counter(r[0] for r in _records(out))
    duplicates = sum(c - 1 for c in counts.values())
    assert set(counts) == set(range(1000))
    assert duplicates <= 50, f'{duplicates} duplicates: more than one batch (50)'


@pytest.mark.slow
def test_two_workers_one_owner_in_order_and_takeover(server_factory, tmp_path):
    """With two workers a subscription is delivered by one at a time, in order; a killed owner is replaced."""
    server, out = _make(server_factory, tmp_path, workers=2)
    server.start()
    _wait(lambda: len({server.request('GET', '/admin/status', auth=server.admin).json()['pid']
                       for _ in range(20)}) == 2, 30, 'both workers answering')
    server.invoke('test.load', {'start': 0, 'count': 200, 'concurrency': 1})
    rows = _wait_handled(out, 200)
    assert [r[0] for r in rows] == list(range(200)), 'order within the subscription was not kept'
    for a, b in zip(rows, rows[1:], strict=False):
        assert b[2] >= a[3] - 0.001, f'messages {a[0]} and {b[0]} were handled at the same time'
    owner = rows[-1][1]
    assert len({r[1] for r in rows}) == 1, 'the subscription moved between live workers'

    os.kill(owner, signal.SIGKILL)
    killed_at = time.time()
    server.invoke('test.load', {'start': 200, 'count': 20, 'concurrency': 1})
    rows = _wait_handled(out, 220)
    after = [r for r in rows if r[0] >= 200]
    assert {r[1] for r in after} != {owner}, 'the killed worker cannot have delivered'
    first = min(r[2] for r in after)
    # Lease TTL 2 s + renew interval 0.3 s + worker restart by gunicorn: generous bound, not a benchmark.
    assert first - killed_at < 10, f'takeover took {first - killed_at:.1f} s'
    assert [r[0] for r in after] == list(range(200, 220))
