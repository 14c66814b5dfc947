"""server.toml and CONDUIT_* environment overrides; no server needed."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any

import pytest

import runtime.config
from runtime.config import Settings, load_settings, unknown_env_vars
from runtime.errors import ConfigError
from runtime.service import Service

FULL = '''
[server]
bind = "0.0.0.0:18000"
workers = 3
graceful_timeout_secs = 4
pidfile = "run/conduit.pid"

[database]
url = "sqlite:///data/conduit.db"
pool_size = 7

[hot_deploy]
dir = "pickup"
poll_interval_secs = 0.5
stable_polls = 3

[objects]
poll_interval_secs = 2

[http]
max_body_size = 1000

[admin]
username = "root"
password = "admin-pw"

[sync]
interval_secs = 0.25

[logging]
level = "DEBUG"
'''


def write_config(base: Path, text: str) -> Path:
    """base/config/server.toml with text; returns its path."""
    path = base / 'config' / 'server.toml'
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding='utf-8')
    return path


def load(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> Settings:
    """Settings from a server.toml with text, under an environment of env only."""
    return load_settings(write_config(tmp_path, text), env=env or {})


def test_every_section_of_server_toml_is_read_with_its_type(tmp_path: Path) -> None:
    s = load(tmp_path, FULL)
    assert (s.server.bind, s.server.workers, s.server.pidfile) == ('0.0.0.0:18000', 3, 'run/conduit.pid')
    assert s.server.graceful_timeout_secs == 4.0 and isinstance(s.server.graceful_timeout_secs, float)
    assert (s.database.url, s.database.pool_size) == ('sqlite:///data/conduit.db', 7)
    assert (s.hot_deploy.dir, s.hot_deploy.poll_interval_secs, s.hot_deploy.stable_polls) == ('pickup', 0.5, 3)
    assert s.objects.poll_interval_secs == 2.0
    assert s.http.max_body_size == 1000
    assert (s.admin.username, s.admin.password) == ('root', 'admin-pw')
    assert s.sync.interval_secs == 0.25
    assert s.logging.level == 'DEBUG'


def test_keys_not_in_the_file_keep_their_defaults(tmp_path: Path) -> None:
    s = load(tmp_path, '[server]\nworkers = 2\n')
    defaults = Settings()
    assert s.server.workers == 2
    assert s.server.bind == defaults.server.bind == '127.0.0.1:17010'
    assert s.database == defaults.database
    assert s.hot_deploy == defaults.hot_deploy


def test_environment_overrides_every_key_with_type_conversion(tmp_path: Path) -> None:
    env = {'CONDUIT_SERVER_WORKERS': '5', 'CONDUIT_SERVER_GRACEFUL_TIMEOUT_SECS': '2.5',
           'CONDUIT_DATABASE_URL': 'postgresql://127.0.0.1/other', 'CONDUIT_HOT_DEPLOY_DIR': 'elsewhere',
           'CONDUIT_HOT_DEPLOY_STABLE_POLLS': '4', 'CONDUIT_HTTP_MAX_BODY_SIZE': '2048',
           'CONDUIT_ADMIN_PASSWORD': 'from-env', 'CONDUIT_LOGGING_LEVEL': 'WARNING',
           # Not keys of any section: the CLI's own variable and unrelated tools' variables.
           'CONDUIT_CONFIG': 'ignored.toml', 'CONDUIT_TEST_PG_URL': 'postgresql://x/y', 'HOME': '/root'}
    s = load(tmp_path, FULL, env)
    assert s.server.workers == 5
    assert s.server.graceful_timeout_secs == 2.5
    assert s.database.url == 'postgresql://127.0.0.1/other'
    assert (s.hot_deploy.dir, s.hot_deploy.stable_polls) == ('elsewhere', 4)
    assert s.http.max_body_size == 2048
    assert s.admin.password == 'from-env'
    assert s.logging.level == 'WARNING'
    # Untouched keys keep the file's values.
    assert s.server.bind == '0.0.0.0:18000'


@pytest.mark.parametrize(('text', 'named'), [
    ('[serverr]\nworkers = 2\n', '[serverr]'),
    ('[server]\nworkres = 2\n', "'workres'"),
    ('[server]\nworkers = 2\n[database]\nurl = "sqlite:///x.db"\npassword = "x"\n', "'password'"),
    ('server = 1\n', '[server] must be a table'),
    ('[server]\n__init__ = 1\n', "'__init__'"),
])
def test_unknown_section_or_key_is_an_error_naming_it(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    assert named in str(e.value)
    assert 'server.toml' in str(e.value)


def test_misspelt_environment_override_of_a_known_section_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, '', {'CONDUIT_SERVER_WORKRES': '4'})
    assert 'CONDUIT_SERVER_WORKRES' in str(e.value)


@pytest.mark.parametrize(('text', 'named'), [
    ('[server]\nworkers = "four"\n', '[server] workers'),
    ('[server]\nworkers = 2.5\n', '[server] workers'),
    ('[server]\nworkers = true\n', '[server] workers'),
    ('[server]\nbind = 17010\n', '[server] bind'),
    ('[server]\ngraceful_timeout_secs = "soon"\n', '[server] graceful_timeout_secs'),
    ('[hot_deploy]\npoll_interval_secs = [1]\n', '[hot_deploy] poll_interval_secs'),
])
def test_value_of_the_wrong_type_is_an_error_naming_the_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, text)
    assert named in str(e.value)
    assert 'expected' in str(e.value)


@pytest.mark.parametrize(('var', 'value'), [
    ('CONDUIT_SERVER_WORKERS', 'many'),
    ('CONDUIT_SERVER_WORKERS', ''),
    ('CONDUIT_SYNC_INTERVAL_SECS', 'fast'),
])
def test_environment_value_of_the_wrong_type_is_an_error_naming_the_variable(
        tmp_path: Path, var: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, '', {var: value})
    assert var in str(e.value)
    assert repr(value) in str(e.value)


def test_invalid_toml_is_an_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, '[server\nworkers = 2\n')
    assert str(tmp_path / 'config' / 'server.toml') in str(e.value)
    assert 'TOML' in str(e.value)


def test_relative_paths_are_resolved_against_the_project_directory(tmp_path: Path) -> None:
    s = load(tmp_path, FULL)
    assert s.base_dir == tmp_path
    assert s.database_url == f'sqlite:///{tmp_path}/data/conduit.db'
    assert s.path(s.hot_deploy.dir) == tmp_path / 'pickup'
    assert s.path(s.server.pidfile) == tmp_path / 'run' / 'conduit.pid'
    assert s.path('/abs/dir') == Path('/abs/dir')

    for url in (f'sqlite:///{tmp_path}/abs.db', 'sqlite:///:memory:', 'sqlite://',
                'postgresql://user@127.0.0.1:5432/conduit'):
        assert load(tmp_path, f'[database]\nurl = "{url}"\n').database_url == url


def test_project_directory_is_the_parent_of_config_whichever_way_the_file_is_named(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, '[database]\nurl = "sqlite:///var/conduit.db"\n')
    monkeypatch.chdir(tmp_path / 'config')
    s = load_settings('server.toml', env={})
    assert s.base_dir == tmp_path
    assert s.database_url == f'sqlite:///{tmp_path}/var/conduit.db'

    # A file outside a config/ folder: its own folder is the project directory.
    other = tmp_path / 'elsewhere' / 'conduit.toml'
    other.parent.mkdir()
    other.write_text('[server]\nworkers = 2\n')
    assert load_settings(other, env={}).base_dir == other.parent


def test_conduit_config_names_the_file_and_a_missing_named_file_is_an_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_config(tmp_path, '[server]\nworkers = 6\n')
    monkeypatch.chdir(tmp_path / 'config')
    assert load_settings(env={'CONDUIT_CONFIG': str(path)}).server.workers == 6

    for named in (tmp_path / 'config' / 'sever.toml', tmp_path / 'nowhere' / 'server.toml'):
        with pytest.raises(ConfigError) as e:
            load_settings(named, env={})
        assert str(named) in str(e.value)
        with pytest.raises(ConfigError):
            load_settings(env={'CONDUIT_CONFIG': str(named)})

    # Without a name, a project without config/server.toml (here or above) runs on the defaults.
    path.unlink()
    empty = tmp_path / 'empty'
    empty.mkdir()
    monkeypatch.chdir(empty)
    s = load_settings(env={})
    assert s.server.workers == Settings().server.workers
    assert s.base_dir == Path.cwd()


def test_without_a_name_the_nearest_project_above_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_config(tmp_path, '[server]\nworkers = 5\n')
    deep = tmp_path / 'hot-deploy' / 'sub'
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    s = load_settings(env={})
    assert (s.server.workers, s.base_dir) == (5, tmp_path)


def test_server_toml_documents_every_key_with_its_default() -> None:
    path = Path(runtime.config.__file__).parent.parent / 'config' / 'server.toml'
    data = tomllib.loads(path.read_text(encoding='utf-8'))
    defaults = Settings()
    for section in dataclasses.fields(Settings):
        if section.name in ('base_dir', 'services'):
            continue
        assert section.name in data, f'[{section.name}] is missing from {path}'
        keys = [f.name for f in dataclasses.fields(getattr(defaults, section.name))]
        assert sorted(data[section.name]) == sorted(keys), f'[{section.name}] of {path}'
        for key in keys:
            assert data[section.name][key] == getattr(getattr(defaults, section.name), key), f'{section.name}.{key}'
    # The per-service tables are explained, with an example.
    assert '# [services."crm.customer.create"]' in path.read_text(encoding='utf-8')


SERVICES_CONFIG = '''
[services."crm.customer.create"]
api_url = "https://crm.example.com/api"
timeout_secs = 5.0
retries = 3
verbose = false
tags = ["a", "b"]
'''


def test_services_have_configuration_overridable_by_the_environment(tmp_path: Path) -> None:
    s = load(tmp_path, SERVICES_CONFIG)
    assert s.services == {'crm.customer.create': {'api_url': 'https://crm.example.com/api', 'timeout_secs': 5.0,
                                                  'retries': 3, 'verbose': False, 'tags': ['a', 'b']}}
    env = {'CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_RETRIES': '7', 'CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_VERBOSE': 'yes',
           'CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_TAGS': '["c"]'}
    s = load(tmp_path, SERVICES_CONFIG, env)
    assert s.services['crm.customer.create'] == {'api_url': 'https://crm.example.com/api', 'timeout_secs': 5.0,
                                                 'retries': 7, 'verbose': True, 'tags': ['c']}
    with pytest.raises(ConfigError, match='CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_RETRIES'):
        load(tmp_path, SERVICES_CONFIG, {'CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_RETRIES': 'many'})
    with pytest.raises(ConfigError, match=r'\[services\] must hold one table per service'):
        load(tmp_path, '[services]\napi_url = "x"\n')


class Configured(Service):
    name = 'crm.customer.create'

    def handle(self) -> None:
        self.response.payload = dict(self.config)


class Unconfigured(Service):
    name = 'crm.other'

    def handle(self) -> None:
        self.response.payload = dict(self.config)


def test_a_service_reads_its_own_configuration(tmp_path: Path, runtime_factory: Any) -> None:
    from runtime.testing import make_settings
    settings = make_settings(tmp_path)
    settings.services = load(tmp_path, SERVICES_CONFIG).services
    rt = runtime_factory(Configured, Unconfigured, settings=settings)
    assert rt.invoke('crm.customer.create')['api_url'] == 'https://crm.example.com/api'
    assert rt.invoke('crm.other') == {}


@pytest.mark.parametrize(('var', 'guess'), [
    ('CONDUIT_PORT', 'CONDUIT_SERVER_BIND'),
    ('CONDUIT_BIND', 'CONDUIT_SERVER_BIND'),
    ('CONDUIT_WORKERS', 'CONDUIT_SERVER_WORKERS'),
    ('CONDUIT_DATABSE_URL', 'CONDUIT_DATABASE_URL'),
    ('CONDUIT_CONFG', 'CONDUIT_CONFIG'),
    ('CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_API_ULR', 'CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_API_URL'),
    ('CONDUIT_XYZZY', None),
])
def test_look_alike_environment_variables_are_reported_with_the_closest_real_one(
        tmp_path: Path, var: str, guess: str | None) -> None:
    env = {var: '1', 'CONDUIT_SECRET_CRM': 'pw', 'CONDUIT_TEST_BACKENDS': 'sqlite', 'CONDUIT_SERVER_WORKERS': '2',
           'CONDUIT_CONFIG': 'x', 'CONDUIT_URL': 'http://127.0.0.1:1', 'PATH': '/bin'}
    settings = load(tmp_path, SERVICES_CONFIG, {k: v for k, v in env.items() if k != 'CONDUIT_CONFIG'})
    assert unknown_env_vars(settings, env) == [(var, guess)]


@pytest.mark.parametrize('value', ['-1', '3601', 'nan'])
def test_dead_client_secs_out_of_range_is_an_error_naming_the_key(tmp_path: Path, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, f'[database]\ndead_client_secs = {value}\n')
    assert '[database] dead_client_secs' in str(e.value)


@pytest.mark.parametrize('key, value', [('queue_vacuum_secs', '-1'), ('queue_vacuum_secs', '0.01'),
                                        ('queue_vacuum_secs', 'nan'), ('queue_vacuum_secs', '1e9'),
                                        ('queue_vacuum_dead_rows', '0'), ('queue_vacuum_dead_rows', '-5')])
def test_queue_vacuum_settings_out_of_range_are_an_error_naming_the_key(tmp_path: Path, key: str, value: str) -> None:
    with pytest.raises(ConfigError) as e:
        load(tmp_path, f'[pubsub]\n{key} = {value}\n')
    assert f'[pubsub] {key}' in str(e.value)


@pytest.mark.parametrize('key, value', [('frames_per_sec', '0'), ('frames_per_sec', 'nan'),
                                        ('hello_frames_per_sec', '-1'), ('hello_frame_burst', '0'),
                                        ('frame_burst', '1e12'), ('hello_max_bytes', '10'),
                                        ('hello_timeout_secs', 'inf'), ('max_window', '0'),
                                        ('max_subscriptions_per_definition', '-1'), ('max_frame_bytes', 'true')])
def test_websocket_settings_out_of_range_are_an_error_naming_the_key(tmp_path: Path, key: str, value: str) -> None:
    # Before, a rate of 0 or NaN was taken as it was: every frame of every client was refused.
    with pytest.raises(ConfigError) as e:
        load(tmp_path, f'[websocket]\n{key} = {value}\n')
    assert f'[websocket] {key}' in str(e.value)


def test_websocket_windows_and_hello_limit_must_agree(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r'\[websocket\] default_window.*max_window \(10\)'):
        load(tmp_path, '[websocket]\ndefault_window = 20\nmax_window = 10\n')
    with pytest.raises(ConfigError, match=r'\[websocket\] hello_max_bytes.*max_frame_bytes \(2048\)'):
        load(tmp_path, '[websocket]\nhello_max_bytes = 4096\nmax_frame_bytes = 2048\n')
