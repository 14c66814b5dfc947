"""One round trip per commit on PostgreSQL: BEGIN, the statements and COMMIT in one query.

The values travel as literals quoted by the driver, so the tests send what an attacker would put in a
message. A trip the server refuses stores nothing and the group committer writes its commit again
statement by statement; a lost link is not retried (whether it committed is not known).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import gevent
import psycopg
import pytest
from psycopg.pq import TransactionStatus
from sqlalchemy import Engine, func, select

from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.db.models import Message, QueueEntry
from runtime.errors import LeaseLost, StorageUnavailable
from runtime.pubsub import one_trip
from runtime.pubsub.group_commit import GroupCommitter
from runtime.pubsub.leases import Fence, LeaseManager
from runtime.pubsub.queue_backend import FencedQueue
from runtime.pubsub.statements import Settlement
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.recorder import Recorder

pytestmark = pytest.mark.parametrize('db_backend', ['postgresql'])

TIMEOUT = 30.0

#: Text that breaks a statement if it is not quoted right, or is bound as a placeholder.
HOSTILE = ["it's", 'back\\slash\\', "'); DROP TABLE conduit_message; --", '%s %(x)s $1 $2', '{1,2}', '"quoted"',
           'naïve 東京 🚀', 'E\'\\x41\'', '\\\'', 'a' * 100_000, '', 'NULL', ';\nCOMMIT;\nBEGIN;']


@pytest.fixture
def raw(db_url: str) -> Iterator[psycopg.Connection]:
    """A plain connection with a table of its own."""
    conn = psycopg.connect(db_url)
    conn.execute('CREATE TABLE trip_t (id serial PRIMARY KEY, v text NOT NULL)')
    conn.commit()
    yield conn
    conn.close()


def stored(db_url: str) -> list[str]:
    with psycopg.connect(db_url) as other:
        return [v for v, in other.execute('SELECT v FROM trip_t ORDER BY id')]


def test_a_trip_commits_its_statements_and_answers_each_ones_rows(raw: psycopg.Connection, db_url: str) -> None:
    rows = one_trip.run(raw, [('INSERT INTO trip_t (v) VALUES (%s) RETURNING id', (v,)) for v in HOSTILE]
                        + [('SELECT count(*) FROM trip_t WHERE v = %s', (HOSTILE[2],)),
                           ('DELETE FROM trip_t WHERE false', ())])
    assert [len(r) for r in rows[:-2]] == [1] * len(HOSTILE)
    assert rows[-2:] == [[(1,)], []]
    assert stored(db_url) == HOSTILE, 'every value arrived exactly, and committed'
    assert raw.info.transaction_status == TransactionStatus.IDLE and not raw.autocommit


def test_a_refused_statement_stores_nothing_and_leaves_the_connection_fit(raw: psycopg.Connection, db_url: str) -> None:
    with pytest.raises(one_trip.Refused, match='22012'):
        one_trip.run(raw, [('INSERT INTO trip_t (v) VALUES (%s)', ('first',)), ('SELECT 1 / %s', (0,))])
    assert stored(db_url) == []
    assert raw.info.transaction_status == TransactionStatus.IDLE and not raw.autocommit
    one_trip.run(raw, [('INSERT INTO trip_t (v) VALUES (%s)', ('again',))])
    assert stored(db_url) == ['again']


def test_a_value_the_driver_cannot_bind_is_refused_before_anything_is_sent(raw: psycopg.Connection,
                                                                            db_url: str) -> None:
    with pytest.raises(one_trip.Refused, match='could not be bound'):
        one_trip.run(raw, [('INSERT INTO trip_t (v) VALUES (%s)', ('ok',)), ('SELECT %s', (object(),))])
    with pytest.raises(one_trip.Refused, match='could not be bound'):
        one_trip.run(raw, [("SELECT v FROM trip_t WHERE v LIKE 'a%'", ())])  # a % that is no placeholder
    with pytest.raises(one_trip.Refused):
        one_trip.run(raw, [('INSERT INTO trip_t (v) VALUES (%s)', ('nul \x00 inside',))])
    assert stored(db_url) == []
    assert raw.info.transaction_status == TransactionStatus.IDLE and not raw.autocommit


def test_statements_are_prepared_once_and_again_when_the_session_lost_them(raw: psycopg.Connection,
                                                                            db_url: str) -> None:
    insert = ('INSERT INTO trip_t (v) VALUES (%s)', ('x',))

    def prepared() -> list[str]:
        return [n for n, in raw.execute("SELECT name FROM pg_prepared_statements WHERE name LIKE 'conduit_trip_%'")]
    one_trip.run(raw, [insert, insert])
    raw.commit()
    assert len(prepared()) == 1
    raw.commit()
    raw.autocommit = True
    raw.execute('DEALLOCATE ALL')  # what a pooler or DISCARD ALL does behind the trip's back
    raw.autocommit = False
    with pytest.raises(one_trip.Refused, match='26000'):
        one_trip.run(raw, [insert])
    one_trip.run(raw, [insert])
    raw.commit()
    assert len(prepared()) == 1
    assert stored(db_url) == ['x', 'x', 'x']


def test_a_lost_link_is_raised_as_itself_and_the_connection_is_closed(raw: psycopg.Connection, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as admin:
        admin.execute('SELECT pg_terminate_backend(%s)', (raw.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        one_trip.run(raw, [('INSERT INTO trip_t (v) VALUES (%s)', ('lost',))])
    assert raw.closed, 'a connection in an unknown state is never handed back'


# Through the group committer


def _count_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of statements of every trip from now on (the trips still run)."""
    trips: list[int] = []
    original = one_trip.run

    def counting(raw: psycopg.Connection, statements: list) -> list:
        trips.append(len(statements))
        return original(raw, statements)
    monkeypatch.setattr(one_trip, 'run', counting)
    return trips


class Sink(Service):
    """Records what it is given."""

    name = 'trip.sink'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('got', self.request.payload)


@pytest.fixture
def rt(db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime], recorder: Recorder) -> TestRuntime:
    (tmp_path / 'rt').mkdir()
    return runtime_factory(*recorder.bind_all([Sink]), settings=make_settings(tmp_path / 'rt', db_url))


def test_hostile_messages_are_stored_and_delivered_exactly(rt: TestRuntime, recorder: Recorder,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    trips = _count_trips(monkeypatch)
    for n, text in enumerate(HOSTILE):
        rt.broker.publish('trip.sink', {'n': n, 'text': text, text[:50]: text[:50]})
    recorder.wait_for('got', len(HOSTILE), TIMEOUT)
    got = sorted(recorder['got'], key=lambda p: p['n'])
    assert [p['text'] for p in got] == HOSTILE
    assert all(p[p['text'][:50]] == p['text'][:50] for p in got)
    assert trips, 'the publications went in one-trip commits'
    with rt.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(Message)).scalar_one() == len(HOSTILE)


def test_when_every_trip_is_refused_the_commits_are_written_statement_by_statement(
        rt: TestRuntime, recorder: Recorder, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(one_trip, '_GENERIC_PLANS', 'SELECT 1 / 0')
    with caplog.at_level(logging.INFO, logger='runtime.pubsub.group_commit'):
        for n in range(20):
            rt.broker.publish('trip.sink', {'n': n})
        recorder.wait_for('got', 20, TIMEOUT)
    assert sorted(p['n'] for p in recorder['got']) == list(range(20))
    assert 'writing it statement by statement' in caplog.text
    wait_until(lambda: _queued(rt.engine) == 0, TIMEOUT, message='every ack stored')


def _queued(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(QueueEntry)).scalar_one()


def test_a_stale_take_in_a_trip_stores_nothing_while_the_publication_beside_it_commits(rt: TestRuntime) -> None:
    rt.catalog.create_topic('trip.fenced')
    sub = rt.catalog.subscribe('trip.fenced', 'pull', security='')
    rt.broker.publish('trip.fenced', {'n': 1})
    holder = LeaseManager(rt.engine, 60.0, 60.0)
    holder.refresh({'trip-x'})
    fence = holder.fence('trip-x')
    assert fence is not None
    queue = FencedQueue(rt.broker._backend, Fence(fence.name, fence.owner, fence.version + 1))
    with rt.engine.connect() as conn:
        entry_id, = conn.execute(select(QueueEntry.id).where(QueueEntry.sub_id == sub.id)).scalars()
    work = queue.cycle_work(sub.id, Settlement([entry_id], [], [], []), 10, None)
    assert isinstance(work, one_trip.StatementWork)
    committer = rt.broker.committer
    assert committer is not None
    publishing = gevent.spawn(rt.broker.publish, 'trip.fenced', {'n': 2})
    with pytest.raises(LeaseLost):
        committer.run(work)
    publishing.get(timeout=TIMEOUT)
    with rt.engine.connect() as conn:
        entries = conn.execute(select(QueueEntry.id, QueueEntry.delivery_count).where(QueueEntry.sub_id == sub.id)
                               .order_by(QueueEntry.id)).all()
    assert len(entries) == 2, 'the stale ack deleted nothing, and the publication beside it was stored'
    assert [e.delivery_count for e in entries] == [0, 0], 'the stale take counted no attempt'


def test_a_link_lost_in_a_trip_fails_its_publishers_and_the_next_commit_reconnects(
        rt: TestRuntime, recorder: Recorder, db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    rt.broker.publish('trip.sink', {'n': 0})
    recorder.wait_for('got', 1, TIMEOUT)
    wait_until(lambda: _queued(rt.engine) == 0, TIMEOUT, message='the ack stored')  # the next trip publishes
    original = one_trip.run

    def cut(raw: psycopg.Connection, statements: list) -> list:
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute('SELECT pg_terminate_backend(%s)', (raw.info.backend_pid,))
        monkeypatch.setattr(one_trip, 'run', original)
        return original(raw, statements)
    monkeypatch.setattr(one_trip, 'run', cut)
    with pytest.raises(StorageUnavailable):
        rt.broker.publish('trip.sink', {'n': 1})
    rt.broker.publish('trip.sink', {'n': 2})
    recorder.wait_for('got', 2, TIMEOUT)
    assert sorted(p['n'] for p in recorder['got']) == [0, 2]


def test_a_connection_goes_back_to_the_pool_out_of_autocommit(db_url: str) -> None:
    engine = make_engine(db_url, pool_size=1)
    upgrade(engine)
    writers: list[gevent.Greenlet] = []

    def spawn(run: Callable[[], None], **_kw: object) -> gevent.Greenlet:
        writers.append(gevent.spawn(run))
        return writers[-1]
    try:
        committer = GroupCommitter(engine, 100, spawn, lambda pubs: None, hold_secs=0.05)
        assert committer.run(one_trip.StatementWork('SELECT %s::integer', (7,), lambda rows, conn: rows)) == [(7,)]
        wait_until(lambda: engine.pool.checkedout() == 0, TIMEOUT, message='the held connection given back')
        with engine.connect() as conn:
            assert conn.connection.dbapi_connection.autocommit is False
    finally:
        gevent.killall(writers)
        engine.dispose()


def test_a_drained_queue_in_one_trip_commits_waits_for_work_instead_of_looking_again(
        rt: TestRuntime, recorder: Recorder) -> None:
    # The take that finds the queue empty answers when its next entry is due (none): the loop then sleeps
    # until woken, rather than looking again every few milliseconds, each look a commit.
    rt.broker.publish('trip.sink', {'n': 1})
    recorder.wait_for('got', 1, TIMEOUT)
    wait_until(lambda: _queued(rt.engine) == 0, TIMEOUT, message='the ack stored')
    committer = rt.broker.committer
    assert committer is not None
    gevent.sleep(0.2)
    before = committer.commits
    gevent.sleep(1.0)
    assert committer.commits - before <= 1, f'{committer.commits - before} commits in 1 s of an idle queue'


def test_publications_a_trip_cannot_encode_are_written_the_ordinary_way(
        rt: TestRuntime, recorder: Recorder, monkeypatch: pytest.MonkeyPatch) -> None:
    # Building the trip happens in the writer greenlet: an error there must not end it.
    from runtime.pubsub import group_commit

    def refusing(pubs: list) -> tuple:
        raise TypeError('str is not valid UTF-8: surrogates not allowed')
    monkeypatch.setattr(group_commit, 'publication_statement', refusing)
    rt.broker.publish('trip.sink', {'n': 1})
    monkeypatch.undo()
    rt.broker.publish('trip.sink', {'n': 2})
    recorder.wait_for('got', 2, TIMEOUT)
    assert sorted(p['n'] for p in recorder['got']) == [1, 2]


def test_a_commit_of_much_data_is_written_the_ordinary_way(rt: TestRuntime, recorder: Recorder,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from runtime.pubsub import group_commit
    trips = _count_trips(monkeypatch)
    monkeypatch.setattr(group_commit, 'ONE_TRIP_MAX_BYTES', 1000)
    rt.broker.publish('trip.sink', {'n': 1, 'text': 'x' * 2000})
    recorder.wait_for('got', 1, TIMEOUT)
    wait_until(lambda: _queued(rt.engine) == 0, TIMEOUT, message='the ack stored')
    assert recorder['got'][0]['text'] == 'x' * 2000
    assert all(n == 1 for n in trips), 'the publication went in a trip of its own'


def test_with_one_trip_commits_off_every_statement_goes_on_its_own(
        db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime], recorder: Recorder,
        monkeypatch: pytest.MonkeyPatch) -> None:
    trips = []
    monkeypatch.setattr(one_trip, 'run', lambda raw, statements: trips.append(statements))
    (tmp_path / 'off').mkdir()
    settings = make_settings(tmp_path / 'off', db_url)
    settings.pubsub.one_trip_commits = False
    rt = runtime_factory(*recorder.bind_all([Sink]), settings=settings)
    for n in range(5):
        rt.broker.publish('trip.sink', {'n': n})
    recorder.wait_for('got', 5, TIMEOUT)
    wait_until(lambda: _queued(rt.engine) == 0, TIMEOUT, message='every ack stored')
    assert trips == []
