"""Publishers and delivery loops share commits, and sharing never costs correctness.

What a user relies on: every acknowledged publication is stored, every delivered message is
acked, a failing piece of work fails alone, message ids keep growing, and the formatting shortcuts
of the hot path give exactly what ``datetime`` gives.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gevent
import pytest
from sqlalchemy import event, func, select

from runtime.db.models import Message
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from runtime.util.timefmt import iso, iso_millis
from tests.recorder import Recorder


class Sink(Service):
    """Records the number of every message it gets (on 'handled' of the recorder make_rt binds it to)."""

    name = 'commits.sink'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('handled', self.request.payload['n'])


@pytest.fixture
def make_rt(runtime_factory: Callable[..., TestRuntime], tmp_path: Path, db_url: str,
            recorder: Recorder) -> Callable[..., TestRuntime]:
    def make() -> TestRuntime:
        base = tmp_path / f'rt{len(list(tmp_path.iterdir()))}'
        base.mkdir()
        settings = make_settings(base, db_url)
        settings.archive.enabled = False
        return runtime_factory(recorder.bind(Sink), settings=settings)
    return make


def _queue_empty(rt: TestRuntime) -> bool:
    sub = rt.broker.registry.service_subscription('commits.sink')
    return sub is not None and rt.catalog.queue_depth(sub.sub_key) == 0


def test_a_batch_is_acked_in_the_transaction_that_takes_the_next(
        make_rt: Callable[..., TestRuntime], recorder: Recorder) -> None:
    rt = make_rt()
    rt.broker.publish('commits.sink', {'n': -1})  # the implicit topic and its subscription
    wait_until(lambda: recorder['handled'] == [-1] and _queue_empty(rt), 10, message='warm-up delivered')
    sub = rt.broker.registry.service_subscription('commits.sink')
    assert sub is not None and sub.options.delivery_batch_size == 100
    rt.catalog.set_active(sub.sub_key, False)
    total = 300
    gevent.joinall([gevent.spawn(rt.broker.publish, 'commits.sink', {'n': n}) for n in range(total)],
                   raise_error=True)
    writes = []

    def written(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        if statement.lstrip()[:6].upper() in ('INSERT', 'UPDATE', 'DELETE'):
            conn.info['wrote'] = True

    def count(conn: Any) -> None:
        if conn.info.pop('wrote', False):
            writes.append(1)
    event.listen(rt.engine, 'before_cursor_execute', written)
    event.listen(rt.engine, 'commit', count)
    try:
        rt.catalog.set_active(sub.sub_key, True)
        wait_until(lambda: recorder.count('handled') == total + 1 and _queue_empty(rt), 20,
                   message='all delivered and acked')
    finally:
        event.remove(rt.engine, 'commit', count)
        event.remove(rt.engine, 'before_cursor_execute', written)
    assert sorted(recorder['handled'][1:]) == list(range(total)), 'each message delivered once'
    # Resuming, then three batches: take 1; ack 1 + take 2; ack 2 + take 3; ack 3. With a transaction
    # to count attempts and another to ack each batch, this took 7; one spare for a lease renewal.
    assert len(writes) <= 6, f'{len(writes)} write transactions to deliver {total} messages in 3 batches'


def test_a_failing_work_item_fails_alone(make_rt: Callable[..., TestRuntime], recorder: Recorder) -> None:
    rt = make_rt()
    committer = rt.broker.committer
    assert committer is not None

    rt.broker.publish('commits.sink', {'n': -1})  # makes the implicit topic, so the next ones just queue
    wait_until(lambda: recorder['handled'] == [-1] and _queue_empty(rt), 10, message='warm-up delivered')
    recorder.clear('handled')

    def broken(conn: object) -> None:
        raise ValueError('broken work')

    def run_broken() -> BaseException | None:
        try:
            committer.run(broken)
        except ValueError as e:
            return e
        return None

    # Spawned together, they land in one batch of the writer.
    pubs = [gevent.spawn(rt.broker.publish, 'commits.sink', {'n': n}) for n in range(5)]
    bad = gevent.spawn(run_broken)
    good = gevent.spawn(committer.run, lambda conn: conn.execute(
        select(func.count()).select_from(Message).where(Message.data != '{"n":-1}')).scalar_one())
    gevent.joinall([*pubs, bad, good])
    assert isinstance(bad.value, ValueError) and str(bad.value) == 'broken work'
    assert good.successful() and good.value == 5, 'the other work item saw the publications of its commit'
    msg_ids = {g.value for g in pubs}
    assert all(g.successful() for g in pubs)
    with rt.engine.connect() as conn:
        stored = set(conn.execute(select(Message.msg_id).where(Message.msg_id.in_(msg_ids))).scalars())
    assert stored == msg_ids
    wait_until(lambda: sorted(recorder['handled']) == list(range(5)), 10, message='all delivered')


def test_a_loop_that_cannot_be_claimed_delays_nothing(make_rt: Callable[..., TestRuntime],
                                                      monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> None:
    rt = make_rt()
    rt.broker.publish('commits.sink', {'n': -1})
    wait_until(lambda: recorder['handled'] == [-1] and _queue_empty(rt), 10, message='warm-up delivered')
    sub = rt.broker.registry.service_subscription('commits.sink')
    assert sub is not None
    loop = rt.broker.loops[sub.id]

    def broken_claim() -> None:
        raise RuntimeError('claim failed')
    monkeypatch.setattr(loop, 'claim', broken_claim)
    # The publication is stored and answered; the loop, not claimed, takes the message in its own cycle.
    for n in range(3):
        rt.broker.publish('commits.sink', {'n': n})
    wait_until(lambda: sorted(recorder['handled'][1:]) == [0, 1, 2] and _queue_empty(rt), 10,
               message='delivered unclaimed')


def test_message_ids_keep_growing_after_the_newest_are_swept(
        make_rt: Callable[..., TestRuntime], recorder: Recorder) -> None:
    rt = make_rt()
    for n in range(3):
        rt.broker.publish('commits.sink', {'n': n})
    wait_until(lambda: recorder.count('handled') == 3 and _queue_empty(rt), 10, message='delivered')
    with rt.engine.connect() as conn:
        newest = conn.execute(select(func.max(Message.id))).scalar_one()
    assert rt.broker.sweeper.sweep()['consumed'] == 3  # every message consumed: the table is empty
    rt.broker.publish('commits.sink', {'n': 3})
    with rt.engine.connect() as conn:
        assert conn.execute(select(func.min(Message.id))).scalar_one() > newest


def test_iso_times_match_datetime() -> None:
    rng = random.Random(7)
    stamps = [0.0, 1.0, 0.9999995, 1e9 + 0.0005, 1_767_225_599.9999996]
    stamps += [rng.uniform(0, 2e9) for _ in range(20_000)]
    stamps += [round(rng.uniform(1.7e9, 1.8e9), digits) for digits in (0, 3, 6) for _ in range(5_000)]
    for ts in stamps:
        moment = datetime.fromtimestamp(ts, UTC)
        assert iso(ts) == moment.isoformat(), ts
        assert iso_millis(ts) == moment.isoformat(timespec='milliseconds'), ts
