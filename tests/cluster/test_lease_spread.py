"""Delivery leases spread over the workers of a real server, each subscription delivered by one at a time.

Two gunicorn workers, 30 service subscriptions, a burst to all of them: both workers deliver a fair
part. The handler records its subscription, the message's number, the worker's pid and when it
started and ended, from which the test checks that each subscription got its messages in order and
never from two workers at once — also when a worker dies and its replacement joins.
"""

from __future__ import annotations

import os
import signal
import textwrap
import time
from collections import Counter, defaultdict
from pathlib import Path

import pytest
from sqlalchemy import func, select

from runtime.db.engine import make_engine
from runtime.db.models import Lease
from tests.live_server import LiveServer

SUBS = 30
BURST = 40  # messages to each subscription

#: Short lease times, so that a test's waits are short.
FAST_PUBSUB = '''
[pubsub]
delivery_batch_size = 10
wait_non_sock_err = 0.05
lease_ttl_secs = 2.0
lease_renew_secs = 0.3
poll_interval_secs = 0.05
'''

SERVICES = '''
import os
import time

import gevent
from runtime import Service

OUT = os.environ['CONDUIT_TEST_OUT']
SUBS = %(subs)d


class _Sink(Service):
    """Records 'service n pid start end' for each message."""

    def handle(self):
        p = self.request.payload
        start = time.time()
        gevent.sleep(p['sleep'])
        with open(OUT, 'a') as f:
            f.write(f"{self.name} {p['n']} {os.getpid()} {start} {time.time()}\\n")


for _i in range(SUBS):
    globals()[f'Sink{_i}'] = type(f'Sink{_i}', (_Sink,), {'name': f'test.spread.sink{_i}', '__module__': __name__})


class Burst(Service):
    """Publishes count messages to each sink, one publisher greenlet per sink (so in order per sink)."""

    name = 'test.spread.burst'

    def handle(self):
        p = self.request.payload

        def one(i):
            for n in range(p['start'], p['start'] + p['count']):
                self.publish(f'test.spread.sink{i}', {'n': n, 'sleep': p['sleep']})
        gevent.joinall([gevent.spawn(one, i) for i in range(SUBS)], raise_error=True)
        self.response.payload = {'published': SUBS * p['count']}
'''

Row = tuple[str, int, int, float, float]


def _records(path: Path) -> list[Row]:
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:
            rows.append((parts[0], int(parts[1]), int(parts[2]), float(parts[3]), float(parts[4])))
    return rows


def _wait(condition, timeout: float, what: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f'{what} not reached within {timeout} s')


def _lease_owners(db_url: str) -> Counter[str]:
    """How many subscription leases each worker holds now, from the database."""
    engine = make_engine(db_url, pool_size=1)
    try:
        with engine.connect() as conn:
            rows = conn.execute(select(Lease.owner, func.count()).where(Lease.name.like('pubsub:sub:%'),
                                                                         Lease.expires_at > time.time())
                                .group_by(Lease.owner)).all()
    finally:
        engine.dispose()
    return Counter({owner: count for owner, count in rows})


def _worker_pids(server: LiveServer) -> set[int]:
    return {server.request('GET', '/admin/status', auth=server.admin).json()['pid'] for _ in range(20)}


def _burst(server: LiveServer, out: Path, start: int) -> list[Row]:
    """BURST messages to every subscription; returns the records of the burst once all are handled."""
    assert server.invoke('test.spread.burst', {'start': start, 'count': BURST, 'sleep': 0.004}) == \
        {'published': SUBS * BURST}

    def handled() -> list[Row] | None:
        rows = [r for r in _records(out) if start <= r[1] < start + BURST]
        return rows if len({(r[0], r[1]) for r in rows}) == SUBS * BURST else None
    return _wait(handled, 120, f'{SUBS * BURST} messages handled')


def _check_spread_and_order(rows: list[Row], out: Path) -> Counter[int]:
    """Both workers delivered a fair part; each subscription in order, by one worker at a time."""
    by_pid = Counter(r[2] for r in rows)
    print(f'\nmessages per worker: {dict(by_pid)}')
    assert len(by_pid) == 2, f'one worker delivered everything: {dict(by_pid)}'
    assert max(by_pid.values()) <= 2 * len(rows) / 3, f'not a fair part: {dict(by_pid)}'
    by_sub: dict[str, list[Row]] = defaultdict(list)
    for r in _records(out):  # every record of the test, the warm-up included: ownership holds throughout
        by_sub[r[0]].append(r)
    assert len(by_sub) == SUBS
    for name, handled in by_sub.items():
        numbers = [r[1] for r in handled]
        assert numbers == sorted(set(numbers)), f'{name}: not in order, or delivered twice: {numbers}'
        for a, b in zip(handled, handled[1:], strict=False):
            assert b[3] >= a[4] - 0.001, f'{name}: messages {a[1]} (pid {a[2]}) and {b[1]} (pid {b[2]}) overlap'
    return by_pid


def _make(server_factory, tmp_path: Path) -> tuple[LiveServer, Path]:  # type: ignore[no-untyped-def]
    out = tmp_path / 'handled.txt'
    server = server_factory(workers=2, extra_config=FAST_PUBSUB, env={'CONDUIT_TEST_OUT': str(out)})
    (server.hot_deploy / 'spread.py').write_text(textwrap.dedent(SERVICES % {'subs': SUBS}))
    server.start()
    _wait(lambda: len(_worker_pids(server)) == 2, 30, 'both workers answering')
    # The first message to each service creates its topic and subscription.
    assert server.invoke('test.spread.burst', {'start': 0, 'count': 1, 'sleep': 0}) == {'published': SUBS}
    _wait(lambda: len(_records(out)) >= SUBS, 60, 'the first message of each subscription handled')
    return server, out


def _spread(db_url: str) -> Counter[str] | None:
    owners = _lease_owners(db_url)
    return owners if sum(owners.values()) == SUBS and len(owners) == 2 and min(owners.values()) >= 10 else None


@pytest.mark.slow
def test_a_burst_to_30_subscriptions_is_delivered_by_both_workers(server_factory, tmp_path, db_url):
    server, out = _make(server_factory, tmp_path)
    _wait(lambda: _spread(db_url), 30, 'the leases spread over both workers')
    rows = _burst(server, out, 1)
    _check_spread_and_order(rows, out)


@pytest.mark.slow
def test_a_worker_that_joins_gets_its_share_from_the_one_that_held_everything(server_factory, tmp_path, db_url):
    server, out = _make(server_factory, tmp_path)
    _wait(lambda: _spread(db_url), 30, 'the leases spread over both workers')
    pids = _worker_pids(server)
    victim = min(pids)
    # Stopped: its leases lapse and the other worker takes every one of them (it is alone).
    os.kill(victim, signal.SIGSTOP)
    try:
        # 60 s: a lease lapses after its TTL, then the other worker's next round takes it; 30 s ran out under CI load.
        _wait(lambda: list(_lease_owners(db_url).values()) == [SUBS], 60, 'one worker holding every lease')
    finally:
        os.kill(victim, signal.SIGCONT)
    # Back: it finds its leases taken, and the other gives back what is above its share.
    _wait(lambda: _spread(db_url), 30, 'the leases spread again')
    rows = _burst(server, out, 1)
    _check_spread_and_order(rows, out)
