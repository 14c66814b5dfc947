"""Dashboard sessions end when their password changes, and on demand (admin API, CLI, dashboard), against real servers.

A session signed in with the admin (or viewer) password must not outlive that password: a server
restarted with a new one refuses the old cookie and its CSRF token. ``DELETE /admin/dashboard/sessions``,
``conduit dashboard end-sessions`` and the security page's button end every session, audited.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import requests
from click.testing import CliRunner
from sqlalchemy import create_engine

import runtime.cli as cli_module
from runtime.security.dashboard_sessions import SessionStore
from tests.databases import Databases
from tests.live_server import ADMIN_PASSWORD, ADMIN_USER, LiveServer

VIEWER_PASSWORD = 'viewer-secret-pw'
ENV = {'CONDUIT_DASHBOARD_VIEWER_PASSWORD': VIEWER_PASSWORD}
SESSIONS = '/admin/dashboard/sessions'


def _sign_in(server: LiveServer, username: str, password: str) -> tuple[requests.Session, str]:
    session = requests.Session()
    r = session.post(server.url + '/dashboard/sign-in', data={'username': username, 'password': password},
                     allow_redirects=False, timeout=10)
    assert r.status_code == 303 and 'conduit_session' in r.headers.get('Set-Cookie', ''), r.text
    page = session.get(server.url + '/dashboard/', timeout=10)
    assert page.status_code == 200
    return session, re.search(r'data-csrf="([^"]+)"', page.text).group(1)


def _signed_in(server: LiveServer, session: requests.Session) -> bool:
    """Whether the session's cookie still opens a page (else the answer is a 303 to the sign-in form)."""
    r = session.get(server.url + '/dashboard/', allow_redirects=False, timeout=10)
    assert r.status_code in (200, 303), r.status_code
    return r.status_code == 200


def _deploy(server: LiveServer, session: requests.Session, csrf: str) -> requests.Response:
    """A change through the dashboard's API mirror: deploying a module."""
    return session.post(server.url + '/dashboard/api/deploy', timeout=10,
                        headers={'X-CSRF-Token': csrf, 'Origin': server.url},
                        files={'file': ('stolen.py', b'x = 1\n')})


def _restart(server: LiveServer, **env: str) -> None:
    server.stop()
    server.env.update(env)
    server.start()


def test_a_new_admin_or_viewer_password_ends_that_roles_sessions(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=dict(ENV)).start()
    admin, admin_csrf = _sign_in(server, ADMIN_USER, ADMIN_PASSWORD)
    viewer, _ = _sign_in(server, 'viewer', VIEWER_PASSWORD)

    _restart(server)  # the same passwords: every session lives on
    assert _signed_in(server, admin) and _signed_in(server, viewer)

    _restart(server, CONDUIT_ADMIN_PASSWORD='a-new-admin-password')
    assert not _signed_in(server, admin)
    assert admin.get(server.url + '/dashboard/api/status', timeout=10).status_code == 401
    r = _deploy(server, admin, admin_csrf)
    assert r.status_code == 401, r.text
    assert 'stolen' not in server.request('GET', '/admin/services', auth=(ADMIN_USER, 'a-new-admin-password')).text
    assert _signed_in(server, viewer)  # the viewer's password did not change
    _sign_in(server, ADMIN_USER, 'a-new-admin-password')  # the new one signs in

    _restart(server, CONDUIT_DASHBOARD_VIEWER_PASSWORD='a-new-viewer-password')
    assert not _signed_in(server, viewer)
    assert viewer.get(server.url + '/dashboard/api/status', timeout=10).status_code == 401
    assert 'a-new' not in server.log()


def test_a_new_admin_user_name_ends_the_admin_sessions(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=dict(ENV)).start()
    admin, _ = _sign_in(server, ADMIN_USER, ADMIN_PASSWORD)
    _restart(server, CONDUIT_ADMIN_USERNAME='root')
    assert not _signed_in(server, admin)


def test_the_admin_api_ends_every_session_audited(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=dict(ENV)).start()
    admin, _ = _sign_in(server, ADMIN_USER, ADMIN_PASSWORD)
    viewer, _ = _sign_in(server, 'viewer', VIEWER_PASSWORD)
    listed = server.admin_json('GET', SESSIONS, 200)
    assert listed['total'] == 2 and {s['role'] for s in listed['sessions']} == {'admin', 'viewer'}
    assert not any(k in s for s in listed['sessions'] for k in ('token_hash', 'csrf_token', 'credential'))

    assert server.admin_json('DELETE', SESSIONS + '?role=viewer', 200)['ended'] == 1
    assert _signed_in(server, admin) and not _signed_in(server, viewer)
    answer = server.admin_json('DELETE', SESSIONS, 200)
    assert answer['ended'] == 1 and answer['role'] is None
    assert not _signed_in(server, admin)
    assert server.admin_json('GET', SESSIONS, 200)['total'] == 0
    entries = server.admin_json('GET', '/admin/audit?kind=dashboard', 200)['entries']
    assert [(e['action'], e['source'], e['method'], e['path']) for e in entries] == [
        ('end-sessions', 'api', 'DELETE', SESSIONS)] * 2


def test_the_cli_ends_every_session_audited(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=dict(ENV)).start()
    admin, _ = _sign_in(server, ADMIN_USER, ADMIN_PASSWORD)
    viewer, _ = _sign_in(server, 'viewer', VIEWER_PASSWORD)
    config = ['--config', str(server.base / 'config' / 'server.toml')]
    listed = CliRunner().invoke(cli_module.main, [*config, 'dashboard', 'sessions'])
    assert listed.exit_code == 0 and 'viewer' in listed.output and ADMIN_USER in listed.output, listed.output
    refused = CliRunner().invoke(cli_module.main, [*config, 'dashboard', 'end-sessions'])
    assert refused.exit_code == 2 and '--all' in refused.output
    no = CliRunner().invoke(cli_module.main, [*config, 'dashboard', 'end-sessions', '--all'], input='n\n')
    assert no.exit_code == 1 and _signed_in(server, admin)
    done = CliRunner().invoke(cli_module.main, [*config, 'dashboard', 'end-sessions', '--all', '--yes'])
    assert done.exit_code == 0 and 'ended 2 dashboard session(s)' in done.output, done.output
    assert not _signed_in(server, admin) and not _signed_in(server, viewer)
    entries = server.admin_json('GET', '/admin/audit?kind=dashboard', 200)['entries']
    assert [(e['action'], e['source'], e['actor']) for e in entries] == [('end-sessions', 'cli', ADMIN_USER)]


def test_the_dashboard_ends_every_session_for_an_admin_only(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=dict(ENV)).start()
    admin, admin_csrf = _sign_in(server, ADMIN_USER, ADMIN_PASSWORD)
    viewer, viewer_csrf = _sign_in(server, 'viewer', VIEWER_PASSWORD)
    url = server.url + '/dashboard/api/dashboard/sessions'
    page = admin.get(server.url + '/dashboard/security', timeout=10).text
    assert 'id="end-sessions"' in page
    assert 'id="end-sessions"' not in viewer.get(server.url + '/dashboard/security', timeout=10).text
    # A viewer may not, with its own CSRF token; nor anybody without the token or from another site.
    r = viewer.delete(url, headers={'X-CSRF-Token': viewer_csrf, 'Origin': server.url}, timeout=10)
    assert r.status_code == 403 and 'viewer' in r.json()['details']
    assert admin.delete(url, headers={'Origin': server.url}, timeout=10).status_code == 403
    r = admin.delete(url, headers={'X-CSRF-Token': admin_csrf, 'Origin': 'http://evil.example'}, timeout=10)
    assert r.status_code == 403
    assert server.admin_json('GET', SESSIONS, 200)['total'] == 2
    r = admin.delete(url, headers={'X-CSRF-Token': admin_csrf, 'Origin': server.url}, timeout=10)
    assert r.status_code == 200 and r.json()['ended'] == 2, r.text
    assert not _signed_in(server, admin) and not _signed_in(server, viewer)
    entries = server.admin_json('GET', '/admin/audit?kind=dashboard', 200)['entries']
    assert [(e['action'], e['source'], e['actor']) for e in entries] == [('end-sessions', 'dashboard', ADMIN_USER)]


def test_hostile_requests_to_the_sessions_route(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=dict(ENV)).start()
    viewer, _ = _sign_in(server, 'viewer', VIEWER_PASSWORD)
    url = server.url + SESSIONS
    assert requests.delete(url, timeout=10).status_code == 401
    assert requests.delete(url, auth=(ADMIN_USER, 'wrong'), timeout=10).status_code == 401
    assert requests.delete(url, auth=('viewer', VIEWER_PASSWORD), timeout=10).status_code == 401
    assert requests.get(url, timeout=10).status_code == 401
    for method in ('POST', 'PUT', 'PATCH'):
        assert requests.request(method, url, auth=server.admin, timeout=10).status_code == 405, method
    for query in ('?role=root', '?role=', '?role=admin%00', '?limit=0', '?limit=x'):
        method = 'GET' if 'limit' in query else 'DELETE'
        r = requests.request(method, url + query, auth=server.admin, timeout=10)
        assert r.status_code == 400 and r.json()['is_ok'] is False, (query, r.text)
    r = requests.delete(url, auth=server.admin, json={'role': 'viewer'}, timeout=10)
    assert r.status_code == 400 and 'no body' in r.json()['details']
    r = requests.delete(url, auth=server.admin, data=b'x' * 100_000, timeout=10)
    assert r.status_code == 413
    assert _signed_in(server, viewer)  # none of them ended anything
    assert server.admin_json('GET', '/admin/audit?kind=dashboard', 200)['entries'] == []
    assert 'Traceback' not in server.log()


def test_the_store_ends_sessions_of_a_changed_password(tmp_path: Path, databases: Databases) -> None:
    # A copy of the migrated template the sqlite servers' databases are copied from: running every
    # migration again was most of what this test cost.
    engine = create_engine(databases.sqlite_copy(tmp_path / 's.db'))
    first = SessionStore(engine, 3600, 3600)
    first.bind_credentials({'admin': ('admin', 'one'), 'viewer': ('viewer', 'v')})
    admin_token, _ = first.create('admin', 'admin')
    viewer_token, _ = first.create('viewer', 'viewer')
    # Another worker with the same passwords: the same sessions.
    same = SessionStore(engine, 3600, 3600)
    same.bind_credentials({'admin': ('admin', 'one'), 'viewer': ('viewer', 'v')})
    assert same.lookup(admin_token) is not None and same.lookup(viewer_token) is not None
    # A worker started with a new admin password: the admin's session has ended everywhere, even in the old worker.
    new = SessionStore(engine, 3600, 3600)
    new.bind_credentials({'admin': ('admin', 'two'), 'viewer': ('viewer', 'v')})
    assert new.lookup(admin_token) is None and first.lookup(admin_token) is None
    assert new.lookup(viewer_token) is not None
    # The old worker's sign-ins with the old password make sessions nobody accepts.
    stale, _ = first.create('admin', 'admin')
    assert new.lookup(stale) is None and first.lookup(stale) is None
    fresh, _ = new.create('admin', 'admin')
    assert new.lookup(fresh) is not None and new.live()[0] == 2
    assert new.end_all() == 2 and new.lookup(fresh) is None and new.lookup(viewer_token) is None
    engine.dispose()
