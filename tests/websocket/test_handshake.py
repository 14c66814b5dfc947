"""The WebSocket upgrade's checks, and the body that tells the worker the socket was taken over."""

from __future__ import annotations

import falcon
import falcon.testing
import pytest

from runtime.errors import BadRequest, Forbidden
from runtime.http.websocket.handshake import UpgradeRequired, accept_answer, check_origin, client_key

pytestmark = pytest.mark.unit

KEY = 'dGhlIHNhbXBsZSBub25jZQ=='


def request(**headers: str) -> falcon.Request:
    base = {'Upgrade': 'websocket', 'Connection': 'keep-alive, Upgrade', 'Sec-WebSocket-Version': '13',
            'Sec-WebSocket-Key': KEY}
    base.update(headers)
    headers = {k: v for k, v in base.items() if v}
    return falcon.Request(falcon.testing.create_environ(path='/pubsub/ws', headers=headers))


def test_a_valid_upgrade_gives_its_key_and_rfc_6455s_accept_token():
    assert client_key(request()) == KEY
    assert b'Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=' in accept_answer(KEY)


@pytest.mark.parametrize('headers, error', [
    ({'Upgrade': ''}, UpgradeRequired), ({'Upgrade': 'h2c'}, UpgradeRequired),
    ({'Connection': 'keep-alive'}, UpgradeRequired), ({'Sec-WebSocket-Version': '8'}, UpgradeRequired),
    ({'Sec-WebSocket-Key': ''}, BadRequest), ({'Sec-WebSocket-Key': 'not base64!!!!!!!!!!!!!!'}, BadRequest),
    ({'Sec-WebSocket-Key': 'AAAA'}, BadRequest), ({'Sec-WebSocket-Key': 'A' * 10_000}, BadRequest),
])
def test_malformed_upgrades_are_refused_naming_the_header(headers, error):
    with pytest.raises(error):
        client_key(request(**headers))


def test_basic_auth_from_a_foreign_browser_origin_is_refused():
    auth = {'Authorization': 'Basic dTpw'}
    check_origin(request(**auth), '')  # no Origin: not a browser
    check_origin(request(Origin='https://evil.example'), '')  # no header: the hello frame decides
    with pytest.raises(Forbidden):
        check_origin(request(Origin='https://evil.example', **auth), '')
    check_origin(request(Origin='https://app.example/', **auth), 'https://APP.example')
    check_origin(request(Origin='https://other.example', **auth), '*')
    check_origin(request(Origin='http://localhost', Host='localhost', **auth), '')  # the server's own pages
    with pytest.raises(Forbidden):
        check_origin(request(Origin='http://localhost.evil.example', Host='localhost', **auth), '')
