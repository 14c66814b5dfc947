"""No route is reachable without credentials, whatever the spelling of its path.

The routes come from the app's own router, so a route added later is walked too. Each is sent,
without credentials, to a real server in many spellings (doubled and encoded slashes, dot
segments, case, trailing slash, absolute-form request line) and with every method: the answer is
401, 404 or 405 — never 2xx, never 5xx; a dashboard page (``auth = DASHBOARD``) may also answer a
303 to its sign-in form. Only resources that declare ``auth = PUBLIC`` are left out, and that list
is pinned here so that making a route public is a visible decision.
"""

from __future__ import annotations

import base64
import re
import socket
from collections.abc import Callable

import falcon.testing
import pytest

from runtime.core import Runtime
from runtime.errors import Unauthorized
from runtime.http.auth import ADMIN, CALLER, DASHBOARD, PUBLIC, routed_resources
from runtime.security.basic_auth import BasicAuth, SecurityRegistry, hash_password
from runtime.testing import make_settings
from tests.live_server import LiveServer

#: The only routes anybody may call without credentials (the dashboard's sign-in form needs its styles).
PUBLIC_ROUTES = {'/health', '/dashboard', '/dashboard/sign-in', '/dashboard/static/{name}'}

METHODS = ('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS')

_FIELD = re.compile(r'\{(\w+)(?::(\w+))?[^}]*\}')


def _concrete(template: str) -> str:
    """A path that matches a URI template: ints for int fields, a plain word for the rest."""
    return _FIELD.sub(lambda m: '1' if m.group(2) == 'int' else 'x', template)


def _variants(path: str) -> list[str]:
    """Spellings of path that a lax router could take for the same resource."""
    head, _, rest = path.lstrip('/').partition('/')
    return [
        path, '/' + path, '//' + path.lstrip('/') + '/', path + '/', path.upper(), path + '?x=1',
        '/%2F' + path.lstrip('/'), '/./' + path.lstrip('/'), f'/{head}/./{rest}' if rest else path + '/.',
        f'/zz/../{path.lstrip("/")}', f'/{head}//{rest}' if rest else path + '//',
        f'/{head}%2F{rest}' if rest else path + '%2F', path.replace('/', '/%2e/', 1),
    ]


@pytest.fixture(scope='module')
def routes(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[str, object]]:
    """(template, resource) of every route of an app built like the server's."""
    base = tmp_path_factory.mktemp('routes')
    runtime = Runtime(make_settings(base))
    runtime.start()
    try:
        return routed_resources(runtime.make_app())
    finally:
        runtime.stop()


def _raw(server: LiveServer, request_line: str, headers: str = '') -> int:
    """Send one raw request; the status code of the answer."""
    return _raw_answer(server, request_line, headers)[0]


def _raw_answer(server: LiveServer, request_line: str, headers: str = '') -> tuple[int, str]:
    """Send one raw request; the status code of the answer and its Location header ('' without one)."""
    with socket.create_connection(('127.0.0.1', server.port), timeout=10) as s:
        s.sendall(f'{request_line}\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n{headers}\r\n'.encode())
        data = b''
        while b'\r\n\r\n' not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    head = data.partition(b'\r\n\r\n')[0].decode('latin-1')
    location = next((line.partition(':')[2].strip() for line in head.split('\r\n')[1:]
                     if line.lower().startswith('location:')), '')
    return int(head.split(' ', 2)[1]), location


def _refused(resource: object, status: int, location: str) -> bool:
    """Whether an answer to a request without credentials gave nothing away."""
    if status in (401, 404, 405):
        return True
    # A dashboard page sends the browser to its sign-in form (and nowhere else).
    return getattr(resource, 'auth', None) == DASHBOARD and status == 303 and location.startswith('/dashboard/sign-in')


def test_every_route_declares_its_policy(routes: list[tuple[str, object]]) -> None:
    assert routes, 'the router has no routes'
    for template, resource in routes:
        assert getattr(resource, 'auth', None) in (ADMIN, CALLER, PUBLIC, DASHBOARD), template
    public = {t for t, r in routes if r.auth == PUBLIC}
    assert public == PUBLIC_ROUTES


def test_no_route_reachable_without_credentials(target: LiveServer, routes: list[tuple[str, object]]) -> None:
    reached: list[str] = []
    for template, resource in routes:
        if resource.auth == PUBLIC:
            continue
        for path in _variants(_concrete(template)):
            for method in METHODS:
                status, location = _raw_answer(target, f'{method} {path} HTTP/1.1')
                if not _refused(resource, status, location):
                    reached.append(f'{method} {path} -> {status} {location}')
            status, location = _raw_answer(target, f'GET http://x{path} HTTP/1.1')  # absolute form
            if not _refused(resource, status, location):
                reached.append(f'GET http://x{path} -> {status} {location}')
    assert not reached, '\n'.join(reached[:40])


def test_admin_paths_answer_401_in_every_spelling(target: LiveServer) -> None:
    for path in ('//admin/status', '/%2Fadmin/status', '///admin/status', '/admin//status', '/admin/./status',
                 '/admin/status/', '/admin', '/admin/', '/admin/no/such/thing'):
        assert _raw(target, f'GET {path} HTTP/1.1') == 401, path
    assert _raw(target, 'GET http://x//admin/status HTTP/1.1') == 401
    assert _raw(target, 'POST //admin/deploy HTTP/1.1') == 401


def test_admin_works_with_credentials_in_any_spelling(target: LiveServer) -> None:
    auth = 'Authorization: Basic ' + base64.b64encode(':'.join(target.admin).encode()).decode() + '\r\n'
    assert _raw(target, 'GET //admin/status HTTP/1.1', auth) == 200
    assert _raw(target, 'GET /admin/no/such/thing HTTP/1.1', auth) == 404


@pytest.mark.parametrize('header', [
    'Basic', 'Basic ', 'Basic !!!!', 'Basic ' + base64.b64encode(b'no-colon').decode(),
    'Basic ' + base64.b64encode(b'\xff\xfe:\xff').decode(), 'Bearer abc', 'Basic \u00e9\u00e9\u00e9\u00e9',
    'Basic ' + 'A' * 8000, 'basic ' + base64.b64encode(b'admin:').decode(),
])
def test_malformed_authorization_is_401(target: LiveServer, header: str) -> None:
    for path in ('/admin/status', '/pubsub/messages/get', '/api/sec/closed'):
        raw = f'Authorization: {header}\r\n'.encode('latin-1')
        with socket.create_connection(('127.0.0.1', target.port), timeout=10) as s:
            s.sendall(f'POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n'.encode()
                      + raw + b'\r\n')
            status = int(s.recv(4096).split(b' ', 2)[1])
        assert status in (400, 401, 429, 431), (path, header[:40], status)


def test_non_ascii_authorization_bytes_are_401_not_500(target: LiveServer) -> None:
    with socket.create_connection(('127.0.0.1', target.port), timeout=10) as s:
        s.sendall(b'GET /admin/status HTTP/1.1\r\nHost: x\r\nAuthorization: Basic \xc3\xa9\xff==\r\n'
                  b'Connection: close\r\n\r\n')
        assert int(s.recv(4096).split(b' ', 2)[1]) == 401


def _app_client(tmp_path, **http: object) -> tuple[falcon.testing.TestClient, Callable[[], None]]:
    settings = make_settings(tmp_path)
    for key, value in http.items():
        setattr(settings.http, key, value)
    settings.admin.password = 'pw-of-admin'
    runtime = Runtime(settings)
    runtime.start()
    return falcon.testing.TestClient(runtime.make_app()), runtime.stop


def test_metrics_and_openapi_need_admin_unless_public(tmp_path) -> None:
    client, stop = _app_client(tmp_path / 'closed')
    try:
        for path in ('/metrics', '/openapi.json'):
            assert client.simulate_get(path).status_code == 401
            admin = {'Authorization': _basic('admin', 'pw-of-admin')}
            assert client.simulate_get(path, headers=admin).status_code == 200
    finally:
        stop()
    client, stop = _app_client(tmp_path / 'open', metrics_public=True, openapi_public=True)
    try:
        for path in ('/metrics', '/openapi.json'):
            assert client.simulate_get(path).status_code == 200
    finally:
        stop()


def _basic(user: str, password: str) -> str:
    return 'Basic ' + base64.b64encode(f'{user}:{password}'.encode()).decode()


def test_failed_sign_ins_are_throttled_per_client(tmp_path) -> None:
    client, stop = _app_client(tmp_path, auth_max_failures=3, auth_failure_window_secs=60.0)
    try:
        wrong = {'Authorization': _basic('admin', 'wrong')}
        statuses = [client.simulate_get('/admin/status', headers=wrong).status_code for _ in range(5)]
        assert statuses[:3] == [401, 401, 401] and statuses[3:] == [429, 429]
        blocked = client.simulate_get('/admin/status', headers={'Authorization': _basic('admin', 'pw-of-admin')})
        assert blocked.status_code == 429 and int(blocked.headers['Retry-After']) >= 1
        # Another client address is not affected; neither is a request without credentials.
        other = client.simulate_get('/admin/status', headers={'Authorization': _basic('admin', 'pw-of-admin')},
                                    remote_addr='10.9.8.7')
        assert other.status_code == 200
        assert client.simulate_get('/health').status_code == 200
    finally:
        stop()


def test_password_with_trailing_nul_does_not_authenticate(tmp_path) -> None:
    client, stop = _app_client(tmp_path)
    try:
        assert client.simulate_get('/admin/status', headers={'Authorization': _basic('admin', 'pw-of-admin')}
                                   ).status_code == 200
        for suffix in ('\x00', '\x00\x00\x00'):
            r = client.simulate_get('/admin/status', headers={'Authorization': _basic('admin', 'pw-of-admin' + suffix)},
                                    remote_addr=f'10.0.0.{len(suffix)}')
            assert r.status_code == 401
    finally:
        stop()


def test_definition_password_with_trailing_nul_does_not_authenticate() -> None:
    registry = SecurityRegistry()
    registry.replace_all([BasicAuth('d', 'user', hash_password('secret'))])
    assert registry.authenticate(_basic('user', 'secret')).name == 'd'
    for wrong in ('secret\x00', 'secret\x00\x00', 'secre', 'secret '):
        with pytest.raises(Unauthorized):
            registry.authenticate(_basic('user', wrong))
    with pytest.raises(ValueError, match='NUL'):
        hash_password('secret\x00')


def test_failed_check_is_remembered_not_recomputed(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.security.basic_auth as security
    registry = SecurityRegistry()
    registry.replace_all([BasicAuth('d', 'user', hash_password('secret'))])
    calls = []
    real = security.verify_password
    monkeypatch.setattr(security, 'verify_password', lambda *a: calls.append(1) or real(*a))
    for _ in range(5):
        with pytest.raises(Unauthorized):
            registry.authenticate(_basic('user', 'wrong'))
    assert len(calls) == 1  # one scrypt for five tries of the same wrong password


def test_a_check_in_flight_during_a_reload_leaves_no_stale_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    # The new password arrives while the old definition is still loaded; the definitions are reloaded
    # while its (failing) check runs. That failure must not be remembered against the new definitions.
    import runtime.security.basic_auth as security
    registry = SecurityRegistry()
    registry.replace_all([BasicAuth('d', 'user', hash_password('old-secret'))])
    real = security.verify_password
    new_defs = [BasicAuth('d', 'user', hash_password('new-secret'))]

    def reload_midway(password, hashed):  # type: ignore[no-untyped-def]
        ok = real(password, hashed)
        registry.replace_all(new_defs)
        return ok

    monkeypatch.setattr(security, 'verify_password', reload_midway)
    with pytest.raises(Unauthorized):
        registry.authenticate(_basic('user', 'new-secret'))
    monkeypatch.setattr(security, 'verify_password', real)
    assert registry.authenticate(_basic('user', 'new-secret')).name == 'd'


@pytest.mark.parametrize('head', [
    b'POST /api/sec/open HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: garbage\r\n\r\n',
    b'POST /api/sec/open HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, gzip\r\n\r\n',
    b'GET /health HTTP/9.9\r\nHost: x\r\n\r\n',
    b'G\x00T /health HTTP/1.1\r\nHost: x\r\n\r\n',
    b'GET /health HTTP/1.1\r\nBad Header\r\n\r\n',
    b'GET /' + b'a' * 5000 + b' HTTP/1.1\r\nHost: x\r\n\r\n',
    b'GET /health HTTP/1.1\r\n' + b''.join(b'X-%d: 1\r\n' % i for i in range(200)) + b'\r\n',
])
def test_unparseable_requests_get_a_json_4xx(target: LiveServer, head: bytes) -> None:
    with socket.create_connection(('127.0.0.1', target.port), timeout=10) as s:
        s.sendall(head)
        answer = b''
        while chunk := s.recv(65536):
            answer += chunk
    status = int(answer.split(b' ', 2)[1])
    assert 400 <= status < 500, answer[:300]
    body = answer.split(b'\r\n\r\n', 1)[1]
    assert b'"is_ok": false' in body and b'malformed request' in body


def test_the_throttle_forgets_after_its_window(monkeypatch: pytest.MonkeyPatch) -> None:
    import runtime.http.auth as auth_module
    from runtime.errors import TooManyRequests
    now = [1000.0]
    throttle = auth_module.SignInThrottle(2, 60.0, clock=lambda: now[0])
    throttle.failed('a', 'u')
    throttle.failed('a', 'u')
    with pytest.raises(TooManyRequests) as e:
        throttle.check('a', 'u')
    assert e.value.retry_after_secs == 61
    throttle.check('b', 'u')  # other clients are not affected
    now[0] += 60.0
    throttle.check('a', 'u')  # the window is over
