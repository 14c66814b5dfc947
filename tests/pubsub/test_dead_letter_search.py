"""Dead letters across subscriptions on both backends: filters, keyset pages, counts, bulk re-drive and delete."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from sqlalchemy import Connection, delete, func, insert, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import DeadLetter, Message, QueueEntry
from runtime.errors import InvalidInput, MatchChanged
from runtime.pubsub.dead_letter_search import DeadLetterFilter, DeadLetterSearch
from runtime.pubsub.queue_admin import QueueAdmin
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.subscribers import KIND_PULL
from runtime.testing import TestRuntime


@pytest.fixture
def rt(runtime_factory: Callable[..., TestRuntime], db_url: str) -> TestRuntime:
    """A started runtime on the backend under test."""
    return runtime_factory(db_url=db_url)


def _admin(rt: TestRuntime) -> QueueAdmin:
    return QueueAdmin(rt.engine, lambda: rt.broker.registry, rt.broker.reload)


def _dead(rt: TestRuntime, topic: str, count: int, error: str, dead_at: float | None = None,
          service: str = 'dls.puller') -> tuple[SubInfo, list[str]]:
    """A pull subscription to topic whose count messages were all dead-lettered with error."""
    if not rt.broker.registry.topic(topic):
        rt.catalog.create_topic(topic, has_gd=True)
    sub = rt.catalog.subscribe(topic, KIND_PULL, service=service)
    msg_ids = [str(rt.broker.publish(topic, {'n': n}, priority=1 + n % 9, has_gd=True)) for n in range(count)]

    def work(conn: Connection) -> None:
        rows = conn.execute(select(QueueEntry.id, QueueEntry.message_id).where(QueueEntry.sub_id == sub.id)
                            .order_by(QueueEntry.message_id)).all()
        conn.execute(insert(DeadLetter), [
            {'sub_id': sub.id, 'message_id': r.message_id, 'delivery_count': 25, 'last_error': error,
             'last_traceback': f'Traceback: {error}', 'reason': 'max_attempts',
             'dead_at': dead_at if dead_at is not None else time.time()} for r in rows])
        conn.execute(delete(QueueEntry).where(QueueEntry.id.in_([r.id for r in rows])))
    run_transaction(rt.engine, work)
    return sub, msg_ids


def _queued(rt: TestRuntime, sub_id: int) -> list[tuple[int, int]]:
    """(delivery_count, next_attempt_at) of each entry of a queue."""
    return run_transaction(rt.engine, lambda c: [tuple(r) for r in c.execute(
        select(QueueEntry.delivery_count, QueueEntry.next_attempt_at).where(QueueEntry.sub_id == sub_id)).all()],
        write=False)


def _dead_count(rt: TestRuntime) -> int:
    return run_transaction(rt.engine, lambda c: c.execute(select(func.count()).select_from(DeadLetter)).scalar_one(),
                           write=False)


def test_filters_combine_and_name_topics_by_name_or_pattern(rt: TestRuntime) -> None:
    admin = _admin(rt)
    orders, order_ids = _dead(rt, 'dls.orders.emea', 3, 'ConnectionRefusedError: [Errno 111] refused')
    invoices, _ = _dead(rt, 'dls.invoices.emea', 2, 'KeyError: 100% of "customer_id"', dead_at=time.time() - 3600)
    search = admin.dead_letters

    def ids(f: DeadLetterFilter) -> set[str]:
        rows, _cursor = search.search(f, 100)
        return {r['msg_id'] for r in rows}

    everything = ids(admin.dead_letter_filter())
    assert len(everything) == 5
    assert ids(admin.dead_letter_filter(topic='DLS.Orders.EMEA')) == set(order_ids)
    assert len(ids(admin.dead_letter_filter(topic='dls.*.emea'))) == 5
    assert len(ids(admin.dead_letter_filter(topic='dls.**'))) == 5
    assert ids(admin.dead_letter_filter(topic='no.such.topic')) == set()
    assert ids(admin.dead_letter_filter(sub_id=orders.id)) == set(order_ids)
    # Error text: a substring, case-insensitive; % and _ and " are literal, not wildcards.
    assert ids(admin.dead_letter_filter(error='connectionrefused')) == set(order_ids)
    assert len(ids(admin.dead_letter_filter(error='100% of "customer'))) == 2
    assert ids(admin.dead_letter_filter(error='100%% of')) == set()
    assert ids(admin.dead_letter_filter(error='n_1')) == set()  # a wildcard would match 'Errno 111'
    # Time range: since included, until excluded.
    assert ids(admin.dead_letter_filter(since=time.time() - 60)) == set(order_ids)
    assert len(ids(admin.dead_letter_filter(until=time.time() - 60))) == 2
    assert ids(admin.dead_letter_filter(topic='dls.orders.emea', sub_id=invoices.id)) == set()

    rows, _ = search.search(admin.dead_letter_filter(sub_id=orders.id), 1)
    assert rows[0]['sub_id'] == orders.id and rows[0]['last_error'].startswith('ConnectionRefused')
    assert rows[0]['reason'] == 'max_attempts' and 'data_preview' in rows[0]
    assert search.count(admin.dead_letter_filter(topic='dls.*.emea')) == (5, False)
    assert search.count(admin.dead_letter_filter(topic='dls.*.emea'), cap=3) == (3, True)
    assert search.count(admin.dead_letter_filter(topic='nothing.here')) == (0, False)

    with pytest.raises(ValueError):
        DeadLetterFilter(error='x' * 201)


def test_keyset_pages_cover_every_letter_once_newest_first(rt: TestRuntime) -> None:
    admin = _admin(rt)
    _sub, msg_ids = _dead(rt, 'dls.paged', 7, 'boom')
    f = admin.dead_letter_filter(topic='dls.paged')
    seen: list[str] = []
    before = None
    while True:
        rows, before = admin.dead_letters.search(f, 3, before)
        seen += [r['msg_id'] for r in rows]
        if before is None:
            break
        # A letter dead-lettered between two pages does not shift the pages already read.
        if len(seen) == 3:
            _dead(rt, 'dls.paged', 1, 'boom', service='dls.other')
    assert seen == list(reversed(msg_ids))


def test_bulk_redrive_works_in_batches_and_resets_attempts(rt: TestRuntime) -> None:
    admin = _admin(rt)
    sub, msg_ids = _dead(rt, 'dls.bulk', 23, 'handler failed')
    other, _ = _dead(rt, 'dls.bulk.other', 4, 'handler failed')
    bulk = DeadLetterSearch(rt.engine, batch=5)  # 23 letters: 5 batches, the last one partial
    f = admin.dead_letter_filter(topic='dls.bulk')

    assert bulk.redrive(f, 23) == 23
    entries = _queued(rt, sub.id)
    assert len(entries) == 23 and all(count == 0 and due == 0.0 for count, due in entries)
    assert bulk.count(f) == (0, False)
    assert bulk.count(admin.dead_letter_filter(sub_id=other.id)) == (4, False)  # another topic: untouched
    # Re-driven in priority order like any entry: the queue browses as it did before dying.
    page, depth = admin.browse(sub.id, 100, 0)
    assert depth == 23 and sorted(m['msg_id'] for m in page) == sorted(msg_ids)
    assert [m['priority'] for m in page] == sorted((m['priority'] for m in page), reverse=True)


def test_bulk_refuses_more_than_confirmed_and_never_covers_newer_letters(rt: TestRuntime) -> None:
    admin = _admin(rt)
    _dead(rt, 'dls.grow', 6, 'boom')
    f = admin.dead_letter_filter(error='boom')
    with pytest.raises(MatchChanged) as refused:
        admin.dead_letters.delete(f, 5)
    assert refused.value.http_status == 409 and '5' in str(refused.value)
    assert _dead_count(rt) == 6  # nothing done

    assert admin.dead_letters.delete(f, 6) == 6
    assert _dead_count(rt) == 0
    # Fewer than confirmed (some were re-driven meanwhile) is fine: it does what is left.
    _dead(rt, 'dls.grow', 2, 'boom', service='dls.second')
    assert admin.dead_letters.redrive(f, 10) == 2
    assert admin.dead_letters.delete(f, 0) == 0


def test_bulk_delete_in_batches_keeps_what_does_not_match(rt: TestRuntime) -> None:
    admin = _admin(rt)
    _dead(rt, 'dls.del', 12, 'timeout talking to CRM')
    _dead(rt, 'dls.del', 3, 'bad input', service='dls.keep')
    bulk = DeadLetterSearch(rt.engine, batch=4)
    assert bulk.delete(admin.dead_letter_filter(error='TIMEOUT'), 12) == 12
    assert _dead_count(rt) == 3
    rows, _ = bulk.search(admin.dead_letter_filter(), 50)
    assert {r['last_error'] for r in rows} == {'bad input'}


def test_move_a_queued_message_to_the_dead_letters(rt: TestRuntime) -> None:
    admin = _admin(rt)
    rt.catalog.create_topic('dls.move', has_gd=True)
    sub = rt.catalog.subscribe('dls.move', KIND_PULL, service='dls.puller')
    msg_id = str(rt.broker.publish('dls.move', {'n': 1}, has_gd=True))
    assert admin.move_to_dead_letters(sub.id, msg_id, 'poison: skip it') is True
    assert admin.message(sub.id, msg_id) is None
    letter = admin.dead_letter(sub.id, msg_id)
    assert letter.reason == 'admin' and letter.last_error == 'poison: skip it'
    assert admin.move_to_dead_letters(sub.id, msg_id, 'again') is False
    assert admin.redrive(sub.id, [msg_id]) == [msg_id]
    assert admin.message(sub.id, msg_id) is not None


def test_messages_waiting_in_a_topic_page_and_edit(rt: TestRuntime) -> None:
    admin = _admin(rt)
    topic = rt.catalog.create_topic('dls.waiting', has_gd=True, on_no_subs='accept')
    msg_ids = [str(rt.broker.publish('dls.waiting', {'n': n}, has_gd=True)) for n in range(5)]
    page, waiting = admin.topic_messages(topic.id, 2, None)
    assert waiting == 5 and [m['msg_id'] for m in page] == msg_ids[:2]
    rest, _ = admin.topic_messages(topic.id, 10, page[-1]['id'])
    assert [m['msg_id'] for m in rest] == msg_ids[2:]
    row = admin.topic_message(msg_ids[0])
    new = admin.edit_topic_message(msg_ids[0], row.message_id, {'data': '{"n":42}', 'size': 8})
    assert new.data == '{"n":42}'
    assert admin.delete_topic_message(msg_ids[1]) == 1
    assert admin.topic_message(msg_ids[1]) is None
    # Once a subscription takes it, it no longer waits in the topic.
    run_transaction(rt.engine, lambda c: c.execute(update(Message).where(Message.msg_id == msg_ids[2])
                                                   .values(in_topic=False)))
    assert admin.topic_message(msg_ids[2]) is None


def test_a_pattern_matching_too_many_topics_is_refused(rt: TestRuntime, monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.pubsub.queue_admin as queue_admin
    admin = _admin(rt)
    for n in range(3):
        rt.catalog.create_topic(f'dls.many.t{n}')
    monkeypatch.setattr(queue_admin, 'MAX_FILTER_TOPICS', 2)
    with pytest.raises(InvalidInput):
        admin.dead_letter_filter(topic='dls.many.*')
    assert admin.dead_letter_filter(topic='**').topic_ids is None  # everything: no topic condition at all


def test_a_queue_browses_by_keyset_in_delivery_order(rt: TestRuntime) -> None:
    admin = _admin(rt)
    rt.catalog.create_topic('dls.keyset', has_gd=True)
    sub = rt.catalog.subscribe('dls.keyset', KIND_PULL, service='dls.puller')
    for n in range(11):
        rt.broker.publish('dls.keyset', {'n': n}, priority=n % 3, has_gd=True)
    everything, depth = admin.browse(sub.id, 100, 0)
    seen: list[str] = []
    after = None
    while True:
        page, _depth = admin.browse(sub.id, 4, 0, after)
        seen += [m['msg_id'] for m in page]
        if len(page) < 4:
            break
        after = tuple(int(part) for part in page[-1]['cursor'].split('.'))
    assert depth == 11 and seen == [m['msg_id'] for m in everything]
    assert [m['priority'] for m in everything] == sorted((m['priority'] for m in everything), reverse=True)
