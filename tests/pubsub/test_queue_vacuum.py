"""The queue vacuum: the queue table vacuumed on PostgreSQL once enough of it is dead, one worker at a time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gevent
import psycopg
import pytest
from sqlalchemy import Engine, text

from runtime.pubsub.queue_vacuum import LOCK_KEY, QueueVacuum
from runtime.pubsub.subscribers import KIND_PULL
from runtime.testing import TestRuntime, make_settings


@pytest.fixture
def rt(db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime]) -> TestRuntime:
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt', db_url)
    settings.pubsub.queue_vacuum_secs = 0  # the test looks itself
    rt = runtime_factory(settings=settings)
    rt.catalog.create_topic('vac.topic')
    rt.catalog.subscribe('vac.topic', KIND_PULL, security='')
    return rt


def _dead_entries(rt: TestRuntime, count: int) -> None:
    """Leave count dead rows in the queue table, as that many acks do, and have the server count them now."""
    gevent.joinall([gevent.spawn(rt.broker.publish, 'vac.topic', n) for n in range(count)], raise_error=True)
    with rt.engine.connect() as conn:
        conn.execute(text('DELETE FROM conduit_queue'))
        conn.commit()
        conn.execute(text('SELECT pg_stat_force_next_flush()'))


def _dead(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'conduit_queue'")
                            ).scalar_one()


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_the_queue_table_is_vacuumed_once_enough_of_it_is_dead(rt: TestRuntime) -> None:
    vacuum = QueueVacuum(rt.engine, 1.0, dead_rows=500)
    _dead_entries(rt, 400)
    assert _dead(rt.engine) >= 400
    assert vacuum.once() is False, 'vacuumed below the threshold'
    _dead_entries(rt, 200)
    assert vacuum.once() is True
    assert vacuum.runs == 1
    assert _dead(rt.engine) == 0
    assert vacuum.once() is False, 'nothing dead is left to vacuum'


@pytest.mark.parametrize('db_backend', ['postgresql'])
def test_a_worker_skips_its_turn_while_another_vacuums(rt: TestRuntime, db_url: str) -> None:
    _dead_entries(rt, 100)
    with psycopg.connect(db_url, autocommit=True) as other:
        assert other.execute('SELECT pg_try_advisory_lock(%s)', (LOCK_KEY,)).fetchone() == (True,)
        assert QueueVacuum(rt.engine, 1.0, dead_rows=1).once() is False
        other.execute('SELECT pg_advisory_unlock(%s)', (LOCK_KEY,))
    assert QueueVacuum(rt.engine, 1.0, dead_rows=1).once() is True


def test_only_postgresql_with_an_interval_is_vacuumed(rt: TestRuntime, db_backend: str) -> None:
    assert QueueVacuum(rt.engine, 1.0, 1000).enabled is (db_backend == 'postgresql')
    assert QueueVacuum(rt.engine, 0.0, 1000).enabled is False
    assert rt.broker.queue_vacuum.enabled is False  # this runtime's: set to 0 above
