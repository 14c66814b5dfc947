"""Object files own what they declare: applying files deletes only what those files made, and a
dry run shows the changes without making them. References between objects are checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, insert, select

from runtime.cli import main
from runtime.config import load_settings
from runtime.core import make_objects_applier
from runtime.db.engine import make_engine, transaction
from runtime.db.migrate import upgrade
from runtime.db.models import BasicAuthDef, Job, PubSubPermission, RestChannel, Subscription, Topic
from runtime.errors import ConfigError
from runtime.objects.applier import ObjectsApplier
from runtime.testing import make_settings
from tests.live_server import REPO

#: One object of every kind a file may declare.
EVERY_KIND = '''
security:
  - name: {p}.sec
    username: {p}-user
    password: pw-{p}
channel_rest:
  - name: {p}.channel
    service: conduit.ping
    url_path: /{p}/ping
    method: GET
pubsub_topic:
  - name: {p}.topic
pubsub_permission:
  - security: {p}.sec
    sub: [{p}.topic]
pubsub_subscription:
  - push_service: conduit.ping
    topic_list: [{p}.topic]
scheduler:
  - name: {p}.job
    service: conduit.ping
    job_type: interval_based
    minutes: 5
'''

_TABLES = {'security': (BasicAuthDef, 'name'), 'channel': (RestChannel, 'name'), 'topic': (Topic, 'name'),
           'permission': (PubSubPermission, 'security'), 'job': (Job, 'name'),
           'subscription': (Subscription, 'pattern')}


def _applier(tmp_path: Path, engine: Engine, dirs: list[Path] | None = None,
             files: list[Path] | None = None) -> ObjectsApplier:
    settings = make_settings(tmp_path, str(engine.url.render_as_string(hide_password=False)))
    settings.hot_deploy.services_dir = str(REPO / 'services')
    if dirs is not None:
        (settings.objects.dir,) = (str(d) for d in dirs)
    if files is not None:
        return make_objects_applier(settings, engine, False, files)
    return make_objects_applier(settings, engine, False)


def _names(engine: Engine) -> dict[str, set[str]]:
    """Every stored object, by kind."""
    with transaction(engine) as conn:
        return {kind: {str(v) for v in conn.execute(select(getattr(table, column))).scalars()}
                for kind, (table, column) in _TABLES.items()}


def _dir(tmp_path: Path, name: str, files: dict[str, str]) -> Path:
    d = tmp_path / name
    d.mkdir(exist_ok=True)
    for file_name, text in files.items():
        (d / file_name).write_text(text)
    return d


def test_another_config_dir_on_the_same_database_never_deletes_the_first_ones_objects(
        tmp_path: Path, engine: Engine) -> None:
    first = _dir(tmp_path, 'first', {'objects.yaml': EVERY_KIND.format(p='a')})
    _applier(tmp_path, engine, [first]).apply()
    before = _names(engine)
    assert before['channel'] == {'a.channel'} and before['job'] == {'a.job'}

    second = _dir(tmp_path, 'second', {'objects.yaml': EVERY_KIND.format(p='b')})
    _applier(tmp_path, engine, [second]).apply()
    after = _names(engine)
    for kind, names in before.items():
        assert names <= after[kind], f'{kind}: the second directory deleted the first one\'s objects'
    assert 'b.channel' in after['channel'] and 'b.job' in after['job']

    # An empty directory (a server started without --demo, say) deletes nothing either.
    _applier(tmp_path, engine, [_dir(tmp_path, 'empty', {})]).apply()
    assert _names(engine) == after


def test_a_file_deletes_what_it_no_longer_declares_and_nothing_of_other_files(tmp_path: Path, engine: Engine) -> None:
    d = _dir(tmp_path, 'objects', {'a.yaml': EVERY_KIND.format(p='a'), 'b.yaml': EVERY_KIND.format(p='b')})
    applier = _applier(tmp_path, engine, [d])
    applier.apply()
    (d / 'a.yaml').write_text('')
    applier.apply()
    names = _names(engine)
    for kind in _TABLES:
        assert not any(n.startswith('a.') for n in names[kind]), f'{kind} of a.yaml not deleted: {names[kind]}'
        assert any(n.startswith('b.') for n in names[kind]), f'{kind} of b.yaml deleted'
    deleted = {(c.kind, c.action) for c in applier.last_changes}
    assert {(k, 'delete') for k in _TABLES} <= deleted

    (d / 'b.yaml').unlink()  # a removed file's objects go with it
    applier.apply()
    assert _names(engine)['channel'] == set()


def test_objects_made_through_the_api_are_never_deleted_nor_overwritten_by_files(
        tmp_path: Path, engine: Engine) -> None:
    with transaction(engine, write=True) as conn:
        conn.execute(insert(RestChannel).values(name='a.channel', service='conduit.ping', url_path='/api-made',
                                                methods='POST', data_format='json', security='', is_active=True,
                                                origin='api'))
    d = _dir(tmp_path, 'objects', {'a.yaml': EVERY_KIND.format(p='a')})
    applier = _applier(tmp_path, engine, [d])
    applier.apply()
    with transaction(engine) as conn:
        row = conn.execute(select(RestChannel).where(RestChannel.name == 'a.channel')).one()
    assert (row.url_path, row.origin, row.owner) == ('/api-made', 'api', '')
    skip = [c for c in applier.last_changes if c.action == 'skip']
    assert [(c.kind, c.name) for c in skip] == [('channel', 'a.channel')]
    assert 'admin API' in skip[0].detail

    (d / 'a.yaml').write_text('')
    applier.apply()
    assert _names(engine)['channel'] == {'a.channel'}


def test_explicit_files_own_only_their_objects(tmp_path: Path, engine: Engine) -> None:
    one = tmp_path / 'one.yaml'
    two = tmp_path / 'two.yaml'
    one.write_text(EVERY_KIND.format(p='one'))
    two.write_text(EVERY_KIND.format(p='two'))
    _applier(tmp_path, engine, files=[one]).apply()
    _applier(tmp_path, engine, files=[two]).apply()
    assert {'one.channel', 'two.channel'} <= _names(engine)['channel']
    one.write_text('')
    _applier(tmp_path, engine, files=[one]).apply()
    names = _names(engine)
    assert names['channel'] == {'two.channel'} and names['job'] == {'two.job'}


def test_dry_run_lists_the_changes_and_changes_nothing(tmp_path: Path, engine: Engine) -> None:
    d = _dir(tmp_path, 'objects', {'a.yaml': EVERY_KIND.format(p='a')})
    applier = _applier(tmp_path, engine, [d])
    plan = applier.plan()
    assert {(c.action, c.kind) for c in plan} == {('create', k) for k in _TABLES}
    assert _names(engine) == {k: set() for k in _TABLES}

    applier.apply()
    (d / 'a.yaml').write_text(EVERY_KIND.format(p='a').replace('/a/ping', '/a/pong').replace(
        'pubsub_topic:\n  - name: a.topic', 'pubsub_topic:\n  - name: a.topic\n  - name: a.other'))
    before = _names(engine)
    plan = applier.plan()
    assert [(c.action, c.kind, c.name, c.detail) for c in plan if c.action != 'skip'] == [
        ('update', 'channel', 'a.channel', 'url_path'), ('create', 'topic', 'a.other', '')]
    assert plan[0].file == str((d / 'a.yaml').resolve())
    assert _names(engine) == before
    with transaction(engine) as conn:
        assert conn.execute(select(RestChannel.url_path)).scalar_one() == '/a/ping'


def test_objects_apply_command_shows_a_dry_run_then_applies(tmp_path: Path, db_url: str) -> None:
    (tmp_path / 'config').mkdir()
    (tmp_path / 'config' / 'server.toml').write_text(
        f'[database]\nurl = "{db_url}"\n[hot_deploy]\nservices_dir = "{REPO / "services"}"\n')
    objects_file = tmp_path / 'shop.yaml'
    objects_file.write_text(EVERY_KIND.format(p='shop'))
    runner = CliRunner()
    args = ['--config', str(tmp_path / 'config' / 'server.toml'), 'objects', 'apply']
    engine = make_engine(db_url, pool_size=1)
    try:
        upgrade(engine)
        result = runner.invoke(main, [*args, str(objects_file), '--dry-run'])
        assert result.exit_code == 0, result.output
        assert 'shop.channel' in result.output and 'dry run, nothing changed: 6 to create' in result.output
        assert _names(engine)['channel'] == set()

        result = runner.invoke(main, [*args, str(objects_file)])
        assert result.exit_code == 0, result.output
        assert 'applied: 6 create' in result.output
        assert _names(engine)['channel'] == {'shop.channel'}

        objects_file.write_text('')
        result = runner.invoke(main, [*args, str(objects_file), '--dry-run', '--json'])
        assert result.exit_code == 0, result.output
        assert '"action": "delete"' in result.output and _names(engine)['channel'] == {'shop.channel'}
    finally:
        engine.dispose()


# References


@pytest.mark.parametrize(('text', 'message'), [
    ('channel_rest:\n  - {name: c1, service: no.such.service, url_path: /x}',
     "[channel_rest] 'c1': service 'no.such.service' does not exist"),
    ('channel_rest:\n  - {name: c1, service: conduit.ping, url_path: "/x/{a}", method: GET}\n'
     '  - {name: c2, service: conduit.ping, url_path: "/x/{b}", method: GET}',
     "[channel_rest] 'c1': channel 'c2' already answers GET /x/{b} (same path and method)"),
    ('pubsub_subscription:\n  - {push_service: conduit.ping, topic_list: [no.such.topic]}',
     "[pubsub_subscription] 'conduit.ping': topic 'no.such.topic' does not exist"),
    ('scheduler:\n  - {name: j1, service: no.such.service, job_type: interval_based, minutes: 1}',
     "[scheduler] 'j1': service 'no.such.service' does not exist"),
])
def test_files_naming_what_does_not_exist_or_clashing_are_refused_naming_file_and_object(
        tmp_path: Path, engine: Engine, text: str, message: str) -> None:
    d = _dir(tmp_path, 'objects', {'bad.yaml': text})
    with pytest.raises(ConfigError) as e:
        _applier(tmp_path, engine, [d]).apply()
    assert str((d / 'bad.yaml').resolve()) in str(e.value)
    assert message in str(e.value)
    assert _names(engine)['channel'] == set()


def test_a_channel_may_share_a_path_with_another_method(tmp_path: Path, engine: Engine) -> None:
    d = _dir(tmp_path, 'objects', {'ok.yaml': 'channel_rest:\n'
                                              '  - {name: c1, service: conduit.ping, url_path: /x, method: GET}\n'
                                              '  - {name: c2, service: conduit.ping, url_path: /x, method: POST}\n'
                                              'pubsub_subscription:\n'
                                              '  - {push_service: conduit.ping, topic_list: ["orders.*"]}'})
    _applier(tmp_path, engine, [d]).apply()
    assert _names(engine)['channel'] == {'c1', 'c2'}


def test_a_start_without_demo_keeps_the_demo_objects(engine: Engine) -> None:
    settings = load_settings(REPO / 'config' / 'server.toml', env={})
    demo = make_objects_applier(settings, engine, True)
    demo.apply()
    created = _names(engine)
    assert 'demo.procurement.spend-report' in created['job']  # names a SparkService of services/
    make_objects_applier(settings, engine, False).apply()
    assert _names(engine) == created
