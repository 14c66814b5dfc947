"""The message archive (runtime/pubsub/archive.py): what the broker delivered, as JSON Lines files.

Delivered GD messages, failed attempts and dead letters are written per topic and day, with the
subscriber, times, attempts and outcome, and the message's data; non-GD deliveries are not.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path

from runtime import Service
from runtime.pubsub.archive import safe_topic_name
from runtime.testing import make_settings, wait_until

TIMEOUT = 30.0  # how long a condition may take under load; met conditions return at once


class Booker(Service):
    """Accepts every message."""

    name = 'archive.booker'

    def handle(self):
        pass


class Rejecter(Service):
    """Fails every message whose n is odd."""

    name = 'archive.rejecter'

    def handle(self):
        if self.request.payload['n'] % 2:
            raise ValueError(f'odd number {self.request.payload["n"]}')


def _records(archive: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(archive.rglob('*.jsonl'))
            for line in path.read_text(encoding='utf-8').splitlines()]


def test_deliveries_failures_and_dead_letters_are_archived_by_topic_and_day(runtime_factory, tmp_path):
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt')
    settings.pubsub.wait_non_sock_err = 0.01
    settings.pubsub.max_attempts = 2
    settings.pubsub.err_should_block = False
    settings.archive.flush_interval_secs = 60  # only explicit flushes in this test
    rt = runtime_factory(Booker, Rejecter, settings=settings)
    assert rt.archive is not None
    rt.catalog.create_topic('orders/created')
    rt.catalog.create_topic('orders.fast', has_gd=False)
    booker = rt.catalog.subscribe('orders/created', service='archive.booker')
    rejecter = rt.catalog.subscribe('orders/created', service='archive.rejecter')
    fast = rt.catalog.subscribe('orders.fast', service='archive.booker')
    sent = {rt.broker.publish('orders/created', {'n': n, 'name': 'Zoë'}, correl_id=f'c{n}'): n for n in range(6)}
    rt.broker.publish('orders.fast', {'n': 99})
    wait_until(lambda: len(rt.catalog.dead_letters(rejecter.sub_key)) == 3, TIMEOUT, message='three dead letters')
    wait_until(lambda: rt.catalog.queue_depth(booker.sub_key) == 0 and rt.catalog.queue_depth(fast.sub_key) == 0,
               TIMEOUT, message='queues drained')
    rt.archive.flush()

    archive = tmp_path / 'rt' / 'var' / 'archive'
    day = datetime.now(UTC).strftime('%Y-%m-%d')
    files = sorted(p.relative_to(archive).as_posix() for p in archive.rglob('*.jsonl'))
    assert files and all(f.startswith(f'{safe_topic_name("orders/created")}/date={day}/part-') for f in files)
    records = _records(archive)
    by_outcome: dict[str, list[dict]] = {}
    for r in records:
        by_outcome.setdefault(r['outcome'], []).append(r)
    delivered = by_outcome['delivered']
    # Six to the booker, the three even ones to the rejecter; nothing of the non-GD topic.
    assert sorted((r['subscriber'], r['data']['n']) for r in delivered) == sorted(
        [('archive.booker', n) for n in range(6)] + [('archive.rejecter', n) for n in (0, 2, 4)])
    assert {r['topic'] for r in records} == {'orders/created'}
    # Each odd message failed twice (max_attempts 2), then was dead-lettered once.
    assert sorted((r['data']['n'], r['attempts']) for r in by_outcome['failed']) == [
        (1, 1), (1, 2), (3, 1), (3, 2), (5, 1), (5, 2)]
    assert all(r['error'] == f'ValueError: odd number {r["data"]["n"]}' for r in by_outcome['failed'])
    dead = by_outcome['dead_letter']
    assert sorted(r['data']['n'] for r in dead) == [1, 3, 5]
    assert all(r['reason'] == 'max_attempts' and r['attempts'] == 2 for r in dead), dead
    for r in delivered:
        assert r['msg_id'] in sent and sent[r['msg_id']] == r['data']['n']
        assert r['sub_kind'] == 'service' and r['attempts'] == 1 and r['error'] is None
        assert r['correl_id'] == f'c{r["data"]["n"]}' and r['data']['name'] == 'Zoë'
        assert r['pub_time'] <= r['delivery_time'] <= time.time()
        assert abs(r['latency_ms'] - (r['delivery_time'] - r['pub_time']) * 1000) < 0.01
        assert r['duration_ms'] >= 0 and r['mime_type'] == 'application/json'
        assert r['delivery_time_iso'].startswith(day)
    assert rt.archive.flush() == 0  # nothing left buffered


def test_records_are_flushed_periodically_and_when_the_broker_stops(runtime_factory, tmp_path):
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt')
    settings.archive.flush_interval_secs = 0.05
    settings.archive.include_data = False
    rt = runtime_factory(Booker, settings=settings)
    rt.catalog.create_topic('crm.sync')
    sub = rt.catalog.subscribe('crm.sync', service='archive.booker')
    for n in range(3):
        rt.broker.publish('crm.sync', f'text message {n}', mime_type='text/plain')
    archive = tmp_path / 'rt' / 'var' / 'archive'
    wait_until(lambda: len(_records(archive)) == 3, TIMEOUT, message='three records flushed by the timer')
    assert all('data' not in r and r['mime_type'] == 'text/plain' for r in _records(archive))
    rt.archive.stop_flusher()  # from here on, only the stop writes
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT)
    rt.broker.publish('crm.sync', 'last one', mime_type='text/plain')
    wait_until(lambda: rt.archive.buffered, TIMEOUT, message='the last record buffered')
    rt.stop()
    assert len(_records(archive)) == 4


def test_archive_is_off_when_disabled(runtime_factory, tmp_path):
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt')
    settings.archive.enabled = False
    rt = runtime_factory(settings=settings)
    assert rt.archive is None


def test_topic_directory_names_are_safe_and_distinct():
    assert safe_topic_name('orders.created') == 'orders.created'
    assert safe_topic_name('Orders.Created') == 'orders.created'  # topics compare case-insensitively
    names = {safe_topic_name(t) for t in ('a/b', 'a_b', 'a.b', '/zato/s/to/crm_x', '..', 'a b', 'é')}
    assert len(names) == 7
    for name in names:
        assert '/' not in name and name not in ('.', '..') and not name.startswith('.')
        assert all(c.isascii() for c in name)
