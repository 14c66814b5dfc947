"""The limit on the WebSocket subscriptions one security definition holds, against a real server.

WebSocket subscriptions outlive their connections (until the sweeper finds them inactive) and each
is one more queue row per publication, so ``[websocket] max_subscriptions_per_definition`` bounds
how many one credential may make: past it subscribe answers 409 naming the limit and the
definition; another definition is unaffected, unsubscribing makes room, and resuming a subscription
with its sub_key never counts as a new one. The admin API counts each definition's subscriptions.
The client is websocket-client (tests.websocket_peer). Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.live_server import LiveServer, poll
from tests.websocket_peer import provision

FIRST = ('ws-first', 'ws-first-pw-1')
SECOND = ('ws-second', 'ws-second-pw-2')
USERS = [('ws.first', *FIRST), ('ws.second', *SECOND)]
TOPICS = [{'name': 'orders.created'}, {'name': 'orders.cancelled'}]
GRANTS = {'ws.first': {'pub': [], 'sub': ['orders.**']}, 'ws.second': {'pub': [], 'sub': ['orders.**']}}

#: Small enough to reach in a test; two workers, so the count is the database's, not one worker's.
LIMIT = 3
CONFIG = f'''
[websocket]
max_subscriptions_per_definition = {LIMIT}
'''


@pytest.fixture
def server(server_factory: Callable[..., LiveServer]) -> LiveServer:
    """A started server with the two definitions above (one worker: a second one could answer a subscribe
    before the permissions just made reached it; the race between workers is tested in tests/http)."""
    started = server_factory(extra_config=CONFIG).start()
    provision(started, USERS, TOPICS, GRANTS)
    return started


def _definitions(server: LiveServer) -> tuple[dict[str, dict[str, Any]], int]:
    answer = server.admin_json('GET', '/admin/pubsub/websockets', 200)
    return {d['security']: d for d in answer['definitions']}, answer['max_per_definition']


def test_a_definition_at_the_limit_is_refused_409_and_others_and_resumes_are_not(
        server: LiveServer, peers: Any) -> None:
    # The limit is per definition, across connections (each closed, its subscriptions persist) and workers.
    sub_keys = []
    for _ in range(LIMIT):
        peer = peers(server, hello=FIRST)
        sub_keys.append(peer.ok('subscribe', 'subscribed', topic='orders.created')['sub_key'])
        peer.close()
    full = peers(server, hello=FIRST)
    refused = full.error('subscribe', 409, f'{LIMIT}', "'ws.first'", 'max_subscriptions_per_definition',
                         pattern='orders.**')
    assert 'sub_key' not in refused
    full.error('subscribe', 409, 'max_subscriptions_per_definition', topic='orders.cancelled')
    # The server detaches a closed peer's subscriptions on its own time (CI: 'connected' still 1 at once).
    definitions, limit = poll(lambda: _definitions(server) if _definitions(server)[0]['ws.first']['connected'] == 0
                              else None, 10, message="ws.first's closed peers detached")
    assert limit == LIMIT
    assert definitions['ws.first'] == {'security': 'ws.first', 'subscriptions': LIMIT, 'connected': 0}

    # Another definition is unaffected.
    other = peers(server, hello=SECOND)
    assert other.ok('subscribe', 'subscribed', topic='orders.created')['sub_key']

    # Resuming one of its subscriptions is not a new one: allowed at the limit, and still at the limit after.
    resumed = full.ok('subscribe', 'subscribed', sub_key=sub_keys[0])
    assert resumed['resumed'] is True
    again = peers(server, hello=FIRST)
    assert again.ok('subscribe', 'subscribed', sub_key=sub_keys[1])['resumed'] is True
    again.error('subscribe', 409, 'max_subscriptions_per_definition', topic='orders.created')

    # Unsubscribing makes room for exactly one more.
    full.ok('unsubscribe', 'unsubscribed', sub_key=sub_keys[0])
    assert full.ok('subscribe', 'subscribed', pattern='orders.**')['sub_key']
    full.error('subscribe', 409, 'max_subscriptions_per_definition', topic='orders.cancelled')
    definitions, _ = _definitions(server)
    assert definitions['ws.first']['subscriptions'] == LIMIT and definitions['ws.first']['connected'] == 2
    assert definitions['ws.second'] == {'security': 'ws.second', 'subscriptions': 1, 'connected': 1}
    # The connection refused stays usable: the refusal is an error frame, not a close.
    assert full.request('ping')['action'] == 'pong'
