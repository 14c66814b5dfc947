"""The group committer over a fake writer: batching, the commit listeners, and failures.

``run_transaction`` and the SQL of publications are replaced by fakes that record what each
transaction held, so this runs without a database; the real thing is in
tests/pubsub/test_group_commit.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from gevent.event import AsyncResult
from sqlalchemy.exc import OperationalError

from runtime.errors import StorageUnavailable
from runtime.pubsub import group_commit
from runtime.pubsub.group_commit import GroupCommitter
from runtime.pubsub.statements import Publication
from runtime.util.spawn import Spawner

pytestmark = pytest.mark.unit


class FakeWriter:
    """Stands for the database: each transaction records what it wrote; ``fail`` makes the next ones fail."""

    def __init__(self) -> None:
        self.transactions: list[list[Any]] = []
        self.fail: BaseException | None = None
        #: 'commit' for each transaction begun, in order with what a test adds itself.
        self.events: list[str] = []

    def run_transaction(self, engine: Any, work: Callable[[Any], Any]) -> Any:
        self.events.append('commit')
        if self.fail is not None:
            raise self.fail
        written: list[Any] = []
        result = work(written)  # the "connection" is the list the transaction writes to
        self.transactions.append(written)
        return result

    @staticmethod
    def write(conn: list[Any], pubs: list[Publication]) -> None:
        conn.extend(p.msg_id for p in pubs)


@pytest.fixture
def writer(monkeypatch: pytest.MonkeyPatch) -> FakeWriter:
    fake = FakeWriter()
    monkeypatch.setattr(group_commit, 'run_transaction', fake.run_transaction)
    monkeypatch.setattr(GroupCommitter, 'write_publications', staticmethod(fake.write))
    return fake


@pytest.fixture
def spawner() -> Iterator[Spawner]:
    made = Spawner()
    yield made
    made.stop()



def _committer(*args: Any, **kwargs: Any) -> GroupCommitter:
    """A committer whose every transaction goes through run_transaction (the fake): no held connection."""
    return GroupCommitter(*args, hold_secs=0.0, **kwargs)

def _pub(n: int) -> Publication:
    return Publication(msg_id=f'zpsm{n}', topic_id=1, topic_name='t', data='{}', mime_type='application/json',
                       priority=5, pub_time=0.0, expiration_time=1e12, publisher='', correl_id=None,
                       in_reply_to=None, ext_client_id=None, has_gd=True, size=2, sub_ids=[1])


def test_concurrent_submitters_share_transactions(writer: FakeWriter, spawner: Spawner) -> None:
    committed: list[list[str]] = []
    committer = _committer(None, 1000, spawner.spawn, lambda pubs: committed.append([p.msg_id for p in pubs]))  # type: ignore[arg-type]
    jobs = [gevent.spawn(committer.submit, _pub(n)) for n in range(100)]
    gevent.joinall(jobs, raise_error=True)
    assert sorted(m for t in writer.transactions for m in t) == sorted(f'zpsm{n}' for n in range(100))
    assert len(writer.transactions) < 10, [len(t) for t in writer.transactions]
    assert committed == writer.transactions, 'on_committed hears of each batch, once committed'


def test_max_batch_bounds_a_transaction(writer: FakeWriter, spawner: Spawner) -> None:
    committer = _committer(None, 7, spawner.spawn, lambda pubs: None)  # type: ignore[arg-type]
    gevent.joinall([gevent.spawn(committer.submit, _pub(n)) for n in range(30)], raise_error=True)
    assert max(len(t) for t in writer.transactions) <= 7
    assert sum(len(t) for t in writer.transactions) == 30


def test_work_shares_the_transaction_after_the_publications(writer: FakeWriter, spawner: Spawner) -> None:
    committer = _committer(None, 100, spawner.spawn, lambda pubs: None)  # type: ignore[arg-type]

    def work(conn: list[Any]) -> int:
        conn.append('work')
        return len(conn)

    pub = gevent.spawn(committer.submit, _pub(1))
    job = gevent.spawn(committer.run, work)
    gevent.joinall([pub, job], raise_error=True)
    assert writer.transactions == [['zpsm1', 'work']]
    assert job.value == 2, 'the work saw the publication written before it'


def test_claims_of_idle_loops_ride_in_the_publications_commit(writer: FakeWriter, spawner: Spawner) -> None:
    claimed = AsyncResult()
    asked: list[list[str]] = []

    def claim(pubs: list[Publication]) -> list[tuple[Callable[[Any], Any], AsyncResult]]:
        asked.append([p.msg_id for p in pubs])
        return [(lambda conn: conn.append('cycle') or 'batch', claimed)]

    committer = _committer(None, 100, spawner.spawn, lambda pubs: None, claim)  # type: ignore[arg-type]
    committer.submit(_pub(1))
    assert asked == [['zpsm1']]
    assert writer.transactions == [['zpsm1', 'cycle']]
    assert claimed.get(timeout=1) == 'batch'


def _claiming_once(claimed: AsyncResult) -> Callable[[list[Publication]], list[Any]]:
    """A claim() that claims one idle loop, in the first commit only."""
    done: list[bool] = []

    def claim(pubs: list[Publication]) -> list[Any]:
        if done:
            return []
        done.append(True)
        return [(lambda conn: conn.append('cycle') or 'batch', claimed)]
    return claim


def _with_a_claimed_loop(writer: FakeWriter, spawner: Spawner) -> tuple[GroupCommitter, gevent.Greenlet]:
    """A committer whose first commit claims an idle loop, and that loop: it notes in writer.events when it delivers."""
    claimed = AsyncResult()
    committer = _committer(None, 100, spawner.spawn, lambda pubs: None, _claiming_once(claimed))  # type: ignore[arg-type]
    return committer, gevent.spawn(lambda: writer.events.append(f'delivered {claimed.get()}'))


def test_a_lone_publishers_next_commit_starts_before_the_loop_it_woke_delivers(
        writer: FakeWriter, spawner: Spawner) -> None:
    # One publisher publishing in sequence: the loop its commit claimed delivers while the next commit
    # is written, not between the two (where the publisher's next commit waited for the delivery).
    committer, loop = _with_a_claimed_loop(writer, spawner)
    committer.submit(_pub(1))
    committer.submit(_pub(2))
    loop.join(timeout=1)
    assert writer.events == ['commit', 'commit', 'delivered batch']
    assert writer.transactions == [['zpsm1', 'cycle'], ['zpsm2']]


def test_a_loop_woken_by_a_lone_publication_is_not_kept_waiting_for_more(
        writer: FakeWriter, spawner: Spawner) -> None:
    claimed = AsyncResult()
    committer = _committer(None, 100, spawner.spawn, lambda pubs: None, _claiming_once(claimed))  # type: ignore[arg-type]
    committer.submit(_pub(1))
    assert claimed.get(timeout=1) == 'batch', 'nothing else was queued: the loop is woken at once'


def test_loops_woken_by_a_commit_of_many_publications_deliver_before_the_next_commit(
        writer: FakeWriter, spawner: Spawner) -> None:
    # With many publishers the hub has their next publications to prepare anyway; a delivery during
    # the commit would only contend with the commit's thread.
    committer, loop = _with_a_claimed_loop(writer, spawner)

    def publisher(first: int) -> None:
        committer.submit(_pub(first))
        committer.submit(_pub(first + 10))
    gevent.joinall([gevent.spawn(publisher, 1), gevent.spawn(publisher, 2)], raise_error=True)
    loop.join(timeout=1)
    assert writer.events == ['commit', 'delivered batch', 'commit']
    assert writer.transactions == [['zpsm1', 'zpsm2', 'cycle'], ['zpsm11', 'zpsm12']]


def test_a_storage_error_fails_every_waiter_of_its_batch(writer: FakeWriter, spawner: Spawner) -> None:
    committed: list[Any] = []
    committer = _committer(None, 100, spawner.spawn, committed.append)  # type: ignore[arg-type]
    writer.fail = OperationalError('INSERT', {}, ConnectionRefusedError('database down'))
    jobs = [gevent.spawn(committer.submit, _pub(n)) for n in range(5)]
    jobs.append(gevent.spawn(committer.run, lambda conn: 'never'))
    gevent.joinall(jobs)
    for job in jobs:
        assert isinstance(job.exception, StorageUnavailable), job.exception
        assert 'ConnectionRefusedError' in str(job.exception)
    assert committed == [], 'nothing committed, nobody woken'
    writer.fail = None
    committer.submit(_pub(99))
    assert writer.transactions == [['zpsm99']], 'the writer goes on with the next batch'


def test_any_other_error_reaches_every_waiter_as_itself(writer: FakeWriter, spawner: Spawner) -> None:
    committer = _committer(None, 100, spawner.spawn, lambda pubs: None)  # type: ignore[arg-type]
    writer.fail = RuntimeError('disk full')
    jobs = [gevent.spawn(committer.submit, _pub(n)) for n in range(3)]
    gevent.joinall(jobs)
    assert [str(j.exception) for j in jobs] == ['disk full'] * 3


def test_a_failing_work_item_fails_only_its_own_waiter(writer: FakeWriter, spawner: Spawner) -> None:
    committer = _committer(None, 100, spawner.spawn, lambda pubs: None)  # type: ignore[arg-type]

    def bad(conn: list[Any]) -> None:
        conn.append('bad')
        raise ValueError('no such queue')

    jobs = [gevent.spawn(committer.submit, _pub(1)), gevent.spawn(committer.run, bad),
            gevent.spawn(committer.run, lambda conn: conn.append('good') or 'ok')]
    gevent.joinall(jobs)
    assert jobs[0].successful() and jobs[2].value == 'ok'
    assert isinstance(jobs[1].exception, ValueError)
    assert writer.transactions == [['zpsm1', 'good']], 'written again without the failed item'


def test_a_failing_listener_is_logged_not_raised(writer: FakeWriter, spawner: Spawner,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    def listener(pubs: list[Publication]) -> None:
        raise RuntimeError('wake-up failed')

    committer = _committer(None, 100, spawner.spawn, listener)  # type: ignore[arg-type]
    committer.submit(_pub(1))
    committer.submit(_pub(2))
    assert writer.transactions == [['zpsm1'], ['zpsm2']]
    assert 'waking subscribers after a commit failed' in caplog.text
