"""PostgreSQL unreachable or stopped under load: 503s, never a false 200; delivery resumes; nothing lost.

Two kinds of outage: the network to the machine's PostgreSQL cut by a proxy (connections dropped,
new ones refused), and a PostgreSQL server of the test's own stopped and started again, both
cleanly ('fast': the server ends every session) and as a crash ('immediate': it recovers from its
WAL on start).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.live_server import LiveServer
from tests.reliability.harness import FAST_PUBSUB, Publisher, Tally, prepare, read_delivered, wait_all_delivered
from tests.reliability.pg_cluster import PgCluster, find_bindir
from tests.reliability.tcp_proxy import TcpProxy

#: How long the database stays away, in seconds.
OUTAGE = 4.0


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f'{parts.hostname}:{port}'))


def _outage(base: Path, db_url: str, break_db: Callable[[], None], mend_db: Callable[[], None],
            label: str) -> None:
    """Publish, break the database for OUTAGE seconds, mend it, then check every invariant."""
    out = base / 'delivered.txt'
    server = LiveServer(base / 'server', db_url, extra_config=FAST_PUBSUB, env={'CONDUIT_TEST_OUT': str(out)})
    prepare(server)
    server.start()
    tally = Tally()
    publisher = Publisher(server, tally)
    try:
        publisher.start()
        time.sleep(2)
        # Counted once the database is gone: pg_ctl's stop takes a moment, in which commits still succeed.
        break_db()
        before = len(tally.acknowledged)
        time.sleep(OUTAGE)
        during = len(tally.acknowledged) - before
        health = server.request('GET', '/health').status_code
        mend_db()
        time.sleep(4)
        after = len(tally.acknowledged)
        publisher.stop()
        wait_all_delivered(out, tally, timeout=60)
        read_delivered(out, tally)
    finally:
        publisher.stop()
        server.stop()
    print(f'\n{label}: {tally.summary()} acknowledged during the outage={during}')
    assert health == 503
    assert tally.errors[503] > 0, f'publishers were not told the storage is unavailable: {tally.summary()}'
    assert set(tally.errors) == {503}, f'only 503 is an honest answer to an outage: {tally.summary()}'
    # The one publication in flight can be committed before the outage and answered just after it began.
    assert during <= 1, 'a publication was acknowledged while the database was unreachable'
    assert after > before + during, f'publishing did not resume after the outage: {tally.summary()}'
    assert not tally.lost, f'acknowledged but never delivered: {sorted(tally.lost)[:20]}'
    assert not tally.phantom, f'delivered but never published: {sorted(tally.phantom)[:20]}'
    # A lost connection can cost an ack of the batch in flight (20) of the one subscription, no more.
    assert tally.duplicates <= 20, tally.summary()


@pytest.mark.slow
@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_database_unreachable_under_load(db_url, tmp_path, capsys):
    proxy = TcpProxy(urlsplit(db_url).port or 5432).start()
    try:
        with capsys.disabled():
            _outage(tmp_path, _through(db_url, proxy.port), proxy.cut, proxy.start, 'network to the database cut')
    finally:
        proxy.cut()


@pytest.fixture
def pg_cluster() -> Iterator[PgCluster]:
    """A running PostgreSQL server of this test's own (skipped without server tools, except in CI)."""
    bindir = find_bindir()
    if bindir is None:
        if os.environ.get('CI'):
            pytest.fail('PostgreSQL server tools (initdb, pg_ctl) are required in CI; set CONDUIT_TEST_PG_BIN')
        pytest.skip('PostgreSQL server tools (initdb, pg_ctl) not found; set CONDUIT_TEST_PG_BIN')
    cluster = PgCluster(bindir)
    try:
        yield cluster.init().start()
    finally:
        cluster.remove()


@pytest.mark.slow
@pytest.mark.parametrize('mode', ['fast', 'immediate'])
def test_database_stopped_and_started_under_load(pg_cluster, mode, tmp_path, capsys):
    with capsys.disabled():
        _outage(tmp_path, pg_cluster.url, lambda: pg_cluster.stop(mode), pg_cluster.start,
                f'PostgreSQL stopped ({mode}) and started')
