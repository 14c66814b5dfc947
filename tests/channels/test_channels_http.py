"""REST channels, their security and the admin API against a real server.

Every error code here is produced by sending the bad request itself, and every error body is
checked for the documented shape ``{is_ok: false, cid, status, details}``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from tests.live_server import LiveServer

SERVICES = '''
import os

from runtime import Service


class Echo(Service):
    name = 'test.echo'

    def handle(self):
        self.response.payload = {'input': dict(self.request.input), 'payload': self.request.payload,
                                 'method': self.request.http.method, 'pid': os.getpid()}


class Customer(Service):
    name = 'test.customer'
    input = 'customer_id', 'name', '-email'

    def handle(self):
        self.response.payload = dict(self.request.input)


class Reader(Service):
    name = 'test.reader'

    def handle_GET(self):
        self.response.payload = {'read': True}


class Boom(Service):
    name = 'test.boom'

    def handle(self):
        raise ValueError('boom: internal detail')
'''

OBJECTS = '''
security:
  - name: test.sec
    type: basic_auth
    username: api-user
    password: api-secret-pw-1
    realm: Test realm
  - name: test.sec.off
    type: basic_auth
    username: off-user
    password: off-secret-pw-2
    realm: Off realm
    is_active: false

channel_rest:
  - name: customer
    service: test.customer
    url_path: /api/customer/{customer_id}
    method: POST
    data_format: json
    security: test.sec
  - name: echo.json
    service: test.echo
    url_path: /api/echo/{kind}
    method: POST
    data_format: json
  - name: echo.form
    service: test.echo
    url_path: /api/form
    data_format: form
  - name: echo.text
    service: test.echo
    url_path: /api/text
    data_format: text
  - name: item.read
    service: test.reader
    url_path: /api/item
    method: GET
  - name: item.write
    service: test.echo
    url_path: /api/item
    method: POST, PUT
  - name: reader.any
    service: test.reader
    url_path: /api/reader
  - name: boom
    service: test.boom
    url_path: /api/boom
  - name: off
    service: test.echo
    url_path: /api/off
    security: test.sec.off
'''

#: Credentials of the active definition test.sec.
API_AUTH = ('api-user', 'api-secret-pw-1')

#: Bodies larger than this are refused with 413 (set through extra_config).
MAX_BODY = 1000


@pytest.fixture
def api(server_factory: Callable[..., LiveServer]) -> Iterator[LiveServer]:
    """A server started with the test services and channels already in place."""
    server = server_factory(extra_config=f'[http]\nmax_body_size = {MAX_BODY}\n')
    server.write_module('channel_services.py', SERVICES)
    server.write_objects('channels.yaml', OBJECTS)
    yield server.start()


def assert_error(r: requests.Response, status: int, *fragments: str) -> dict[str, Any]:
    """Check an error answer's status, envelope and that details names each fragment."""
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {'is_ok', 'cid', 'status', 'details'}, body
    assert body['is_ok'] is False
    assert body['status'].startswith(f'{status} ')
    assert body['cid'] and body['cid'] == r.headers['X-Conduit-CID']
    for fragment in fragments:
        assert fragment in body['details'], body
    return body


# Channels: paths, methods, data formats


def test_path_parameters_and_json_form_text_bodies_reach_the_service(api: LiveServer) -> None:
    r = api.request('POST', '/api/customer/42', params={'email': 'ada@example.com'},
                    json={'name': 'Ada', 'customer_id': 'from-body'}, auth=API_AUTH)
    assert r.status_code == 200, r.text
    # The path parameter wins over the same field in the body: the URL names the resource.
    assert r.json() == {'customer_id': '42', 'name': 'Ada', 'email': 'ada@example.com'}

    doc = {'a': 1, 'nested': {'b': [1, 2]}, 'text': 'zażółć'}
    r = api.request('POST', '/api/echo/json', json=doc)
    assert r.status_code == 200, r.text
    assert r.json()['payload'] == doc
    assert r.json()['input'] == {**doc, 'kind': 'json'}

    # A body sent in chunks (no Content-Length) arrives whole.
    r = api.request('POST', '/api/echo/chunked', data=iter([b'{"a": ', b'[1, 2]}']),
                    headers={'Content-Type': 'application/json'})
    assert r.status_code == 200, r.text
    assert r.json()['payload'] == {'a': [1, 2]}

    r = api.request('POST', '/api/form', data={'a': '1', 'b': ['2', '3'], 'empty': ''})
    assert r.status_code == 200, r.text
    assert r.json()['input'] == {'a': '1', 'b': ['2', '3'], 'empty': ''}

    text = 'plain text {not json'
    r = api.request('POST', '/api/text', data=text.encode(), headers={'Content-Type': 'text/plain'})
    assert r.status_code == 200, r.text
    assert r.json()['payload'] == text


def test_methods_route_to_their_channel_and_others_get_405_with_allow(api: LiveServer) -> None:
    assert api.request('GET', '/api/item').json() == {'read': True}
    assert api.request('PUT', '/api/item', json={'x': 1}).json()['method'] == 'PUT'

    r = api.request('DELETE', '/api/item')
    assert_error(r, 405, 'DELETE')
    assert r.headers['Allow'] == 'GET, POST, PUT'

    r = api.request('GET', '/api/customer/1', auth=API_AUTH)
    assert_error(r, 405)
    assert r.headers['Allow'] == 'POST'

    # A channel open to every method, whose service only implements handle_GET.
    r = api.request('POST', '/api/reader', json={})
    assert_error(r, 405, 'POST')
    assert r.headers['Allow'] == 'GET'


def test_bad_requests_answer_400_404_and_413_naming_the_problem(api: LiveServer) -> None:
    r = api.request('POST', '/api/echo/json', data=b'{"a": ', headers={'Content-Type': 'application/json'})
    assert_error(r, 400, 'not valid JSON')
    assert_error(api.request('POST', '/api/echo/json', data=b'"\xff\xfe"'), 400, 'UTF-8')

    r = api.request('POST', '/api/customer/7', json={'email': 'x@example.com'}, auth=API_AUTH)
    assert_error(r, 400, "'name'")
    assert_error(api.request('POST', '/api/customer/7', json={'name': ''}, auth=API_AUTH), 400, "'name'")
    r = api.request('POST', '/api/customer/7', json=['name', 'Ada'], auth=API_AUTH)
    assert_error(r, 400, 'not a JSON object')

    assert_error(api.request('GET', '/api/no/such/channel'), 404, '/api/no/such/channel')
    # A template parameter matches one whole segment only.
    assert_error(api.request('POST', '/api/echo/a/b', json={}), 404)

    ok = api.request('POST', '/api/echo/json', json={'data': 'x' * (MAX_BODY - 20)})
    assert ok.status_code == 200, ok.text
    assert_error(api.request('POST', '/api/echo/json', json={'data': 'x' * MAX_BODY}), 413, str(MAX_BODY))
    # Without a Content-Length (chunked), the limit holds while reading.
    r = api.request('POST', '/api/echo/json', data=iter([b'"', b'x' * MAX_BODY, b'"']))
    assert_error(r, 413, str(MAX_BODY))

    assert api.request('GET', '/health').status_code == 200


# Security


def test_basic_auth_rejects_missing_wrong_and_inactive_credentials_with_a_challenge(api: LiveServer) -> None:
    url = '/api/customer/1'
    body = {'name': 'Ada'}
    cases = {
        'no credentials': {},
        'wrong password': {'auth': ('api-user', 'wrong-password')},
        'unknown user': {'auth': ('nobody', 'api-secret-pw-1')},
        'another definition': {'auth': ('off-user', 'off-secret-pw-2')},
        'not basic': {'headers': {'Authorization': 'Bearer abc'}},
        'malformed': {'headers': {'Authorization': 'Basic !!not-base64!!'}},
    }
    for case, kwargs in cases.items():
        r = api.request('POST', url, json=body, **kwargs)
        assert r.status_code == 401, case
        details = 'Invalid credentials' if 'auth' in kwargs else 'Authentication required'
        assert assert_error(r, 401)['details'] == details, case
        assert r.headers['WWW-Authenticate'] == 'Basic realm="Test realm"', case
    assert api.request('POST', url, json=body, auth=API_AUTH).status_code == 200

    r = api.request('POST', '/api/off', json={}, auth=('off-user', 'off-secret-pw-2'))
    assert_error(r, 401, 'inactive')
    assert r.headers['WWW-Authenticate'] == 'Basic realm="Off realm"'
    # Only a caller who knows the password learns that the definition is inactive.
    r = api.request('POST', '/api/off', json={}, auth=('off-user', 'wrong-password'))
    assert assert_error(r, 401)['details'] == 'Invalid credentials'


# Failures inside services


def test_handler_exception_answers_500_with_cid_and_logs_the_traceback(api: LiveServer) -> None:
    r = api.request('GET', '/api/boom')
    cid = r.headers['X-Conduit-CID']
    assert_error(r, 500, cid)
    assert 'Traceback' not in r.text
    assert 'internal detail' not in r.text

    log = api.wait_for_log(f'cid {cid}')
    after = log[log.index(f'cid {cid}'):]
    assert 'Traceback (most recent call last)' in after
    assert 'ValueError: boom: internal detail' in after
    assert api.request('GET', '/api/item').status_code == 200


# Admin API


def test_admin_api_requires_admin_credentials(api: LiveServer) -> None:
    paths = [('GET', '/admin/status'), ('GET', '/admin/services'), ('GET', '/admin/services/conduit.ping'),
             ('DELETE', '/admin/services/conduit.ping'), ('POST', '/admin/services/conduit.ping/invoke'),
             ('POST', '/admin/deploy'), ('GET', '/admin/no-such-resource')]
    for method, path in paths:
        for auth in (None, API_AUTH, (api.admin[0], 'wrong-password'), ('nobody', api.admin[1])):
            r = api.request(method, path, auth=auth)
            assert r.status_code == 401, (method, path, auth)
            assert_error(r, 401)
            assert r.headers['WWW-Authenticate'] == 'Basic realm="Conduit admin"'

    assert_error(api.request('GET', '/admin/no-such-resource', auth=api.admin), 404)
    # The refused DELETE above did nothing.
    assert api.invoke('conduit.ping')['pong'] is True


def test_admin_lists_describes_and_invokes_services(api: LiveServer) -> None:
    r = api.request('GET', '/admin/services', auth=api.admin)
    assert r.status_code == 200, r.text
    names = [s['name'] for s in r.json()['services']]
    assert {'conduit.ping', 'test.customer', 'test.echo'} <= set(names)
    assert names == sorted(names)

    info = api.request('GET', '/admin/services/test.customer', auth=api.admin).json()['service']
    assert info['input'] == ['customer_id', 'name']
    assert info['input_optional'] == ['email']
    assert info['module'] == 'channel_services'
    assert info['source_file'].endswith('channel_services.py')

    assert api.invoke('test.customer', {'customer_id': 3, 'name': 'Ada'}) == {
        'customer_id': 3, 'name': 'Ada', 'email': None}
    assert_error(api.request('GET', '/admin/services/no.such', auth=api.admin), 404, 'no.such')
    r = api.request('POST', '/admin/services/no.such/invoke', json={}, auth=api.admin)
    assert_error(r, 404, 'no.such')
    r = api.request('POST', '/admin/services/test.customer/invoke', json={}, auth=api.admin)
    assert_error(r, 400, "'customer_id'")

    # A failing service: the operator is told what it raised, and the log has the traceback.
    r = api.request('POST', '/admin/services/test.boom/invoke', json={}, auth=api.admin)
    body = assert_error(r, 500, 'test.boom', 'ValueError: boom: internal detail')
    log = api.wait_for_log(f'cid {body["cid"]}')
    assert 'Traceback (most recent call last)' in log[log.index(f'cid {body["cid"]}'):]
