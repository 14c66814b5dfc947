"""The pub/sub administration layer on its own, without HTTP: QueueAdmin, TopicAdmin and SubscriptionAdmin.

On both backends.

A started runtime only provides the database and its broker (to publish); the layer is built here
from explicit collaborators, as the admin API's parts build it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from sqlalchemy import Connection, delete, insert, select

from runtime.db.blocking import run_transaction
from runtime.db.models import DeadLetter, Message, QueueEntry, SyncState, Topic
from runtime.errors import ConfigError, InvalidTopicName, ObjectExists, SubscriptionNotFound, TopicNotFound
from runtime.pubsub.catalog import SYNC_KEY
from runtime.pubsub.message import admin_view, encode_data
from runtime.pubsub.queue_admin import QueueAdmin
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.subscribers import KIND_PULL
from runtime.pubsub.subscription_admin import SubscriptionAdmin
from runtime.pubsub.topic_admin import TopicAdmin
from runtime.testing import TestRuntime


@pytest.fixture
def rt(runtime_factory: Callable[..., TestRuntime], db_url: str) -> TestRuntime:
    """A started runtime on the backend under test."""
    return runtime_factory(db_url=db_url)


def _layer(rt: TestRuntime) -> tuple[QueueAdmin, TopicAdmin, SubscriptionAdmin]:
    broker = rt.broker
    return (QueueAdmin(rt.engine, lambda: broker.registry, broker.reload),
            TopicAdmin(rt.engine, lambda: broker.registry, broker.reload, rt.catalog),
            SubscriptionAdmin(rt.engine, lambda: broker.registry, broker.reload, rt.catalog))


def _pull_queue(rt: TestRuntime, topic: str, count: int) -> tuple[SubInfo, list[str]]:
    """A service pull queue (nothing delivers it) holding count stored messages, priority 1, 2, ..."""
    rt.catalog.create_topic(topic, has_gd=True)
    sub = rt.catalog.subscribe(topic, KIND_PULL, service='qa.puller')
    msg_ids = [str(rt.broker.publish(topic, {'n': n}, priority=1 + n % 9, has_gd=True)) for n in range(count)]
    return sub, msg_ids


def _sync_version(rt: TestRuntime) -> int:
    return run_transaction(rt.engine, lambda c: c.execute(
        select(SyncState.version).where(SyncState.key == SYNC_KEY)).scalar_one(), write=False)


def _kill(rt: TestRuntime, sub_id: int, msg_ids: list[str]) -> None:
    """Move queue entries to the dead letters, as the delivery loop does when attempts run out."""
    def work(conn: Connection) -> None:
        rows = conn.execute(select(QueueEntry.id, QueueEntry.message_id)
                            .join(Message, Message.id == QueueEntry.message_id)
                            .where(QueueEntry.sub_id == sub_id, Message.msg_id.in_(msg_ids))).all()
        conn.execute(insert(DeadLetter), [
            {'sub_id': sub_id, 'message_id': r.message_id, 'delivery_count': 3, 'last_error': 'boom',
             'last_traceback': 'Traceback: boom', 'reason': 'max_attempts', 'dead_at': time.time()} for r in rows])
        conn.execute(delete(QueueEntry).where(QueueEntry.id.in_([r.id for r in rows])))
    run_transaction(rt.engine, work)


def test_browse_a_queue_in_delivery_order_with_stats(rt: TestRuntime) -> None:
    queues, _topics, subscriptions = _layer(rt)
    sub, msg_ids = _pull_queue(rt, 'qa.browse', 5)

    page, depth = queues.browse(sub.id, 2, 0)
    assert depth == 5
    # Priority high first: the messages were published with priorities 1..5.
    assert [m['msg_id'] for m in page] == [msg_ids[4], msg_ids[3]]
    assert page[0]['data_preview'] == '{"n":4}' and 'data' not in page[0]
    rest, _depth = queues.browse(sub.id, 10, 2)
    assert [m['msg_id'] for m in rest] == [msg_ids[2], msg_ids[1], msg_ids[0]]

    row = queues.message(sub.id, msg_ids[0])
    assert admin_view(row)['data'] == {'n': 0} and admin_view(row)['leased'] is False
    assert queues.message(sub.id, 'no-such-msg') is None

    subs, stats, rows = queues.queues()
    assert [s.id for s in subs] == [sub.id]
    assert stats[sub.id]['depth'] == 5 and stats[sub.id]['oldest_message']['msg_id'] == msg_ids[0]
    assert rows[sub.id].origin == 'api'
    assert subscriptions.get(sub.id).id == sub.id
    with pytest.raises(SubscriptionNotFound):
        subscriptions.get(10 ** 6)


def test_edit_delete_and_purge_a_queue(rt: TestRuntime) -> None:
    queues, _topics, _subscriptions = _layer(rt)
    sub, msg_ids = _pull_queue(rt, 'qa.edit', 3)
    row = queues.message(sub.id, msg_ids[0])

    text, mime = encode_data('changed', None)
    new, held_by = queues.edit_message(sub.id, msg_ids[0], row.message_id,
                                       {'data': text, 'mime_type': mime, 'size': len(text), 'priority': 9})
    assert held_by == 1
    assert admin_view(new)['data'] == 'changed' and admin_view(new)['priority'] == 9
    # The new priority re-orders the queue: the edited message comes first now.
    assert queues.browse(sub.id, 1, 0)[0][0]['msg_id'] == msg_ids[0]

    assert queues.delete_message(sub.id, msg_ids[0]) == 1
    assert queues.delete_message(sub.id, msg_ids[0]) == 0
    assert queues.purge(sub.id) == 2
    assert queues.browse(sub.id, 10, 0) == ([], 0)


def test_dead_letters_are_browsed_edited_and_redriven(rt: TestRuntime) -> None:
    queues, _topics, _subscriptions = _layer(rt)
    sub, msg_ids = _pull_queue(rt, 'qa.dead', 4)
    _kill(rt, sub.id, msg_ids[:3])

    page, count = queues.browse_dead_letters(sub.id, 10, 0)
    assert count == 3 and {m['msg_id'] for m in page} == set(msg_ids[:3])
    assert page[0]['reason'] == 'max_attempts' and page[0]['last_error'] == 'boom'
    dead = queues.dead_letter(sub.id, msg_ids[0])
    assert admin_view(dead)['last_traceback'] == 'Traceback: boom'

    new, held_by = queues.edit_dead_letter(sub.id, msg_ids[0], dead.message_id, {'priority': 0})
    assert held_by == 1 and admin_view(new)['priority'] == 0

    assert queues.redrive(sub.id, [msg_ids[0], 'no-such-msg']) == [msg_ids[0]]
    stats, _rows = queues.subscription_stats([sub.id])
    assert stats[sub.id]['depth'] == 2 and stats[sub.id]['dead_letters'] == 2
    redriven = queues.message(sub.id, msg_ids[0])
    assert redriven.delivery_count == 0 and redriven.priority == 0

    assert queues.delete_dead_letters(sub.id, msg_ids[1]) == 1
    assert queues.redrive(sub.id) == [msg_ids[2]]
    assert queues.browse_dead_letters(sub.id, 10, 0) == ([], 0)
    assert queues.browse(sub.id, 10, 0)[1] == 3  # one of the four was deleted as a dead letter


def test_topic_changes_bump_the_sync_key_and_reload(rt: TestRuntime) -> None:
    queues, topics, subscriptions = _layer(rt)
    sub, _msg_ids = _pull_queue(rt, 'qa.topic', 2)
    rt.catalog.create_topic('other.waiting', has_gd=True)
    rt.broker.publish('other.waiting', 'held', has_gd=True)  # no subscriber: it waits in the topic
    pattern_sub = rt.catalog.subscribe('qa.**', KIND_PULL, service='qa.puller')
    topic = topics.get('qa.topic')

    version = _sync_version(rt)
    topics.update(topic.id, {'max_depth_gd': 1234})
    assert _sync_version(rt) == version + 1
    assert topics.get('qa.topic').max_depth_gd == 1234  # reloaded here at once
    topics.update(topic.id, {})
    assert _sync_version(rt) == version + 1  # nothing to change: nothing written

    subscriptions.update(sub.id, {'is_active': False})
    assert subscriptions.get(sub.id).is_active is False
    rows, depths = queues.topic_stats()
    waiting = topics.get('other.waiting')
    assert depths[waiting.id] == {'gd': 1, 'non_gd': 0} and rows[waiting.id].origin == 'api'
    details = queues.topic_details(topic.id, [s.id for s in topics.subscribers('qa.topic')], 10)
    assert len(details.last_publications) == 2 and set(details.stats) == {sub.id, pattern_sub.id}

    counts = topics.delete(topic)
    # The exact subscription goes with its queue; the pattern one stays.
    assert counts == {'subscriptions_deleted': 1, 'messages_deleted': 0}
    assert _sync_version(rt) == version + 3
    with pytest.raises(TopicNotFound):
        topics.get('qa.topic')
    with pytest.raises(SubscriptionNotFound):
        subscriptions.get(sub.id)
    assert subscriptions.get(pattern_sub.id).pattern == 'qa.**'
    assert run_transaction(rt.engine, lambda c: c.execute(select(Topic.id).where(Topic.id == topic.id)).first(),
                           write=False) is None
    assert topics.delete(waiting) == {'subscriptions_deleted': 0, 'messages_deleted': 1}


def test_topics_are_created_paged_and_matched_and_subscriptions_deleted_by_id(rt: TestRuntime) -> None:
    _queues, topics, subscriptions = _layer(rt)
    made = topics.create('qa.Made', max_depth_gd=7)
    assert made.name == 'qa.Made' and made.max_depth_gd == 7 and topics.exists('qa.made')
    with pytest.raises(ObjectExists):
        topics.create('qa.made')
    with pytest.raises(ConfigError):
        topics.create('qa.other', no_such_attribute=1)
    with pytest.raises(InvalidTopicName):
        topics.create('qa.*')
    assert not topics.exists('qa.other')
    topics.create('qa.second')
    topics.create('other.third')

    names = [t.name for t in topics.list()]  # the runtime's own topics (spark.job.*) among them
    assert names == sorted(names, key=str.lower) and {'other.third', 'qa.Made', 'qa.second'} <= set(names)
    assert [t.name for t in topics.page('QA')[1]] == ['qa.Made', 'qa.second']
    total, page = topics.page('qa', 1, 1)
    assert total == 2 and [t.name for t in page] == ['qa.second']
    total, page = topics.page('qa.', None, 1)  # no limit: every one from the offset
    assert total == 2 and [t.name for t in page] == ['qa.second']
    assert topics.matches('qa.*', 10) == (2, ['qa.Made', 'qa.second'])

    topics.update('qa.second', {'max_depth_gd': 99})  # by name, as by id
    assert topics.get('qa.second').max_depth_gd == 99
    with pytest.raises(TopicNotFound):
        topics.update('qa.gone', {'max_depth_gd': 1})

    sub = rt.catalog.subscribe('qa.second', KIND_PULL, service='qa.puller')
    assert [s.id for s in subscriptions.list('qa.second')] == [sub.id] and subscriptions.list(kind='rest_push') == []
    assert subscriptions.topic_missing('qa.none')
    assert not subscriptions.topic_missing('qa.second') and not subscriptions.topic_missing('qa.*')
    assert subscriptions.delete(sub.id).id == sub.id
    with pytest.raises(SubscriptionNotFound):
        subscriptions.get(sub.id)
    with pytest.raises(SubscriptionNotFound):
        subscriptions.delete(sub.id)
