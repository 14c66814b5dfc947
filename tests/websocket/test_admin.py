"""The admin API's view of WebSocket subscribers, in process, on both backends.

``GET /admin/pubsub/websockets`` lists every WebSocket subscription with its client (connected,
worker, peer, window, in flight, queue depth, last activity), filtered by security definition and
by whether a client is attached; the subscription and queue views show the same client fields for
subscriptions of kind ``websocket``; ``limit_sub_inactivity`` is a topic attribute like the others.
No answer carries a sub_key.

Subscriptions are made through the catalog (kind ``websocket``) and the hub (``runtime.ws_hub``),
and a client is attached with a stand-in connection, as the HTTP side attaches a real one: the
table and the hub come from the pub/sub side, so every test here but the first needs it merged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import gevent.event
import pytest

from runtime.errors import SubscriptionLimitReached
from runtime.pubsub.subscribers.websocket import KIND_WEBSOCKET
from runtime.testing import AppClient, TestRuntime, admin_client, make_settings
from runtime.util.timefmt import iso


def _ok(result: Any, status: int = 200) -> dict[str, Any]:
    assert result.status_code == status, result.text
    return result.json


class StandInConnection:
    """An attached client that never receives anything (its subscription's queue stays as it is)."""

    def __init__(self) -> None:
        self.taken_over_subs: list[int] = []
        self._never = gevent.event.Event()

    @property
    def in_flight(self) -> int:
        return 0

    def deliver_batch(self, sub: Any, batch: list[Any]) -> list[Any]:
        self._never.wait()  # holds the batch until the loop is stopped by the detach
        return []

    def taken_over(self, sub_id: int) -> None:
        self.taken_over_subs.append(sub_id)


@pytest.fixture
def rt(runtime_factory: Callable[..., TestRuntime], db_url: str) -> TestRuntime:
    """A started runtime on the backend under test."""
    return runtime_factory(db_url=db_url)


@pytest.fixture
def client(rt: TestRuntime) -> AppClient:
    """The admin client of rt."""
    return admin_client(rt)


# The view of the list, on rows as the pub/sub side's statement gives them


def _row(sub_id: int, security: str, connected: bool, **more: Any) -> dict[str, Any]:
    now = time.time()
    row = {'sub_id': sub_id, 'sub_key': f'sk.secret{sub_id:04d}', 'security': security, 'pattern': 'orders.**',
           'is_active': True, 'window': 100, 'owner': 'host-a:4242:beef' if connected else '',
           'peer': '10.0.0.7:50211' if connected else '', 'connected': connected,
           'connected_at': now - 60 if connected else None, 'last_active_at': now - 5, 'in_flight': 0,
           'queue_depth': 0}
    row.update(more)
    return row


def test_the_list_shows_every_client_field_filters_and_totals_and_never_a_sub_key(
        rt: TestRuntime, client: AppClient, monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [_row(3, 'browser', True, in_flight=4, window=10, queue_depth=12),
            _row(1, 'browser', False, last_active_at=time.time() - 3600, queue_depth=2),
            _row(2, 'mobile', True)]
    # The rows the WebSocket kind's table would give (the reader the runtime handed its queue admin).
    monkeypatch.setattr(rt.queue_admin, '_websocket_clients', lambda conn: [dict(r) for r in rows])

    answer = _ok(client.simulate_get('/admin/pubsub/websockets'))
    assert [v['sub_id'] for v in answer['websockets']] == [1, 2, 3]
    assert answer['totals'] == {'subscriptions': 3, 'connected': 2}
    # Per definition (the most first), with the limit subscribe is refused at.
    assert answer['definitions'] == [{'security': 'browser', 'subscriptions': 2, 'connected': 1},
                                     {'security': 'mobile', 'subscriptions': 1, 'connected': 1}]
    assert answer['max_per_definition'] == 200
    # ?connected= filters the list, not the per-definition count (that is what the limit counts).
    filtered = _ok(client.simulate_get('/admin/pubsub/websockets', query_string='connected=false&security=browser'))
    assert filtered['totals'] == {'subscriptions': 1, 'connected': 0}
    assert filtered['definitions'] == [{'security': 'browser', 'subscriptions': 2, 'connected': 1}]
    assert 'sk.secret' not in json.dumps(answer)
    busy = answer['websockets'][2]
    assert busy['security'] == 'browser' and busy['pattern'] == 'orders.**' and busy['is_active'] is True
    assert busy['connected'] is True and busy['owner'] == 'host-a:4242:beef' and busy['peer'] == '10.0.0.7:50211'
    assert (busy['window'], busy['in_flight'], busy['queue_depth']) == (10, 4, 12)
    assert busy['connected_at_iso'] == iso(rows[0]['connected_at'])
    assert busy['last_active_at_iso'] == iso(rows[0]['last_active_at']) and 4 <= busy['idle_secs'] < 60
    idle = answer['websockets'][0]
    assert idle['connected'] is False and idle['owner'] == '' and idle['connected_at'] is None
    assert idle['connected_at_iso'] is None and idle['idle_secs'] >= 3600

    def listed(query: str) -> tuple[list[int], dict[str, int]]:
        answer = _ok(client.simulate_get('/admin/pubsub/websockets', query_string=query))
        return [v['sub_id'] for v in answer['websockets']], answer['totals']

    assert listed('security=browser') == ([1, 3], {'subscriptions': 2, 'connected': 1})
    assert listed('connected=true') == ([2, 3], {'subscriptions': 2, 'connected': 2})
    assert listed('connected=false') == ([1], {'subscriptions': 1, 'connected': 0})
    assert listed('security=mobile&connected=false') == ([], {'subscriptions': 0, 'connected': 0})
    assert listed('security=nobody') == ([], {'subscriptions': 0, 'connected': 0})
    for bad in ('connected=maybe', 'security=a%01b', 'security=' + 'x' * 201):
        refused = client.simulate_get('/admin/pubsub/websockets', query_string=bad)
        assert refused.status_code == 400 and refused.json['is_ok'] is False, refused.text
        assert bad.split('=')[0] in refused.json['details']
    assert client.anonymous().simulate_get('/admin/pubsub/websockets').status_code == 401
    spec = _ok(client.simulate_get('/openapi.json'))
    assert 'get' in spec['paths']['/admin/pubsub/websockets']


# Real subscriptions, clients attached through the hub (needs the pub/sub side)


def _setup(rt: TestRuntime, client: AppClient) -> tuple[Any, Any, Any]:
    """Two definitions; a catalog-made WebSocket subscription with 2 queued messages, a hub-made one, a pull one."""
    for name in ('browser', 'mobile'):
        _ok(client.simulate_post('/admin/security', json={'name': name, 'username': name,
                                                          'password': f'{name}-password-1'}), 201)
        # Publications reach the queues of a definition's subscriptions only where it may subscribe.
        _ok(client.simulate_put(f'/admin/security/{name}/permissions', json={'sub': ['orders.**', 'alerts.**']}))
    _ok(client.simulate_post('/admin/topics', json={'name': 'orders.created'}), 201)
    _ok(client.simulate_post('/admin/topics', json={'name': 'alerts.raised'}), 201)
    queued = rt.catalog.subscribe('orders.*', KIND_WEBSOCKET, security='browser', options={'delivery_batch_size': 7})
    attached = rt.ws_hub.subscribe('mobile', 'alerts.*', 3)
    pull = rt.catalog.subscribe('orders.created', 'pull', security='browser')
    for n in range(2):
        _ok(client.simulate_post('/admin/publish', json={'topic': 'orders.created', 'data': {'n': n}}))
    return queued, attached, pull


def test_websocket_subscriptions_with_their_clients(rt: TestRuntime, client: AppClient) -> None:
    queued, attached, pull = _setup(rt, client)
    connection = StandInConnection()
    before_attach = time.time()
    rt.ws_hub.attach(attached, connection, '10.1.2.3:5555')

    answer = _ok(client.simulate_get('/admin/pubsub/websockets'))
    views = {v['sub_id']: v for v in answer['websockets']}
    assert sorted(views) == sorted([queued.id, attached.id]) and pull.id not in views
    assert answer['totals'] == {'subscriptions': 2, 'connected': 1}
    waiting, live = views[queued.id], views[attached.id]
    assert (waiting['security'], waiting['pattern'], waiting['window'], waiting['queue_depth']) == \
        ('browser', 'orders.*', 7, 2)
    assert waiting['connected'] is False and waiting['owner'] == '' and waiting['connected_at_iso'] is None
    assert waiting['last_active_at_iso'] and waiting['in_flight'] == 0
    assert (live['security'], live['pattern'], live['window'], live['queue_depth']) == ('mobile', 'alerts.*', 3, 0)
    assert live['connected'] is True and live['owner'] == rt.broker.leases.owner and live['peer'] == '10.1.2.3:5555'
    assert live['connected_at'] >= before_attach - 1 and live['connected_at_iso'] == iso(live['connected_at'])
    text = json.dumps(answer)
    assert queued.sub_key not in text and attached.sub_key not in text

    assert [v['sub_id'] for v in _ok(client.simulate_get(
        '/admin/pubsub/websockets', query_string='security=mobile'))['websockets']] == [attached.id]
    assert [v['sub_id'] for v in _ok(client.simulate_get(
        '/admin/pubsub/websockets', query_string='connected=false'))['websockets']] == [queued.id]

    # The subscription and queue views show the kind and the same client fields; other kinds have none.
    subs = _ok(client.simulate_get('/admin/subscriptions', query_string='kind=websocket'))['subscriptions']
    assert {s['id'] for s in subs} == {queued.id, attached.id} and {s['kind'] for s in subs} == {KIND_WEBSOCKET}
    one = _ok(client.simulate_get(f'/admin/subscriptions/{attached.id}'))['subscription']
    assert one['kind'] == KIND_WEBSOCKET and one['client']['connected'] is True
    assert one['client']['peer'] == '10.1.2.3:5555' and one['client']['window'] == 3
    assert one['options']['delivery_batch_size'] == 3
    queue = _ok(client.simulate_get(f'/admin/queues/{queued.id}'))['queue']
    assert queue['queue_depth'] == 2 and queue['client']['connected'] is False
    topic_subs = _ok(client.simulate_get('/admin/topics/orders.created'))['subscriptions']
    by_id = {s['id']: s for s in topic_subs}
    assert by_id[queued.id]['client']['window'] == 7 and 'client' not in by_id[pull.id]
    all_queues = _ok(client.simulate_get('/admin/queues'))['queues']
    assert {q['id'] for q in all_queues if 'client' in q} == {queued.id, attached.id}
    everything = json.dumps([subs, one, queue, topic_subs, all_queues])
    assert queued.sub_key not in everything and attached.sub_key not in everything

    # Detached: no client any more, and the last activity is the detach.
    rt.ws_hub.detach(attached.id, connection)
    live = {v['sub_id']: v for v in _ok(client.simulate_get('/admin/pubsub/websockets'))['websockets']}[attached.id]
    assert live['connected'] is False and live['owner'] == '' and live['last_active_at'] >= before_attach - 1

    # Deleted through the admin API: gone from the list with its client row.
    _ok(client.simulate_delete(f'/admin/subscriptions/{queued.id}'))
    answer = _ok(client.simulate_get('/admin/pubsub/websockets'))
    assert [v['sub_id'] for v in answer['websockets']] == [attached.id]


def test_the_admin_api_makes_websocket_subscriptions_for_a_security_definition(client: AppClient) -> None:
    _ok(client.simulate_post('/admin/security', json={'name': 'browser', 'username': 'browser',
                                                      'password': 'browser-password-1'}), 201)
    _ok(client.simulate_post('/admin/topics', json={'name': 'orders.created'}), 201)
    refused = client.simulate_post('/admin/subscriptions', json={'topic': 'orders.*', 'kind': 'websocket'})
    assert refused.status_code == 400 and 'security' in refused.json['details']
    made = _ok(client.simulate_post('/admin/subscriptions', json={
        'topic': 'orders.*', 'kind': 'websocket', 'security': 'browser',
        'options': {'delivery_batch_size': 25}}), 201)
    # The sub_key is handed over once, here: a client resumes the subscription with it.
    assert made['sub_key'].startswith('sk.') and made['subscription']['kind'] == KIND_WEBSOCKET
    assert made['subscription']['client']['connected'] is False
    listed = _ok(client.simulate_get('/admin/pubsub/websockets'))['websockets']
    assert [(v['sub_id'], v['window'], v['connected']) for v in listed] == [(made['subscription']['id'], 25, False)]


def test_a_definition_holds_at_most_max_subscriptions_per_definition_even_subscribing_at_once(
        runtime_factory: Callable[..., TestRuntime], db_url: str, tmp_path: Any) -> None:
    settings = make_settings(tmp_path / 'limited', db_url)
    settings.websocket.max_subscriptions_per_definition = 4
    (tmp_path / 'limited').mkdir()
    rt = runtime_factory(db_url=db_url, settings=settings)
    client = admin_client(rt)
    _ok(client.simulate_post('/admin/topics', json={'name': 'orders.created'}), 201)
    # Ten at once, each in its own transaction (on PostgreSQL on its own connection): exactly four are made.
    jobs = [gevent.spawn(rt.ws_hub.subscribe, 'browser', 'orders.created', 10) for _ in range(10)]
    gevent.joinall(jobs, timeout=60)
    made = [j.value for j in jobs if j.successful()]
    refused = [j.exception for j in jobs if not j.successful()]
    assert len(made) == 4 and len(refused) == 6
    for e in refused:
        assert isinstance(e, SubscriptionLimitReached) and e.http_status == 409, repr(e)
        assert "'browser'" in str(e) and 'max_subscriptions_per_definition = 4' in str(e)
    # Another definition has its own four; subscriptions of other kinds do not count.
    rt.catalog.subscribe('orders.created', 'pull', security='browser')
    assert rt.ws_hub.subscribe('mobile', 'orders.created', 10).security == 'mobile'
    answer = _ok(client.simulate_get('/admin/pubsub/websockets'))
    assert answer['definitions'] == [{'security': 'browser', 'subscriptions': 4, 'connected': 0},
                                     {'security': 'mobile', 'subscriptions': 1, 'connected': 0}]
    assert answer['max_per_definition'] == 4
    # Room again once one is removed.
    rt.ws_hub.unsubscribe(made[0])
    assert rt.ws_hub.subscribe('browser', 'orders.created', 10).security == 'browser'
    with pytest.raises(SubscriptionLimitReached):
        rt.ws_hub.subscribe('browser', 'orders.created', 10)


def test_limit_sub_inactivity_is_a_topic_attribute(client: AppClient) -> None:
    made = _ok(client.simulate_post('/admin/topics', json={'name': 'ws.short', 'limit_sub_inactivity': 60}),
               201)['topic']
    assert made['limit_sub_inactivity'] == 60
    _ok(client.simulate_post('/admin/topics', json={'name': 'ws.default'}), 201)
    listed = {t['name']: t for t in _ok(client.simulate_get('/admin/topics'))['topics']}
    assert listed['ws.default']['limit_sub_inactivity'] == 86400 and listed['ws.short']['limit_sub_inactivity'] == 60
    changed = _ok(client.simulate_patch('/admin/topics/ws.short', json={'limit_sub_inactivity': 0}))['topic']
    assert changed['limit_sub_inactivity'] == 0  # 0: never deleted for inactivity
    assert _ok(client.simulate_get('/admin/topics/ws.short'))['topic']['limit_sub_inactivity'] == 0
    for bad in (-1, 'soon', True, 2 ** 40):
        refused = client.simulate_patch('/admin/topics/ws.short', json={'limit_sub_inactivity': bad})
        assert refused.status_code == 400 and 'limit_sub_inactivity' in refused.json['details'], refused.text
    spec = _ok(client.simulate_get('/openapi.json'))
    body = spec['paths']['/admin/topics']['post']['requestBody']['content']['application/json']['schema']
    assert 'limit_sub_inactivity' in body['properties']
