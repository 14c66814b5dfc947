"""The suite's PostgreSQL databases are handed to the next test empty, whoever wrote last."""

from __future__ import annotations

import time

from sqlalchemy import func, insert, select

from runtime.db.engine import make_engine
from runtime.db.models import Topic
from tests.conftest import _pg_admin
from tests.databases import Databases


def _topics(url: str, add: str = '') -> int:
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            if add:
                conn.execute(insert(Topic).values(name=add, name_key=add, created_at=time.time()))
            return conn.execute(select(func.count()).select_from(Topic)).scalar_one()
    finally:
        engine.dispose()


def test_rows_written_after_a_database_was_given_back_are_gone_when_it_is_taken_again(
        databases: Databases) -> None:
    _pg_admin().close()  # in CI, an unreachable PostgreSQL fails the test; elsewhere it skips it
    name = databases.pg_take()
    databases.pg_give_back(name)
    # What a runtime stopped after its test gave the database back writes (its last statistics flush)
    # landed in the next test's database, which then found a row it had not made.
    assert _topics(databases.pg_url(name), add='late.write') == 1
    again = databases.pg_take()
    try:
        assert again == name and _topics(databases.pg_url(again)) == 0
    finally:
        databases.pg_give_back(again)
