"""The ``file_channel`` section of the object files: declared, changed, removed; others' channels left alone.

The applier is the server's own (``runtime.core.make_objects_applier``) over a migrated database of
the backend under test; the channels are read back through the administration layer, as the admin
API shows them. One test runs a started runtime: what a file declares, changes and removes reaches
its file transfer (a poller publishes to the declared topic, then to the new one, then stops).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from runtime.core import make_objects_applier
from runtime.db.blocking import run_transaction
from runtime.db.models import Message, SyncState
from runtime.errors import ConfigError
from runtime.files.admin import FileChannelAdmin
from runtime.files.definition import FILE_CHANNELS_KEY, FileChannelDef
from runtime.objects.applier import ObjectsApplier
from runtime.pubsub.message import decode_data
from runtime.testing import TestRuntime, make_settings, wait_until

TOPIC = '''
pubsub_topic:
  - name: invoice.received
'''

CHANNEL_ONLY = '''
file_channel:
  - name: invoices
    directory: /var/conduit/in
    patterns: ["*.csv"]
    format: csv
    topics: [invoice.received]
    batch_size: {batch}
'''
CHANNEL = TOPIC + CHANNEL_ONLY


@pytest.fixture
def objects_dir(tmp_path: Path) -> Path:
    path = tmp_path / 'objects'
    path.mkdir()
    return path


@pytest.fixture
def applier(tmp_path: Path, engine: Engine, objects_dir: Path) -> ObjectsApplier:
    settings = make_settings(tmp_path, engine.url.render_as_string(hide_password=False))
    settings.objects.dir = str(objects_dir)
    return make_objects_applier(settings, engine, False)


@pytest.fixture
def admin(engine: Engine) -> FileChannelAdmin:
    return FileChannelAdmin(engine, lambda: None)


def version(engine: Engine) -> int:
    return run_transaction(engine, lambda c: c.execute(
        select(SyncState.version).where(SyncState.key == FILE_CHANNELS_KEY)).scalar() or 0, write=False)


def test_declare_change_and_remove(applier: ObjectsApplier, admin: FileChannelAdmin, objects_dir: Path,
                                   engine: Engine) -> None:
    path = objects_dir / 'files.yaml'
    path.write_text(CHANNEL.format(batch=100))
    assert FILE_CHANNELS_KEY in applier.apply()
    stored = admin.get('invoices')
    assert (stored.origin, stored.owner, stored.values['batch_size'], stored.values['format']) == \
        ('config', str(path.resolve()), 100, 'csv')
    assert [(c.action, c.kind, c.name) for c in applier.last_changes if c.kind == 'file_channel'] == \
        [('create', 'file_channel', 'invoices')]

    before = version(engine)
    path.write_text(CHANNEL.format(batch=250))
    applier.apply()
    assert admin.get('invoices').values['batch_size'] == 250 and version(engine) == before + 1
    change = next(c for c in applier.last_changes if c.kind == 'file_channel')
    assert (change.action, change.detail) == ('update', 'batch_size')

    path.write_text(TOPIC)
    applier.apply()
    assert not admin.exists('invoices')
    assert any(c.action == 'delete' and c.name == 'invoices' for c in applier.last_changes)


def test_reapplying_unchanged_files_changes_nothing(applier: ObjectsApplier, admin: FileChannelAdmin,
                                                    objects_dir: Path) -> None:
    (objects_dir / 'files.yaml').write_text(CHANNEL.format(batch=100))
    applier.apply()
    first = admin.get('invoices').updated_at
    (objects_dir / 'other.yaml').write_text('pubsub_topic:\n  - name: other.topic\n')
    applier.apply()  # the set of files changed, not this channel
    assert admin.get('invoices').updated_at == first
    assert not [c for c in applier.last_changes if c.kind == 'file_channel']


def test_a_channel_made_through_the_api_is_left_alone(applier: ObjectsApplier, admin: FileChannelAdmin,
                                                      objects_dir: Path) -> None:
    (objects_dir / 'topics.yaml').write_text(TOPIC)
    applier.apply()
    admin.create(FileChannelDef.from_values({'name': 'invoices', 'directory': '/api/in',
                                             'topics': ['invoice.received']}, 'test'))
    admin.create(FileChannelDef.from_values({'name': 'manual', 'directory': '/api/manual',
                                             'topics': ['invoice.received']}, 'test'))
    (objects_dir / 'files.yaml').write_text(CHANNEL_ONLY.format(batch=100))
    applier.apply()
    assert admin.get('invoices').values['directory'] == '/api/in' and admin.get('invoices').origin == 'api'
    assert any(c.action == 'skip' and c.name == 'invoices' for c in applier.last_changes)
    (objects_dir / 'files.yaml').unlink()
    applier.apply()
    assert admin.exists('invoices') and admin.exists('manual')


@pytest.mark.parametrize(('item', 'words'), [
    ('    directory: relative\n    topics: [invoice.received]\n', "'directory'"),
    ('    directory: /in\n    topics: [no.such.topic]\n', "topic 'no.such.topic' does not exist"),
    ('    directory: /in\n    topics: [invoice.received]\n    sftp_host: h\n    sftp_username: u\n'
     '    sftp_password: plain-secret\n    sftp_host_key: ""\n', 'sftp_password'),
    ('    directory: /in\n    topics: [invoice.received]\n    surprise: 1\n', "'surprise'"),
    ('    directory: /in\n    service: no.such.service\n', "service 'no.such.service' does not exist"),
])
def test_invalid_declarations_are_refused_naming_file_and_field(applier: ObjectsApplier, objects_dir: Path,
                                                                admin: FileChannelAdmin, item: str,
                                                                words: str) -> None:
    (objects_dir / 'files.yaml').write_text(TOPIC + 'file_channel:\n  - name: bad\n' + item)
    with pytest.raises(ConfigError) as info:
        applier.apply()
    assert words in str(info.value) and 'files.yaml [file_channel]' in str(info.value)
    assert 'plain-secret' not in str(info.value)
    assert not admin.exists('bad')


def test_a_channel_declared_twice_is_refused(applier: ObjectsApplier, objects_dir: Path) -> None:
    (objects_dir / 'a.yaml').write_text(CHANNEL.format(batch=1))
    (objects_dir / 'b.yaml').write_text('file_channel:\n  - name: invoices\n    directory: /b\n'
                                        '    topics: [invoice.received]\n')
    with pytest.raises(ConfigError, match='declared twice'):
        applier.apply()


def test_a_declared_channel_runs_follows_its_changes_and_stops_when_removed(
        runtime_factory: Callable[..., TestRuntime], db_url: str, tmp_path: Path) -> None:
    """What a file declares takes effect in the running worker: its poller starts, changes, and stops."""
    base = tmp_path / 'rt'
    base.mkdir()
    settings = make_settings(base, db_url)
    rt = runtime_factory(settings=settings)
    inbox = tmp_path / 'inbox'
    inbox.mkdir()
    objects = settings.path(settings.objects.dir)
    objects.mkdir(parents=True, exist_ok=True)
    declaration = ('pubsub_topic:\n  - name: ft.first\n  - name: ft.second\n'
                   'file_channel:\n  - name: drops\n    directory: {inbox}\n    patterns: ["*.json"]\n'
                   '    topics: [{topic}]\n    poll_interval_secs: 0.05\n    stable_polls: 1\n')

    def apply(text: str) -> None:
        (objects / 'drops.yaml').write_text(text)
        for key in set(rt.objects.apply()):
            rt.synchronizer.changed(key)

    def data(topic: str) -> list[Any]:
        rows = run_transaction(rt.engine, lambda c: c.execute(
            select(Message.data, Message.mime_type).where(Message.topic_name == topic).order_by(Message.id)).all(),
            write=False)
        return [decode_data(r.data, r.mime_type) for r in rows]

    apply(declaration.format(inbox=inbox, topic='ft.first'))
    assert rt.file_transfer.channels()['drops'].topics == ('ft.first',)
    (inbox / 'a.json').write_text('{"n": 1}')
    wait_until(lambda: data('ft.first') == [{'n': 1}], timeout=30, message='a.json published to ft.first')

    apply(declaration.format(inbox=inbox, topic='ft.second'))
    assert rt.file_transfer.channels()['drops'].topics == ('ft.second',)
    (inbox / 'b.json').write_text('{"n": 2}')
    wait_until(lambda: data('ft.second') == [{'n': 2}], timeout=30, message='b.json published to ft.second')
    assert data('ft.first') == [{'n': 1}]

    apply('pubsub_topic:\n  - name: ft.first\n  - name: ft.second\n')
    assert 'drops' not in rt.file_transfer.channels() and 'drops' not in rt.file_transfer.pollers()
