"""Clients of the pub/sub APIs cannot make file subscriptions: they would write to the server's disks.

A REST client (``POST /pubsub/subscribe/topic/...``) and a WebSocket client (``subscribe`` frame)
subscribe themselves, as pull and WebSocket subscribers. Each attempt to choose another kind, a
target (``push_url``, ``file_target``) or delivery options (``options``, ``file_*``, ``push_*``) is
refused with a 403 that names the field, and nothing is made: no subscription, no file. The admin
API refuses the same request from a pub/sub client's credentials.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.live_server import LiveServer
from tests.security.conftest import PASSWORD, USER
from tests.websocket_peer import Peer, admin

AUTH = (USER, PASSWORD)
TOPIC = 'sec.topic'


def subscriptions(server: LiveServer) -> list[dict[str, Any]]:
    """The topic's subscriptions: id, kind and target of each (not their queues, which change)."""
    r = admin(server, 'GET', '/admin/subscriptions', params={'topic': TOPIC})
    assert r.status_code == 200, r.text
    return [{k: s[k] for k in ('id', 'kind', 'push_url', 'security')} for s in r.json()['subscriptions']]


def attempts(out: Path) -> list[dict[str, Any]]:
    """Bodies asking for a file subscriber writing into out (or for options the client may not set)."""
    target = f'file://{out}'
    return [
        {'kind': 'file', 'push_url': target},
        {'delivery_type': 'file', 'file_target': target},
        {'file_target': target},
        {'kind': 'file', 'push_url': target, 'options': {'file_format': 'csv', 'file_name': '../../{msg_id}'}},
        {'options': {'file_format': 'jsonl'}},
        {'file_name': '/etc/cron.d/{msg_id}'},
        {'file_password': '${CONDUIT_SECRET_ANY}'},
        {'kind': 'rest_push', 'push_url': 'http://127.0.0.1:1/steal'},
        {'push_url': 'http://127.0.0.1:1/steal'},
        {'kind': 'service', 'service': 'sec.echo'},
    ]


def test_a_rest_client_cannot_make_a_file_subscription(target: LiveServer, tmp_path: Path) -> None:
    out = tmp_path / 'rest-out'
    before = subscriptions(target)
    for body in attempts(out):
        r = target.request('POST', f'/pubsub/subscribe/topic/{TOPIC}', json=body, auth=AUTH)
        assert r.status_code == 403, (body, r.status_code, r.text)
        details = r.json()['details']
        assert 'made by the admin' in details and any(repr(k) in details for k in body), (body, details)
    assert subscriptions(target) == before
    target.request('POST', '/pubsub/topic/sec.topic', json={'data': {'n': 1}}, auth=AUTH)
    assert not out.exists()
    # Its own pull subscription, asked for as such, is still made.
    r = target.request('POST', f'/pubsub/subscribe/topic/{TOPIC}', json={'kind': 'pull'}, auth=AUTH)
    assert r.status_code == 200, r.text
    assert [s['kind'] for s in subscriptions(target) if s not in before] == ['pull']
    target.request('POST', f'/pubsub/unsubscribe/topic/{TOPIC}', auth=AUTH)


def test_a_websocket_client_cannot_make_a_file_subscription(target: LiveServer, tmp_path: Path) -> None:
    out = tmp_path / 'ws-out'
    before = subscriptions(target)
    peer = Peer.connect(target, auth=AUTH)
    try:
        for body in attempts(out):
            answer = peer.error('subscribe', 403, 'made by the admin', topic=TOPIC, **body)
            assert any(repr(k) in answer['details'] for k in body), answer
        # The connection is still good for what the client may do.
        peer.ok('subscribe', 'subscribed', topic=TOPIC)
    finally:
        peer.ws.close()
    assert [s['kind'] for s in subscriptions(target) if s not in before] in ([], ['websocket'])
    assert all(s['kind'] != 'file' for s in subscriptions(target))
    assert not out.exists()


@pytest.mark.parametrize('method, path', [('POST', '/admin/subscriptions'), ('PATCH', '/admin/subscriptions/1')])
def test_pub_sub_credentials_do_not_open_the_admin_api(target: LiveServer, tmp_path: Path, method: str,
                                                        path: str) -> None:
    before = subscriptions(target)
    r = target.request(method, path, auth=AUTH, json={'topic': TOPIC, 'kind': 'file',
                                                      'push_url': f'file://{tmp_path}'})
    assert r.status_code in (401, 403), r.text
    assert subscriptions(target) == before
