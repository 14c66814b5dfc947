"""Group commit: concurrent publishers share transactions, and each still gets a durable answer."""

from __future__ import annotations

import gevent
from sqlalchemy import event, select

from runtime.db.models import Message, QueueEntry
from runtime.pubsub.subscribers import KIND_PULL
from runtime.testing import make_settings


def test_concurrent_publishers_share_commits(runtime_factory, tmp_path, db_url):
    (tmp_path / 'rt').mkdir()
    rt = runtime_factory(settings=make_settings(tmp_path / 'rt', db_url))
    rt.catalog.create_topic('gc.topic')
    committer = rt.broker.committer
    before = committer.commits

    jobs = gevent.joinall([gevent.spawn(rt.broker.publish, 'gc.topic', {'n': n}) for n in range(200)],
                          raise_error=True)
    msg_ids = {g.value for g in jobs}
    assert len(msg_ids) == 200
    with rt.engine.connect() as conn:
        assert set(conn.execute(select(Message.msg_id)).scalars()) == msg_ids, 'every acknowledged id is stored'
    commits = committer.commits - before
    assert 0 < commits < 50, f'{commits} transactions for 200 concurrent publications'


def test_a_shared_commit_gives_every_message_its_own_queue_entries(runtime_factory, tmp_path, db_url):
    # Many publications written together (on PostgreSQL one statement for messages, entries and NOTIFY):
    # each queue entry points at its own message, and ids follow the order of the batch.
    (tmp_path / 'rt').mkdir()
    rt = runtime_factory(settings=make_settings(tmp_path / 'rt', db_url))
    rt.catalog.create_topic('gc.fan')
    rt.catalog.create_topic('gc.solo')
    first = rt.catalog.subscribe('gc.fan', KIND_PULL, security='')
    second = rt.catalog.subscribe('gc.*', KIND_PULL, security='')

    def publish(n: int) -> str:
        return rt.broker.publish('gc.fan' if n % 2 else 'gc.solo', {'n': n}, priority=1 + n % 9)
    jobs = gevent.joinall([gevent.spawn(publish, n) for n in range(120)], raise_error=True)
    with rt.engine.connect() as conn:
        messages = {r.id: r for r in conn.execute(select(Message.id, Message.topic_name, Message.priority))}
        entries = conn.execute(select(QueueEntry.sub_id, QueueEntry.message_id, QueueEntry.priority)).all()
    assert len(messages) == len({g.value for g in jobs}) == 120
    assert sorted(e.message_id for e in entries if e.sub_id == second.id) == sorted(messages)
    assert sorted(e.message_id for e in entries if e.sub_id == first.id) == \
        sorted(i for i, m in messages.items() if m.topic_name == 'gc.fan')
    assert all(e.priority == -messages[e.message_id].priority for e in entries), 'an entry took another message'


def test_the_writer_keeps_its_connection_between_commits(runtime_factory, tmp_path, db_url):
    # A sequential publisher pays one commit per message. On PostgreSQL each checkout from the pool pings
    # the server first; on SQLite a checkout and check-in cost the hub a tenth of a publication's CPU.
    (tmp_path / 'rt').mkdir()
    rt = runtime_factory(settings=make_settings(tmp_path / 'rt', db_url))
    rt.catalog.create_topic('gc.seq')
    committer = rt.broker.committer
    rt.broker.publish('gc.seq', {'n': -1})  # the writer takes its connection
    writer_checkouts = []

    def on_checkout(*_args: object) -> None:
        if gevent.getcurrent() is committer._writer:
            writer_checkouts.append(1)
    event.listen(rt.engine, 'checkout', on_checkout)
    try:
        before = committer.commits
        for n in range(50):
            rt.broker.publish('gc.seq', {'n': n})
    finally:
        event.remove(rt.engine, 'checkout', on_checkout)
    assert committer.commits - before >= 50
    assert writer_checkouts == []
