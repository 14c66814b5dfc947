"""The ``file_channel`` section of the object files: declared, changed, removed; others' channels left alone.

The applier is the server's own (``runtime.core.make_objects_applier``) over a migrated database of
the backend under test; the channels are read back through the administration layer, as the admin
API shows them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from runtime.core import make_objects_applier
from runtime.db.blocking import run_transaction
from runtime.db.engine import make_engine
from runtime.db.migrate import upgrade
from runtime.db.models import SyncState
from runtime.errors import ConfigError
from runtime.files.admin import FileChannelAdmin
from runtime.files.definition import FILE_CHANNELS_KEY, FileChannelDef
from runtime.objects import ObjectsApplier
from runtime.testing import make_settings

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
def engine(db_url: str) -> Iterator[Engine]:
    engine = make_engine(db_url, pool_size=2)
    upgrade(engine)
    yield engine
    engine.dispose()


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
