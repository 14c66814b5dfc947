"""``conduit pubsub websockets`` and ``conduit sub list --kind websocket`` against a live server.

A real WebSocket client (websocket-client) subscribes over ``/pubsub/ws``; the CLI then shows its
subscription connected, on which worker, from which peer, with its window, and no sub_key in any
table; a subscription made through the admin API with no client shows up as not connected.
"""

from __future__ import annotations

import json
from typing import Any

import websocket
from click.testing import CliRunner

from runtime import cli as cli_module
from tests.live_server import LiveServer, poll


def _cli(server: LiveServer, *args: str, code: int = 0) -> str:
    config = str(server.base / 'config' / 'server.toml')
    result = CliRunner().invoke(cli_module.main, ['--config', config, *args])
    assert result.exit_code == code, f'{args}: {result.output}'
    return result.output


def _json(server: LiveServer, *args: str) -> Any:
    return json.loads(_cli(server, *args, '--json'))


def _call(server: LiveServer, method: str, path: str, expected: int = 200, **kwargs: Any) -> Any:
    r = server.request(method, path, auth=server.admin, **kwargs)
    assert r.status_code == expected, r.text
    return r.json()


def test_websocket_subscriptions_listed_with_their_clients(server: LiveServer) -> None:
    _call(server, 'POST', '/admin/security', 201, json={'name': 'browser', 'username': 'browser',
                                                        'password': 'browser-password-1'})
    _call(server, 'PUT', '/admin/security/browser/permissions', json={'pub': ['cli.ws.**'], 'sub': ['cli.ws.**']})
    _call(server, 'POST', '/admin/topics', 201, json={'name': 'cli.ws.orders'})
    idle = _call(server, 'POST', '/admin/subscriptions', 201, json={
        'topic': 'cli.ws.*', 'kind': 'websocket', 'security': 'browser', 'options': {'delivery_batch_size': 9}})
    idle_id, idle_key = idle['subscription']['id'], idle['sub_key']

    ws = websocket.create_connection(server.url.replace('http://', 'ws://') + '/pubsub/ws', timeout=30)
    try:
        ws.send(json.dumps({'action': 'hello', 'username': 'browser', 'password': 'browser-password-1'}))
        assert json.loads(ws.recv())['action'] == 'authenticated'
        ws.send(json.dumps({'action': 'subscribe', 'id': 'sub-1', 'topic': 'cli.ws.orders', 'window': 5}))
        answer = json.loads(ws.recv())
        assert answer['action'] == 'subscribed' and answer['id'] == 'sub-1', answer
        live_key = answer['sub_key']

        listed = _json(server, 'pubsub', 'websockets')
        views = {v['sub_id']: v for v in listed['websockets']}
        assert listed['totals'] == {'subscriptions': 2, 'connected': 1}
        live_id = next(i for i, v in views.items() if v['connected'])
        live = views[live_id]
        assert (live['security'], live['pattern'], live['window']) == ('browser', 'cli.ws.orders', 5)
        assert live['owner'] and live['peer'].startswith('127.0.0.1')
        assert views[idle_id]['connected'] is False and views[idle_id]['window'] == 9
        assert live_key not in json.dumps(listed) and idle_key not in json.dumps(listed)

        table = _cli(server, 'pubsub', 'websockets')
        for title in ('security', 'pattern', 'connected', 'worker', 'peer', 'window', 'in-flight', 'queue depth',
                      'last activity'):
            assert title in table, table
        assert 'cli.ws.orders' in table and live['owner'] in table and ' ago' in table
        assert '2 WebSocket subscription(s), 1 connected' in table
        assert 'sk.' not in table
        connected = _json(server, 'pubsub', 'websockets', '--connected')['websockets']
        assert [v['sub_id'] for v in connected] == [live_id]
        not_connected = _json(server, 'pubsub', 'websockets', '--not-connected', '--security', 'browser')
        assert [v['sub_id'] for v in not_connected['websockets']] == [idle_id]
        assert _json(server, 'pubsub', 'websockets', '--security', 'nobody')['websockets'] == []

        subs = _cli(server, 'sub', 'list', '--kind', 'websocket')
        assert 'websocket' in subs and 'sk.' not in subs
        shown = _cli(server, 'sub', 'show', str(live_id))
        assert '127.0.0.1' in shown and 'sk.' not in shown
    finally:
        ws.close()

    # The client gone, its subscription stays, without a client.
    poll(lambda: _json(server, 'pubsub', 'websockets', '--connected')['websockets'] == [],
         message='detached on close')
    assert '2 WebSocket subscription(s), 0 connected' in _cli(server, 'pubsub', 'websockets')
