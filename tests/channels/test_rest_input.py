"""How REST input is assembled: query string, body and path parameters."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from runtime import InvalidInput, Service
from runtime.db.engine import make_engine
from runtime.service import HttpInfo


class ById(Service):
    """Needs an id, from wherever it comes."""

    name = 'rest.by-id'
    input = 'id',

    def handle(self):
        self.response.payload = {'id': self.request.input.id, 'body': self.request.payload}


def test_a_text_body_does_not_hide_path_parameters(runtime_factory):
    rt = runtime_factory(ById)
    http = HttpInfo('POST', '/x/7', path_params={'id': '7'})
    svc = rt.invoker.run(ById, 'plain text', channel='rest', http=http)
    assert svc.response.payload == {'id': '7', 'body': 'plain text'}


def test_a_field_missing_beside_a_non_object_body_says_why(runtime_factory):
    rt = runtime_factory(ById)
    with pytest.raises(InvalidInput) as e:
        rt.invoker.run(ById, ['a', 'list'], channel='rest', http=HttpInfo('POST', '/x'))
    assert e.value.field == 'id' and 'not a JSON object' in str(e.value)


def test_database_errors_do_not_show_bound_parameters(tmp_path):
    engine = make_engine(f'sqlite:///{tmp_path / "x.db"}')
    with pytest.raises(OperationalError) as e, engine.connect() as conn:
        conn.execute(text('SELECT * FROM no_such_table WHERE secret = :s'), {'s': 'scrypt$hash-value'})
    assert 'scrypt$hash-value' not in str(e.value)
    engine.dispose()


def test_an_error_inside_a_sqlite_transaction_reaches_the_caller_without_a_printed_traceback(tmp_path, capfd):
    from runtime.db.blocking import run_transaction

    engine = make_engine(f'sqlite:///{tmp_path / "x.db"}')

    def work(conn):  # type: ignore[no-untyped-def]
        conn.execute(text('CREATE TABLE t (x INTEGER)'))
        raise LookupError('not found: x')
    with pytest.raises(LookupError, match='not found: x'):
        run_transaction(engine, work)
    assert 'Traceback' not in capfd.readouterr().err
    with engine.connect() as conn:  # rolled back: the table is not there
        assert conn.execute(text("SELECT count(*) FROM sqlite_master WHERE name = 't'")).scalar() == 0
    engine.dispose()
