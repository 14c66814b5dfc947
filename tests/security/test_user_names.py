"""Look-alike and invisible user names are refused when a definition is created or renamed (issue 33)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, select

from runtime.config import AdminSection, DashboardSection
from runtime.core import make_objects_applier
from runtime.db.engine import transaction
from runtime.db.models import BasicAuthDef
from runtime.errors import BadRequest, ConfigError
from runtime.security.admin import SecurityAdmin
from runtime.security.user_names import reserved_usernames
from runtime.testing import make_settings
from tests.live_server import REPO, LiveServer

REFUSED = [
    ('ｃｒｍ', "user name 'ｃｒｍ' looks like the existing 'crm'"),        # full-width
    ('сrm', "user name 'сrm' looks like the existing 'crm'"),              # Cyrillic с
    ('CRM', "user name 'CRM' looks like the existing 'crm'"),
    ('crm ', 'U+0020 (SPACE)'),                                            # trailing space
    ('cr\u200bm', 'U+200B (ZERO WIDTH SPACE)'),
    ('аdmin', "looks like the reserved 'admin'"),                          # Cyrillic а
    ('ｂｏｂ', "is not in Unicode NFKC form (it normalises to 'bob')"),
]


@pytest.fixture(scope='module')
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real server with one definition of user name 'crm'."""
    base = tmp_path_factory.mktemp('user-names')
    live = LiveServer(base, f'sqlite:///{base / "conduit.db"}').start()
    live.admin_json('POST', '/admin/security', 201, json={'name': 'crm.def', 'username': 'crm', 'password': 'pw-1'})
    yield live
    live.stop()


@pytest.mark.parametrize(('username', 'message'), REFUSED)
def test_the_admin_api_refuses_look_alike_and_invisible_user_names(server: LiveServer, username: str,
                                                                   message: str) -> None:
    r = server.request('POST', '/admin/security', auth=server.admin,
                       json={'name': 'new.def', 'username': username, 'password': 'x'})
    assert r.status_code == 400 and message in r.json()['details'], r.text
    # A rename to a look-alike is refused the same way; the definition keeps its name.
    server.admin_json('POST', '/admin/security', 201, json={'name': 'other.def', 'username': 'other', 'password': 'x'})
    try:
        r = server.request('PATCH', '/admin/security/other.def', auth=server.admin, json={'username': username})
        assert r.status_code == 400 and message in r.json()['details'], r.text
        assert server.admin_json('GET', '/admin/security/other.def')['security']['username'] == 'other'
    finally:
        server.admin_json('DELETE', '/admin/security/other.def', 200)


def test_the_admin_api_accepts_a_distinct_user_name(server: LiveServer) -> None:
    created = server.admin_json('POST', '/admin/security', 201,
                                json={'name': 'crm2.def', 'username': 'crm2', 'password': 'x'})
    assert created['security']['username'] == 'crm2'


def _apply(tmp_path: Path, engine: Engine, text: str, admin: str = 'admin', viewer: str = 'viewer') -> None:
    settings = make_settings(tmp_path, str(engine.url.render_as_string(hide_password=False)))
    settings.admin.username, settings.dashboard.viewer_username = admin, viewer
    settings.hot_deploy.services_dir = str(REPO / 'services')
    d = tmp_path / 'objects'
    d.mkdir(exist_ok=True)
    (d / 'security.yaml').write_text(text)
    settings.objects.dir = str(d)
    make_objects_applier(settings, engine, False).apply()


def _file(*users: tuple[str, str]) -> str:
    return 'security:\n' + ''.join(f'  - name: {name}\n    username: "{user}"\n    password: pw\n'
                                   for name, user in users)


@pytest.mark.parametrize(('username', 'message'), REFUSED)
def test_object_files_refuse_look_alike_and_invisible_user_names(tmp_path: Path, engine: Engine, username: str,
                                                                 message: str) -> None:
    _apply(tmp_path, engine, _file(('crm.def', 'crm')))
    with pytest.raises(ConfigError) as e:
        _apply(tmp_path, engine, _file(('crm.def', 'crm'), ('twin.def', username)))
    assert message in str(e.value) and "'twin.def'" in str(e.value)
    with transaction(engine) as conn:
        assert list(conn.execute(select(BasicAuthDef.username)).scalars()) == ['crm']


def test_a_stored_look_alike_keeps_working_when_its_file_is_applied_again(tmp_path: Path, engine: Engine) -> None:
    # Stored before the rule (written straight to the table): left as it is, not refused on re-apply.
    _apply(tmp_path, engine, _file(('crm.def', 'crm')))
    with transaction(engine) as conn:
        conn.execute(BasicAuthDef.__table__.update().where(BasicAuthDef.name == 'crm.def').values(username='CRM'))
    _apply(tmp_path, engine, _file(('crm.def', 'CRM'), ('crm2.def', 'crm2')))


@pytest.mark.parametrize('username', ['OPS', 'оps', 'аdmin', 'Watch'])  # Cyrillic о and а
def test_configured_admin_and_viewer_names_are_reserved_like_the_defaults(tmp_path: Path, engine: Engine,
                                                                          username: str) -> None:
    # Before, only the default names 'admin' and 'viewer' were reserved, whatever the server used.
    with pytest.raises(ConfigError, match='looks like the reserved'):
        _apply(tmp_path, engine, _file(('twin.def', username)), admin='ops', viewer='watch')
    refused = SecurityAdmin(engine, lambda: None, lambda: None, reserved_usernames(
        AdminSection(username='ops'), DashboardSection(viewer_username='watch')))
    with pytest.raises(BadRequest, match='looks like the reserved'):
        refused.create({'name': 'twin.def', 'username': username, 'realm': 'Conduit', 'is_active': True}, 'pw')
