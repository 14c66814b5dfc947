"""Group commit: concurrent publishers share transactions, and each still gets a durable answer."""

from __future__ import annotations

import gevent
from sqlalchemy import select

from runtime.db.models import Message
from runtime.pubsub.group_commit import GroupCommitter
from runtime.testing import make_settings


def test_concurrent_publishers_share_commits(runtime_factory, tmp_path, db_url, monkeypatch):
    batches: list[int] = []
    write = GroupCommitter.write_publications

    def counting_write(conn, pubs):  # type: ignore[no-untyped-def]
        batches.append(len(pubs))
        return write(conn, pubs)
    monkeypatch.setattr(GroupCommitter, 'write_publications', staticmethod(counting_write))
    (tmp_path / 'rt').mkdir()
    rt = runtime_factory(settings=make_settings(tmp_path / 'rt', db_url))
    rt.catalog.create_topic('gc.topic')

    jobs = gevent.joinall([gevent.spawn(rt.broker.publish, 'gc.topic', {'n': n}) for n in range(200)],
                          raise_error=True)
    msg_ids = {g.value for g in jobs}
    assert len(msg_ids) == 200
    with rt.engine.connect() as conn:
        assert set(conn.execute(select(Message.msg_id)).scalars()) == msg_ids, 'every acknowledged id is stored'
    assert sum(batches) == 200
    assert len(batches) < 50, f'{len(batches)} transactions for 200 concurrent publications: {batches}'
