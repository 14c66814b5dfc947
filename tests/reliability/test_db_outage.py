"""PostgreSQL unreachable under load: 503s, never a false 200; delivery resumes; nothing lost."""

from __future__ import annotations

import time
from urllib.parse import urlsplit, urlunsplit

import pytest

from tests.live_server import LiveServer
from tests.reliability.harness import FAST_PUBSUB, Publisher, Tally, prepare, read_delivered, wait_all_delivered
from tests.reliability.tcp_proxy import TcpProxy


def _through(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f'{parts.hostname}:{port}'))


@pytest.mark.slow
@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_database_outage_under_load(db_url, tmp_path, capsys):
    proxy = TcpProxy(urlsplit(db_url).port or 5432).start()
    out = tmp_path / 'delivered.txt'
    server = LiveServer(tmp_path / 'server', _through(db_url, proxy.port), extra_config=FAST_PUBSUB,
                        env={'CONDUIT_TEST_OUT': str(out)})
    prepare(server)
    server.start()
    tally = Tally()
    publisher = Publisher(server, tally)
    try:
        publisher.start()
        time.sleep(2)
        before = len(tally.acknowledged)
        proxy.cut()
        time.sleep(4)
        during = len(tally.acknowledged) - before
        health = server.request('GET', '/health').status_code
        proxy.start()
        time.sleep(4)
        publisher.stop()
        wait_all_delivered(out, tally, timeout=60)
        read_delivered(out, tally)
    finally:
        publisher.stop()
        server.stop()
        proxy.cut()
    with capsys.disabled():
        print(f'\ndatabase outage: {tally.summary()} acknowledged during the outage={during}')
    assert health == 503
    assert tally.errors[503] > 0, f'publishers were not told the storage is unavailable: {tally.summary()}'
    assert set(tally.errors) == {503}, f'only 503 is an honest answer to an outage: {tally.summary()}'
    assert during <= 1, 'a publication was acknowledged while the database was unreachable'
    assert not tally.lost, f'acknowledged but never delivered: {sorted(tally.lost)[:20]}'
    assert len(tally.acknowledged) > before, 'publishing did not resume after the outage'
