"""A WebSocket client through a server's life: it moves between its own connections, and the server stops.

Real gunicorn servers on both backends (``server_factory``), the websocket-client library.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import websocket

from tests.live_server import LiveServer

OBJECTS = '''
security:
  - name: app
    username: app
    password: app-pw-1
pubsub_topic:
  - name: orders.new
pubsub_permission:
  - security: app
    pub: ['orders.**']
    sub: ['orders.**']
'''


def connect(server: LiveServer) -> websocket.WebSocket:
    ws = websocket.create_connection(server.url.replace('http', 'ws', 1) + '/pubsub/ws', timeout=30)
    send(ws, action='hello', username='app', password='app-pw-1')
    assert receive(ws)['action'] == 'authenticated'
    return ws


def send(ws: websocket.WebSocket, **frame: Any) -> None:
    ws.send(json.dumps(frame))


def receive(ws: websocket.WebSocket, action: str | None = None) -> dict[str, Any]:
    """The next frame (of that action, skipping others)."""
    while True:
        frame = json.loads(ws.recv())
        if action is None or frame['action'] == action:
            return frame


#: An ack deadline far beyond the tests' 30 s waits: a message that only comes after it is a failure.
CONFIG = '''
[websocket]
ack_deadline_secs = 300
'''


@pytest.fixture
def app(server_factory: Callable[..., LiveServer]) -> LiveServer:
    server = server_factory(extra_config=CONFIG)
    server.write_objects('objects.yaml', OBJECTS)
    return server.start()


def test_resuming_on_a_second_connection_detaches_the_first(app: LiveServer) -> None:
    first = connect(app)
    send(first, action='subscribe', topic='orders.new', window=1, id='s')
    sub_key = receive(first, 'subscribed')['sub_key']
    send(first, action='publish', topic='orders.new', data={'n': 1})
    held = receive(first, 'message')  # unacked: in flight on the first connection

    second = connect(app)
    send(second, action='subscribe', sub_key=sub_key, id='r')
    answer = receive(second, 'subscribed')
    assert answer['resumed'] is True and answer['id'] == 'r'
    notice = receive(first, 'detached')
    assert notice['sub_key'] == sub_key and 'another connection' in notice['details']
    # The message the first connection held comes again, on the second, its attempt counted.
    again = receive(second, 'message')
    assert again['meta']['msg_id'] == held['meta']['msg_id'] and again['meta']['delivery_count'] == 2
    send(first, action='ack', ack_ids=[held['ack_id']], id='late')
    assert receive(first, 'acked')['not_found'] == [held['ack_id']]  # no longer this connection's to ack
    send(second, action='ack', ack_ids=[again['ack_id']], id='a')
    assert receive(second, 'acked')['acked'] == 1
    first.close()
    second.close()


def test_the_window_slides_with_each_ack(app: LiveServer) -> None:
    ws = connect(app)
    send(ws, action='subscribe', topic='orders.new', window=2)
    receive(ws, 'subscribed')
    for n in range(5):
        send(ws, action='publish', topic='orders.new', data={'n': n}, id=n)
    frames = [receive(ws) for _ in range(7)]  # five answers and the two messages the window lets through
    assert sorted(f['id'] for f in frames if f['action'] == 'published') == [0, 1, 2, 3, 4]
    first, second = [f for f in frames if f['action'] == 'message']
    assert [first['data']['n'], second['data']['n']] == [0, 1]
    # Acking one makes room for one more at once, while the other is still held.
    send(ws, action='ack', ack_ids=[first['ack_id']], id='a1')
    frames = [receive(ws), receive(ws)]
    assert sorted(f['action'] for f in frames) == ['acked', 'message']
    third = next(f for f in frames if f['action'] == 'message')
    assert third['data']['n'] == 2
    send(ws, action='ping', id='p')
    assert receive(ws)['action'] == 'pong'  # and nothing else came: two are held, the window is full
    send(ws, action='ack', ack_ids=[second['ack_id'], third['ack_id']], id='a2')
    rest = [receive(ws, 'message')['data']['n'] for _ in range(2)]
    assert rest == [3, 4]
    ws.close()


def test_new_messages_flow_while_others_are_held(app: LiveServer) -> None:
    ws = connect(app)
    send(ws, action='subscribe', topic='orders.new', window=5)
    receive(ws, 'subscribed')
    send(ws, action='publish', topic='orders.new', data={'n': 0})
    frames = [receive(ws), receive(ws)]
    held = next(f for f in frames if f['action'] == 'message')
    for n in (1, 2):  # published one by one while the first is held: each comes at once
        send(ws, action='publish', topic='orders.new', data={'n': n})
        frames = [receive(ws), receive(ws)]
        assert [f['data'] for f in frames if f['action'] == 'message'] == [{'n': n}]
    assert held['data'] == {'n': 0}
    ws.close()


def test_stopping_the_server_tells_clients_at_once(app: LiveServer) -> None:
    ws = connect(app)
    send(ws, action='subscribe', topic='orders.new')
    receive(ws, 'subscribed')
    app.proc.send_signal(15)
    opcode, data = ws.recv_data(control_frame=True)
    while opcode != websocket.ABNF.OPCODE_CLOSE:
        opcode, data = ws.recv_data(control_frame=True)
    # A closing frame at all means the client was told: cut at the end of the graceful time, it gets none.
    assert int.from_bytes(data[:2], 'big') == 1001 and b'server stopping' in data
    app.proc.wait(timeout=30)
