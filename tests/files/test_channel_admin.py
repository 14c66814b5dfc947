"""The administration layer of file channels on its own, without HTTP or a runtime.

FileChannelAdmin is built over a migrated database of the backend under test with a ``changed``
callable that counts its calls, as the composition root builds it with the synchronizer's. A write
bumps the ``file_channels`` sync key and calls ``changed``; a refused one does neither.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import Engine, insert, select

from runtime.channels.admin import ChannelAdmin
from runtime.db.blocking import run_transaction
from runtime.db.models import FileChannelRow, FileRun, SyncState, Topic
from runtime.errors import ConfigError, ObjectExists, ObjectNotFound
from runtime.files.admin import FileChannelAdmin
from runtime.files.definition import FILE_CHANNELS_KEY, FileChannelDef


class Counter:
    """Counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> None:
        self.calls += 1


@pytest.fixture
def changed() -> Counter:
    return Counter()


@pytest.fixture
def admin(engine: Engine, changed: Counter) -> FileChannelAdmin:
    return FileChannelAdmin(engine, changed)


def definition(name: str = 'invoices', **changes: object) -> FileChannelDef:
    return FileChannelDef.from_values({'name': name, 'directory': '/data/in', 'topics': ['invoice.received'],
                                       **changes}, f'file channel {name!r}')


def version(engine: Engine) -> int:
    return run_transaction(engine, lambda c: c.execute(
        select(SyncState.version).where(SyncState.key == FILE_CHANNELS_KEY)).scalar() or 0, write=False)


def add_run(engine: Engine, channel: str, file_name: str, state: str, started_at: float) -> None:
    run_transaction(engine, lambda c: c.execute(insert(FileRun).values(
        channel=channel, file_name=file_name, size=10, mtime=1.0, content_hash='ab' * 32, state=state,
        owner='host-1', started_at=started_at, finished_at=started_at + 1, error='')))


def test_create_get_list_and_the_sync_key(admin: FileChannelAdmin, engine: Engine, changed: Counter) -> None:
    before = version(engine)
    stored = admin.create(definition(format='csv', patterns=['*.csv']))
    assert stored.origin == 'api' and stored.owner == '' and stored.problem == ''
    assert stored.definition == definition(format='csv', patterns=['*.csv'])
    assert stored.updated_at == pytest.approx(time.time(), abs=60)
    assert (changed.calls, version(engine)) == (1, before + 1)
    assert [c.name for c in admin.list()] == ['invoices']
    view = admin.get('invoices').view()
    assert view['name'] == 'invoices' and view['format'] == 'csv' and view['patterns'] == ['*.csv']
    assert view['origin'] == 'api' and view['updated_at_iso'].endswith('+00:00')
    assert admin.exists('invoices') and not admin.exists('nope')


def test_a_duplicate_name_is_refused_without_a_write(admin: FileChannelAdmin, engine: Engine,
                                                     changed: Counter) -> None:
    admin.create(definition())
    before = version(engine)
    with pytest.raises(ObjectExists, match="file channel 'invoices' already exists"):
        admin.create(definition(directory='/elsewhere'))
    assert (changed.calls, version(engine)) == (1, before)
    assert admin.get('invoices').values['directory'] == '/data/in'


def test_unknown_channels_are_named(admin: FileChannelAdmin, changed: Counter) -> None:
    for call in (lambda: admin.get('ghost'), lambda: admin.delete('ghost'),
                 lambda: admin.update('ghost', definition('ghost'))):
        with pytest.raises(ObjectNotFound, match="file channel not found: 'ghost'"):
            call()
    assert changed.calls == 0


def test_update_replaces_the_definition(admin: FileChannelAdmin, changed: Counter) -> None:
    admin.create(definition())
    stored = admin.update('invoices', definition(batch_size=50, is_active=False))
    assert stored.values['batch_size'] == 50 and stored.is_active is False
    assert changed.calls == 2


def test_rename_carries_the_run_history(admin: FileChannelAdmin, engine: Engine) -> None:
    admin.create(definition())
    admin.create(definition('payroll'))
    add_run(engine, 'invoices', 'a.csv', 'done', 100.0)
    with pytest.raises(ObjectExists):
        admin.update('invoices', definition('payroll'))
    admin.update('invoices', definition('invoices-2024'))
    assert not admin.exists('invoices')
    assert admin.runs('invoices-2024')[0] == 1 and admin.runs('invoices')[0] == 0


def test_delete_keeps_the_history(admin: FileChannelAdmin, engine: Engine, changed: Counter) -> None:
    admin.create(definition())
    add_run(engine, 'invoices', 'a.csv', 'done', 100.0)
    admin.delete('invoices')
    assert admin.list() == [] and changed.calls == 2
    assert admin.runs('invoices')[0] == 1


def test_runs_are_paged_most_recent_first_and_filtered(admin: FileChannelAdmin, engine: Engine) -> None:
    admin.create(definition())
    for i in range(5):
        add_run(engine, 'invoices', f'f{i}.csv', 'failed' if i % 2 else 'done', 100.0 + i)
    add_run(engine, 'other', 'x.csv', 'done', 500.0)
    total, runs = admin.runs('invoices', limit=2)
    assert total == 5 and [r['file_name'] for r in runs] == ['f4.csv', 'f3.csv']
    total, runs = admin.runs('invoices', limit=2, offset=4)
    assert [r['file_name'] for r in runs] == ['f0.csv']
    total, runs = admin.runs('invoices', state='failed')
    assert total == 2 and {r['state'] for r in runs} == {'failed'}
    assert runs[0]['started_at_iso'].startswith('1970-01-01T00:01:')
    with pytest.raises(ConfigError):
        admin.runs('invoices', state='exploded')


def test_a_stored_definition_that_no_longer_passes_is_shown_with_its_problem(
        admin: FileChannelAdmin, engine: Engine) -> None:
    run_transaction(engine, lambda c: c.execute(insert(FileChannelRow).values(
        name='old', definition='{"directory": "/in", "topics": ["a.*"]}', is_active=True, origin='api',
        owner='', updated_at=0.0)))
    stored = admin.get('old')
    assert 'topics' in stored.problem and stored.values['directory'] == '/in'
    with pytest.raises(ConfigError):
        stored.definition  # noqa: B018
    assert stored.view()['problem'] == stored.problem


def test_missing_topics(engine: Engine, changed: Counter) -> None:
    run_transaction(engine, lambda c: c.execute(insert(Topic).values(
        name='invoice.received', name_key='invoice.received', created_at=time.time())))
    strict = FileChannelAdmin(engine, changed)
    assert strict.missing_topics(['invoice.received', 'Invoice.Received', 'nope']) == ['nope']
    lenient = FileChannelAdmin(engine, changed, topics_auto_created=lambda: True)
    assert lenient.missing_topics(['nope']) == []


def test_a_channel_invoking_a_service_is_one_of_its_users(admin: FileChannelAdmin, engine: Engine) -> None:
    """Undeploying a service asks first when a file channel invokes it."""
    admin.create(definition('ingest', topics=[], service='crm.ingest'))
    admin.create(definition('other', service='crm.other'))
    users = ChannelAdmin(engine, lambda: None).service_users('crm.ingest')
    assert users == ["file channel 'ingest'"]
