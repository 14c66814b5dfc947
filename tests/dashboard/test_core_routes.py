"""The dashboard's door, against a real server: sign-in, sessions, CSRF, origins, roles, hostile input, audit.

Most tests share one server (SQLite) for speed; those that touch the session and audit tables run
on both databases.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from sqlalchemy import create_engine, update

from runtime.admin_client import AdminClient
from runtime.config import load_settings
from runtime.db.models import DashboardSession
from runtime.http.admin.routes import ROUTES
from runtime.http.dashboard.routes import mirror_path
from tests.live_server import ADMIN_PASSWORD, ADMIN_USER, LiveServer, poll

VIEWER_PASSWORD = 'viewer-secret-pw'
ENV = {'CONDUIT_DASHBOARD_VIEWER_PASSWORD': VIEWER_PASSWORD}

_FIELD = re.compile(r'\{(\w+)(?::(\w+))?[^}]*\}')


def _concrete(template: str) -> str:
    return _FIELD.sub(lambda m: '1' if m.group(2) == 'int' else 'x', template)


@pytest.fixture(scope='module')
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the module, on SQLite, its sign-in throttle off."""
    base = tmp_path_factory.mktemp('dash')
    server = LiveServer(base, f'sqlite:///{base / "conduit.db"}', env=ENV).start()
    yield server
    server.stop()
    assert 'Traceback' not in server.log()


def sign_in(server: LiveServer, username: str = ADMIN_USER,
            password: str = ADMIN_PASSWORD) -> tuple[requests.Session, str]:
    """A signed-in session and its CSRF token."""
    session = requests.Session()
    r = session.post(server.url + '/dashboard/sign-in', data={'username': username, 'password': password},
                     allow_redirects=False, timeout=10)
    assert r.status_code == 303, r.text
    page = session.get(server.url + '/dashboard/', timeout=10)
    assert page.status_code == 200
    return session, re.search(r'data-csrf="([^"]+)"', page.text).group(1)


def _raw(server: LiveServer, request: bytes) -> bytes:
    with socket.create_connection(('127.0.0.1', server.port), timeout=10) as s:
        s.sendall(request)
        data = b''
        while chunk := s.recv(65536):
            data += chunk
    return data


# Sign-in


def test_sign_in_sets_a_strict_session_cookie(dash: LiveServer) -> None:
    r = requests.post(dash.url + '/dashboard/sign-in', allow_redirects=False, timeout=10,
                      data={'username': ADMIN_USER, 'password': ADMIN_PASSWORD, 'next': '/dashboard/topics?x=1'})
    assert r.status_code == 303 and r.headers['Location'] == '/dashboard/topics?x=1'
    cookie = r.headers['Set-Cookie']
    assert cookie.startswith('conduit_session=')
    for flag in ('HttpOnly', 'SameSite=Strict', 'Path=/dashboard', 'Max-Age=28800'):
        assert flag in cookie, cookie
    token = cookie.split(';')[0].split('=', 1)[1]
    assert len(token) >= 40
    # Only the token's hash is stored.
    engine = create_engine(dash.db_url)
    with engine.connect() as conn:
        hashes = [row.token_hash for row in conn.execute(DashboardSession.__table__.select())]
    engine.dispose()
    assert token not in hashes and all(len(h) == 64 for h in hashes)


def test_wrong_credentials_answer_the_form_saying_nothing_about_which_part(dash: LiveServer) -> None:
    answers = [requests.post(dash.url + '/dashboard/sign-in', data=data, allow_redirects=False, timeout=10)
               for data in ({'username': ADMIN_USER, 'password': 'wrong'}, {'username': 'nobody', 'password': 'x'},
                            {'username': 'viewer', 'password': ADMIN_PASSWORD}, {'username': '', 'password': ''},
                            {'username': 'a:b', 'password': 'c'})]
    for r in answers:
        assert r.status_code == 200 and 'Set-Cookie' not in r.headers
        assert 'The user name and password do not match' in r.text
        assert '<form' in r.text and 'wrong' not in r.text.split('do not match')[1][:40]
    assert "failed sign-in as 'nobody'" in dash.log()


def test_the_viewer_signs_in_as_viewer_and_cannot_use_the_admin_api(dash: LiveServer) -> None:
    session, _ = sign_in(dash, 'viewer', VIEWER_PASSWORD)
    page = session.get(dash.url + '/dashboard/', timeout=10).text
    assert 'role-viewer' in page and 'data-can-write="false"' in page
    assert requests.get(dash.url + '/admin/status', auth=('viewer', VIEWER_PASSWORD), timeout=10).status_code == 401


def test_failed_sign_ins_are_throttled(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env={**ENV, 'CONDUIT_HTTP_AUTH_MAX_FAILURES': '3'}).start()
    statuses = [requests.post(server.url + '/dashboard/sign-in', data={'username': 'admin', 'password': 'no'},
                              allow_redirects=False, timeout=10) for _ in range(5)]
    assert [r.status_code for r in statuses] == [200, 200, 200, 429, 429]
    assert int(statuses[-1].headers['Retry-After']) >= 1 and 'Too many failed sign-ins' in statuses[-1].text
    # Even the right password waits now: the throttle answers before any password is checked.
    r = requests.post(server.url + '/dashboard/sign-in', data={'username': 'admin', 'password': ADMIN_PASSWORD},
                      allow_redirects=False, timeout=10)
    assert r.status_code == 429


@pytest.mark.parametrize('target', [
    '//evil.example/x', 'https://evil.example/dashboard/', '/dashboard/../admin/status', '/\\evil.example',
    '/dashboard/%2e%2e/admin', 'javascript:alert(1)', '/admin/status', '/dashboard//evil.example',
    '/dashboard/sign-in?next=//evil.example', '\x00/dashboard/',
])
def test_next_never_leaves_the_dashboard(dash: LiveServer, target: str) -> None:
    r = requests.post(dash.url + '/dashboard/sign-in', allow_redirects=False, timeout=10,
                      data={'username': ADMIN_USER, 'password': ADMIN_PASSWORD, 'next': target})
    assert r.status_code in (303, 400)
    if r.status_code == 303:
        assert r.headers['Location'] == '/dashboard/'


def test_a_page_without_a_session_goes_to_the_sign_in_form_and_an_api_call_gets_401(dash: LiveServer) -> None:
    r = dash.request('GET', '/dashboard/?tab=1', allow_redirects=False)
    assert r.status_code == 303 and r.headers['Location'] == '/dashboard/sign-in?next=/dashboard/%3Ftab%3D1'
    r = dash.request('GET', '/dashboard/api/status')
    assert r.status_code == 401 and r.json()['details'].startswith('sign in to the dashboard')
    assert 'WWW-Authenticate' not in r.headers  # no browser password dialog
    # The admin's Basic Auth does not open the dashboard's API: it takes a session.
    assert dash.request('GET', '/dashboard/api/status', auth=dash.admin).status_code == 401
    assert dash.request('GET', '/dashboard', allow_redirects=False).headers['Location'] == '/dashboard/'


# Sessions


def test_sign_out_ends_the_session(dash: LiveServer) -> None:
    session, csrf = sign_in(dash)
    cookie = session.cookies.get('conduit_session')
    assert session.post(dash.url + '/dashboard/sign-out', data={'csrf_token': 'wrong'}, allow_redirects=False,
                        timeout=10).status_code == 403
    r = session.post(dash.url + '/dashboard/sign-out', data={'csrf_token': csrf}, allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers['Location'] == '/dashboard/sign-in'
    replay = requests.get(dash.url + '/dashboard/api/status', cookies={'conduit_session': cookie}, timeout=10)
    assert replay.status_code == 401


def test_expired_and_idle_sessions_end(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=ENV).start()
    engine = create_engine(server.db_url)
    try:
        for column in ('expires_at', 'last_seen_at'):
            session, _ = sign_in(server)
            assert session.get(server.url + '/dashboard/api/status', timeout=10).status_code == 200
            with engine.begin() as conn:
                conn.execute(update(DashboardSession).values({column: 1000.0}))
            assert session.get(server.url + '/dashboard/api/status', timeout=10).status_code == 401
            r = session.get(server.url + '/dashboard/', allow_redirects=False, timeout=10)
            assert r.status_code == 303 and r.headers['Location'].startswith('/dashboard/sign-in')
        with engine.connect() as conn:
            assert conn.execute(DashboardSession.__table__.select()).first() is None  # ended ones are gone
    finally:
        engine.dispose()


@pytest.mark.parametrize('cookie', ['x', 'A' * 5000, '\u00e9\u00e9', '"quoted"', '; Path=/', 'a' * 43])
def test_a_bad_cookie_is_no_session(dash: LiveServer, cookie: str) -> None:
    raw = (f'GET /dashboard/api/status HTTP/1.1\r\nHost: x\r\nCookie: conduit_session={cookie}\r\n'
           'Connection: close\r\n\r\n')
    assert _raw(dash, raw.encode('utf-8')).split(b' ', 2)[1] in (b'401', b'400', b'431')


# CSRF, origins and roles


def test_changes_need_the_csrf_token_and_this_origin(dash: LiveServer) -> None:
    session, csrf = sign_in(dash)
    url = dash.url + '/dashboard/api/topics'
    assert session.post(url, json={'name': 'csrf.none'}, timeout=10).status_code == 403
    r = session.post(url, json={'name': 'csrf.wrong'}, headers={'X-CSRF-Token': csrf[:-1] + 'x'}, timeout=10)
    assert r.status_code == 403 and 'CSRF token' in r.json()['details']
    for header in ({'Origin': 'http://evil.example'}, {'Origin': 'null'},
                   {'Referer': 'http://evil.example/page'}, {'Origin': dash.url.replace('127.0.0.1', 'localhost')}):
        r = session.post(url, json={'name': 'csrf.cross'}, headers={'X-CSRF-Token': csrf, **header}, timeout=10)
        assert r.status_code == 403 and 'another site' in r.json()['details'], header
    r = session.post(url, json={'name': 'csrf.ok'}, headers={'X-CSRF-Token': csrf, 'Origin': dash.url}, timeout=10)
    assert r.status_code == 201, r.text
    # A cross-site sign-in is refused too (login CSRF).
    r = requests.post(dash.url + '/dashboard/sign-in', data={'username': ADMIN_USER, 'password': ADMIN_PASSWORD},
                      headers={'Origin': 'http://evil.example'}, allow_redirects=False, timeout=10)
    assert r.status_code == 403


def test_the_viewer_is_refused_every_unsafe_mirror_route(dash: LiveServer) -> None:
    session, csrf = sign_in(dash, 'viewer', VIEWER_PASSWORD)
    allowed: list[str] = []
    for path, resource_class in ROUTES:
        for method in ('POST', 'PUT', 'PATCH', 'DELETE'):
            if not callable(getattr(resource_class, f'on_{method.lower()}', None)):
                continue
            r = session.request(method, dash.url + mirror_path(_concrete(path)), json={}, timeout=10,
                                headers={'X-CSRF-Token': csrf})
            if r.status_code != 403:
                allowed.append(f'{method} {path} -> {r.status_code}')
    assert not allowed, allowed
    # Reading is the viewer's right.
    assert session.get(dash.url + '/dashboard/api/topics', timeout=10).status_code == 200


# Hostile input


def test_hostile_requests_get_a_clear_4xx(dash: LiveServer) -> None:
    session, csrf = sign_in(dash)
    huge = {'username': 'admin', 'password': 'x' * 200_000}
    r = requests.post(dash.url + '/dashboard/sign-in', data=huge, timeout=10)
    assert r.status_code == 413
    r = requests.post(dash.url + '/dashboard/sign-in', data={f'f{i}': 'x' for i in range(100)}, timeout=10)
    assert r.status_code == 400
    r = requests.post(dash.url + '/dashboard/sign-in', data=b'username=\xff\xfe&password=x', timeout=10,
                      headers={'Content-Type': 'application/x-www-form-urlencoded'})
    assert r.status_code == 400
    r = requests.post(dash.url + '/dashboard/sign-in', data={'username': 'admin\x00', 'password': 'x'}, timeout=10)
    assert r.status_code == 400
    assert session.get(dash.url + '/dashboard/api/topics/a%00b', timeout=10).status_code == 400
    assert session.get(dash.url + '/dashboard/api/no/such/route', timeout=10).status_code == 404
    assert session.get(dash.url + '/dashboard/no-such-page', timeout=10).status_code == 404
    r = session.post(dash.url + '/dashboard/api/topics', data='{"name": [[[[', timeout=10,
                     headers={'X-CSRF-Token': csrf, 'Content-Type': 'application/json'})
    assert r.status_code == 400


@pytest.mark.parametrize('path', [
    '/dashboard/api/../admin/status', '/dashboard/api/%2e%2e/%2e%2e/admin/status', '/dashboard/api//status',
    '/dashboard/static/../../setup.cfg', '/dashboard/static/..%2F..%2Fsetup.cfg',
    '/dashboard/static/%2e%2e%2fsetup.cfg',
    '/dashboard/static/setup.cfg', '/dashboard/static/.%2Fdashboard.js%2F..%2F..%2F..%2Fsetup.cfg',
    '/dashboard/static/', '/dashboard/static/plotly.min.js/x',
])
def test_path_tricks_reach_neither_the_admin_api_nor_files(dash: LiveServer, path: str) -> None:
    answer = _raw(dash, f'GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'.encode())
    status = int(answer.split(b' ', 2)[1])
    assert status in (303, 400, 401, 404), (path, status)
    assert b'[metadata]' not in answer and b'"pid"' not in answer


# Headers and static files


def test_every_dashboard_answer_has_the_security_headers_and_server_timing(dash: LiveServer) -> None:
    session, _ = sign_in(dash)
    for path in ('/dashboard/', '/dashboard/api/status', '/dashboard/sign-in', '/dashboard/nope',
                 '/dashboard/static/dashboard.css'):
        r = session.get(dash.url + path, timeout=10)
        assert "script-src 'self'" in r.headers['Content-Security-Policy'], path
        assert "frame-ancestors 'none'" in r.headers['Content-Security-Policy']
        assert r.headers['X-Frame-Options'] == 'DENY' and r.headers['Referrer-Policy'] == 'same-origin'
        assert re.fullmatch(r'app;dur=\d+(\.\d+)?', r.headers['Server-Timing']), path
    assert session.get(dash.url + '/dashboard/api/status', timeout=10).headers['Cache-Control'] == 'no-store'
    assert 'Server-Timing' not in dash.request('GET', '/health').headers


def test_static_files_are_a_whitelist_with_versioned_caching(dash: LiveServer) -> None:
    session, _ = sign_in(dash)
    page = session.get(dash.url + '/dashboard/', timeout=10).text
    js_url = re.search(r'src="(/dashboard/static/dashboard\.js\?v=[0-9a-f]+)"', page).group(1)
    r = requests.get(dash.url + js_url, timeout=10)  # no session needed: the sign-in form uses them
    assert r.status_code == 200 and 'window.Dash' in r.text
    assert r.headers['Cache-Control'] == 'public, max-age=31536000, immutable'
    assert r.headers['Content-Type'].startswith('text/javascript')
    assert requests.get(dash.url + '/dashboard/static/dashboard.js', timeout=10).headers['Cache-Control'] == 'no-cache'
    again = requests.get(dash.url + js_url, headers={'If-None-Match': r.headers['ETag']}, timeout=10)
    assert again.status_code == 304
    plotly = requests.get(dash.url + '/dashboard/static/plotly.min.js', timeout=30)
    assert plotly.status_code == 200 and len(plotly.content) > 1_000_000 and b'plotly' in plotly.content[:2000].lower()
    assert requests.get(dash.url + '/dashboard/static/nope.js', timeout=10).status_code == 404


# Audit


def test_the_audit_log_says_where_each_change_came_from(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=ENV).start()
    session, csrf = sign_in(server)
    r = session.post(server.url + '/dashboard/api/topics', json={'name': 'from.dashboard'},
                     headers={'X-CSRF-Token': csrf}, timeout=10)
    assert r.status_code == 201, r.text
    assert server.request('POST', '/admin/topics', json={'name': 'from.api'}, auth=server.admin).status_code == 201
    config = Path(server.base) / 'config' / 'server.toml'
    env = {**os.environ, 'CONDUIT_CONFIG': str(config)}
    cli = subprocess.run([sys.executable, '-m', 'runtime.cli', 'topic', 'create', 'from.cli'], env=env,
                         capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0, cli.stderr
    entries = server.request('GET', '/admin/audit?kind=topic', auth=server.admin).json()['entries']
    sources = {e['name']: (e['source'], e['actor']) for e in entries}
    assert sources == {'from.dashboard': ('dashboard', 'admin'), 'from.api': ('api', 'admin'),
                       'from.cli': ('cli', 'admin')}
    only = server.request('GET', '/admin/audit?source=dashboard', auth=server.admin).json()
    assert only['total'] == 1 and only['entries'][0]['path'] == '/dashboard/api/topics'
    # The dashboard reads the same log through its mirror.
    mirrored = session.get(server.url + '/dashboard/api/audit?source=cli', timeout=10).json()
    assert [e['name'] for e in mirrored['entries']] == ['from.cli']
    listed = subprocess.run([sys.executable, '-m', 'runtime.cli', 'audit', '--source', 'dashboard', '--json'], env=env,
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert [e['name'] for e in json.loads(listed.stdout)['entries']] == ['from.dashboard']
    client = AdminClient(load_settings(config))
    client.call('POST', '/admin/topics', {'name': 'from.client'})
    entries = server.request('GET', '/admin/audit?name=from.client', auth=server.admin).json()['entries']
    assert entries[0]['source'] == 'cli'
    server.write_objects('topics.yaml', 'pubsub_topic:\n  - name: from.files\n')
    poll(lambda: server.request('GET', '/admin/audit?source=files', auth=server.admin).json()['total'], 20,
         message='the object file in the audit log')
    files = server.request('GET', '/admin/audit?source=files', auth=server.admin).json()['entries']
    assert [(e['name'], e['kind'], e['action']) for e in files] == [('from.files', 'topic', 'create')]


def test_no_secret_in_pages_or_audit_entries(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env=ENV).start()
    session, csrf = sign_in(server)
    token = session.cookies.get('conduit_session')
    headers = {'X-CSRF-Token': csrf}
    r = session.post(server.url + '/dashboard/api/security', json={'name': 'dash.sec', 'username': 'u1',
                                                                    'password': 'first-secret-pw'},
                     headers=headers, timeout=10)
    assert r.status_code == 201, r.text
    r = session.post(server.url + '/dashboard/api/security/dash.sec/password', json={'password': 'second-secret-pw'},
                     headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    bodies = [session.get(server.url + p, timeout=10).text for p in
              ('/dashboard/', '/dashboard/sign-in', '/dashboard/api/audit?limit=100', '/dashboard/api/security',
               '/dashboard/nope')]
    bodies.append(requests.get(server.url + '/dashboard/sign-in', timeout=10).text)
    for secret in (ADMIN_PASSWORD, VIEWER_PASSWORD, 'first-secret-pw', 'second-secret-pw', token):
        assert not any(secret in body for body in bodies), secret
        assert secret not in server.log()


def test_a_non_ascii_next_of_a_signed_in_user_goes_to_the_overview(dash: LiveServer) -> None:
    # It once went into the Location header as it was, which gunicorn refused with a 500.
    session, _ = sign_in(dash)
    r = session.get(dash.url + '/dashboard/sign-in?next=/dashboard/%E4%B8%AD', allow_redirects=False, timeout=10)
    assert r.status_code == 303 and r.headers['Location'] == '/dashboard/'


def test_many_session_cookies_cost_two_lookups_at_most(dash: LiveServer) -> None:
    # Each value was looked up in the database: 80 cookies in one anonymous request, 80 queries.
    session, _ = sign_in(dash)
    live = session.cookies['conduit_session']
    junk = '; '.join(f'conduit_session={"A" * 42}{i % 10}' for i in range(80))
    for path in ('/dashboard/api/status', '/dashboard/sign-in'):
        r = requests.get(dash.url + path, headers={'Cookie': junk}, allow_redirects=False, timeout=10)
        assert r.status_code in (200, 401), r.status_code
        assert float(re.search(r'app;dur=([0-9.]+)', r.headers['Server-Timing']).group(1)) >= 0
    # The live session still works when it comes first, as a browser sends it.
    r = requests.get(dash.url + '/dashboard/api/status', headers={'Cookie': f'conduit_session={live}; {junk}'},
                     timeout=10)
    assert r.status_code == 200


def test_audit_times_refuse_nan(dash: LiveServer) -> None:
    session, _ = sign_in(dash)
    for value in ('nan', 'NaN', 'inf'):
        r = session.get(dash.url + f'/dashboard/api/audit?since={value}', timeout=10)
        assert r.status_code == 400 and 'since' in r.json()['details'], (value, r.text)
