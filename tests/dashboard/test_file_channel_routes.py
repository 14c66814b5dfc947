"""The file channel page (/dashboard/file-channels/{name}) over plain HTTP, against one real server.

Who may open it (the admin and the viewer; nobody without a session), an unknown name (the
dashboard's 404 page naming it), and hostile names — markup, dot segments, a very long name, NUL —
each a clear 4xx or an escaped page, never a 500, a traceback or markup of the name's own. What the
page's script draws is checked in a real browser (tests/dashboard/test_file_channels.py).
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from urllib.parse import quote

import pytest
import requests

from tests.dashboard.test_core_routes import ENV, VIEWER_PASSWORD, sign_in
from tests.live_server import LiveServer

TOPIC = 'fc.page'
NAME = 'invoices'
#: A name the admin API accepts (no slash), that would be markup if a page inserted it as HTML.
HOSTILE = '"><img src=x onerror=alert(1)>'
PAGE = '/dashboard/file-channels/'


@pytest.fixture(scope='module')
def dash(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the module (SQLite; the page owns no SQL) with two inactive file channels."""
    base = tmp_path_factory.mktemp('dash-files')
    server = LiveServer(base, f'sqlite:///{base / "conduit.db"}', env=ENV).start()
    server.admin_json('POST', '/admin/topics', 201, json={'name': TOPIC})
    for name in (NAME, HOSTILE):
        server.admin_json('POST', '/admin/file-channels', 201, json={
            'name': name, 'directory': str(base / 'inbox'), 'topics': [TOPIC], 'is_active': False})
    yield server
    server.stop()
    assert 'Traceback' not in server.log()


@pytest.fixture(scope='module')
def admin(dash: LiveServer) -> requests.Session:
    """A signed-in admin session."""
    return sign_in(dash)[0]


@pytest.fixture(scope='module')
def viewer(dash: LiveServer) -> requests.Session:
    """A signed-in viewer session."""
    return sign_in(dash, 'viewer', VIEWER_PASSWORD)[0]


def _raw_status(server: LiveServer, target: str, session: requests.Session) -> tuple[int, str]:
    """GET a request target exactly as written (no client resolves its dot segments), with the session."""
    cookie = session.cookies.get('conduit_session')
    request = (f'GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nCookie: conduit_session={cookie}\r\n'
               'Connection: close\r\n\r\n')
    data = b''
    with socket.create_connection(('127.0.0.1', server.port), timeout=10) as s:
        s.sendall(request.encode())
        try:
            while chunk := s.recv(65536):
                data += chunk
        except ConnectionResetError:  # a refusal sent before the whole request was read: its answer came first
            pass
    head, _, body = data.partition(b'\r\n\r\n')
    return int(head.split(b' ', 2)[1]), body.decode('utf-8', 'replace')


@pytest.mark.parametrize('role', ['admin', 'viewer'])
def test_the_admin_and_the_viewer_open_the_page(dash: LiveServer, admin: requests.Session,
                                                viewer: requests.Session, role: str) -> None:
    session = admin if role == 'admin' else viewer
    r = session.get(dash.url + PAGE + NAME, timeout=10)
    assert r.status_code == 200 and r.headers['Content-Type'].startswith('text/html')
    page = r.text
    assert 'data-channel="invoices"' in page and '<title>' in page and 'File channel invoices' in page
    assert '/dashboard/static/file_channel.js?v=' in page and '/dashboard/static/pubsub.js?v=' in page
    for state in ('running', 'done', 'failed', 'skipped', 'superseded'):
        assert f'<option value="{state}">' in page
    assert '<a href="/dashboard/channels" aria-current="page">' in page  # the navigation lights Channels
    # What the page's script reads: the viewer may read it too.
    runs = session.get(dash.url + f'/dashboard/api/file-channels/{NAME}/runs?state=failed&limit=25', timeout=10)
    assert runs.status_code == 200 and runs.json()['total'] == 0
    assert session.get(dash.url + f'/dashboard/api/file-channels/{NAME}', timeout=10).status_code == 200


def test_an_unknown_channel_is_the_404_page_naming_it(dash: LiveServer, admin: requests.Session,
                                                      viewer: requests.Session) -> None:
    for session in (admin, viewer):
        r = session.get(dash.url + PAGE + 'ghost', timeout=10)
        assert r.status_code == 404 and r.headers['Content-Type'].startswith('text/html')
        assert 'role="alert">404 Not Found: file channel not found: &#39;ghost&#39;' in r.text
        assert 'file_channel.js' not in r.text and 'Traceback' not in r.text
    # The name is matched as it is: another case is another channel.
    assert admin.get(dash.url + PAGE + 'Invoices', timeout=10).status_code == 404


def test_a_channel_named_with_markup_is_shown_escaped(dash: LiveServer, admin: requests.Session) -> None:
    r = admin.get(dash.url + PAGE + quote(HOSTILE, safe=''), timeout=10)
    assert r.status_code == 200, r.text
    assert '<img' not in r.text
    assert 'data-channel="&#34;&gt;&lt;img src=x onerror=alert(1)&gt;"' in r.text
    assert 'File channel &#34;&gt;&lt;img src=x onerror=alert(1)&gt;' in r.text


@pytest.mark.parametrize(('target', 'statuses'), [
    (PAGE + '%3Cscript%3Ealert(1)%3C%2Fscript%3E', (404,)),
    (PAGE + '%3Cscript%3Ealert(1)', (404,)),
    (PAGE + '%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(2)%3E', (404,)),
    (PAGE + '../../admin/status', (404,)),
    (PAGE + '..%2F..%2Fadmin%2Fstatus', (404,)),
    (PAGE + '%2e%2e', (404,)),
    (PAGE + 'invoices/../../admin/status', (404,)),
    (PAGE + 'invoices%00', (400,)),
    (PAGE + '%ff%fe', (400, 404)),
    (PAGE + '%E4%B8%AD', (404,)),
    (PAGE + 'x' * 3000, (404,)),
    (PAGE + 'x' * 10_000, (400, 414)),  # past the request line's limit: the server refuses it
])
def test_hostile_names_get_a_clear_4xx(dash: LiveServer, admin: requests.Session, target: str,
                                       statuses: tuple[int, ...]) -> None:
    status, body = _raw_status(dash, target, admin)
    assert status in statuses, (target[:80], status, body[:300])
    assert 'Traceback' not in body and '"pid"' not in body
    assert '<script>alert' not in body and '<img src=x' not in body
    assert 'x' * 201 not in body  # a name no channel can have is not repeated in full


def test_without_a_session_the_page_goes_to_the_sign_in_form(dash: LiveServer) -> None:
    for name in (NAME, 'ghost'):  # the same answer: no session learns which channels exist
        r = dash.request('GET', PAGE + name, allow_redirects=False)
        assert r.status_code == 303 and r.headers['Location'] == f'/dashboard/sign-in?next={PAGE}{name}'
    # Basic Auth, a forged cookie: no session either.
    assert dash.request('GET', PAGE + NAME, auth=dash.admin, allow_redirects=False).status_code == 303
    assert dash.request('GET', PAGE + NAME, cookies={'conduit_session': 'A' * 43},
                        allow_redirects=False).status_code == 303
    r = dash.request('GET', f'/dashboard/api/file-channels/{NAME}/runs')
    assert r.status_code == 401 and r.json()['details'].startswith('sign in to the dashboard')
