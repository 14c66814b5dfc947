"""The admin API in process, through ``runtime.testing.admin_client``: the real app, no gunicorn.

What a server's worker does with a request (authentication, routing, input checks, the
administration layer, error mapping) runs here against a started in-process runtime, on both
database backends; what only a real server can show (workers, signals, sockets) stays in the
server tests.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from runtime.testing import AppClient, TestRuntime, admin_client


@pytest.fixture
def client(runtime_factory: Callable[..., TestRuntime], db_url: str) -> AppClient:
    """An admin client of a started runtime on the backend under test."""
    return admin_client(runtime_factory(db_url=db_url))


def _ok(result: object, status: int = 200) -> dict:
    assert result.status_code == status, result.text
    return result.json


def test_every_admin_route_needs_the_admin_and_says_so_without_a_traceback(client: AppClient) -> None:
    assert _ok(client.simulate_get('/admin/services'))['is_ok'] is True
    for other in (client.anonymous(), client.as_user('admin', 'wrong'), client.as_user('nobody', 'x')):
        answer = other.simulate_get('/admin/services')
        assert answer.status_code == 401 and 'WWW-Authenticate' in answer.headers
        assert 'Traceback' not in answer.text and 'test-admin-password' not in answer.text
    # An unknown admin path is refused before anything is looked up: the same 401 without credentials.
    assert client.anonymous().simulate_get('/admin/no/such/thing').status_code == 401
    assert client.simulate_get('/admin/no/such/thing').status_code == 404


def test_topics_queues_and_dead_letters_through_the_administration_layer(client: AppClient) -> None:
    _ok(client.simulate_post('/admin/topics', json={'name': 'orders.created'}), 201)
    _ok(client.simulate_post('/admin/security', json={'name': 'puller', 'username': 'puller', 'password': 'pw-1'}),
        201)
    _ok(client.simulate_put('/admin/security/puller/permissions', json={'sub': ['orders.**']}))
    sub = _ok(client.simulate_post('/admin/subscriptions', json={'topic': 'orders.*', 'kind': 'pull',
                                                                 'security': 'puller'}), 201)['subscription']
    msg_ids = [_ok(client.simulate_post('/admin/publish', json={'topic': 'orders.created', 'data': {'n': n}}))['msg_id']
               for n in range(3)]

    page = _ok(client.simulate_get(f'/admin/queues/{sub["id"]}/messages'))
    assert [m['msg_id'] for m in page['messages']] == msg_ids
    one = _ok(client.simulate_get(f'/admin/queues/{sub["id"]}/messages/{msg_ids[0]}'))['message']
    assert one['data'] == {'n': 0} and one['leased'] is False

    edited = _ok(client.simulate_patch(f'/admin/queues/{sub["id"]}/messages/{msg_ids[0]}',
                                       json={'data': {'n': 'edited'}, 'priority': 9}))['message']
    assert edited['data'] == {'n': 'edited'} and edited['priority'] == 9
    _ok(client.simulate_delete(f'/admin/queues/{sub["id"]}/messages/{msg_ids[1]}'))
    assert _ok(client.simulate_get(f'/admin/queues/{sub["id"]}'))['queue']['queue_depth'] == 2

    # Every change above is in the audit log, with who made it.
    entries = _ok(client.simulate_get('/admin/audit'))['entries']
    assert {(e['method'], e['kind']) for e in entries} >= {('POST', 'topic'), ('PATCH', 'queues'), ('DELETE', 'queues')}
    assert all(e['actor'] == 'admin' for e in entries if e['method'] != 'FILE')
    assert 'pw-1' not in json.dumps(entries)


@pytest.mark.parametrize('path, body', [
    ('/admin/topics', '{"name": "a\\u0000b"}'),
    ('/admin/topics', '{"name": "big", "max_depth_gd": 1099511627776}'),
    ('/admin/topics', '["not", "an", "object"]'),
    ('/admin/topics', '{"name": '),
    ('/admin/subscriptions', '{"topic": "x", "kind": "rest_push", "push_url": "ftp://x"}'),
    ('/admin/subscriptions', '{"topic": "x", "kind": "carrier-pigeon"}'),
    ('/admin/publish', '{"topic": "x", "data": {"x": "\\ud800"}}'),
    ('/admin/queues/99999999999/redrive', '{"msg_ids": ["zpsm0"]}'),
])
def test_hostile_bodies_are_refused_naming_the_field_never_a_500(client: AppClient, path: str, body: str) -> None:
    answer = client.simulate_post(path, body=body, headers={'Content-Type': 'application/json'})
    assert 400 <= answer.status_code < 500, (answer.status_code, answer.text)
    assert answer.json['is_ok'] is False and answer.json['details']
    assert 'Traceback' not in answer.text


@pytest.mark.parametrize('options, named', [
    ({'with_overrides': 'x'}, "unknown delivery option 'with_overrides'"),  # was a TypeError, answered 500
    ({'kinds': []}, "unknown delivery option 'kinds'"),
    ({'file_format': 'csv'}, 'file_format: file_* options are for subscriptions of kind file only'),
    ({'push_method': 'DELETE'}, 'push_method must be one of POST, PUT, PATCH'),
    ({'push_username': 'u', 'push_password': 'plain-secret'}, 'push_password must be a'),
])
def test_hostile_delivery_options_are_refused_naming_the_option(client: AppClient, options: dict[str, object],
                                                                 named: str) -> None:
    assert client.simulate_post('/admin/topics', json={'name': 'hostile.options'}).status_code == 201
    answer = client.simulate_post('/admin/subscriptions', json={
        'topic': 'hostile.options', 'kind': 'service', 'service': 'conduit.ping', 'options': options})
    assert answer.status_code == 400, (answer.status_code, answer.text)
    assert named in answer.json['details'] and 'plain-secret' not in answer.text


def test_a_subscription_refused_for_its_is_active_is_not_made(client: AppClient) -> None:
    # It was: the subscription was made first, then is_active read, and the 400 left a subscription
    # behind whose sub_key nobody had been told.
    _ok(client.simulate_post('/admin/topics', json={'name': 'orders.paused'}), 201)
    _ok(client.simulate_post('/admin/security', json={'name': 'puller', 'username': 'puller', 'password': 'pw-1'}),
        201)
    answer = client.simulate_post('/admin/subscriptions', json={'topic': 'orders.paused', 'kind': 'pull',
                                                                'security': 'puller', 'is_active': 'no'})
    assert answer.status_code == 400 and 'is_active' in answer.text, answer.text
    assert _ok(client.simulate_get('/admin/subscriptions'))['subscriptions'] == []
    # Given paused, it is made paused: no worker could deliver it in between.
    made = _ok(client.simulate_post('/admin/subscriptions', json={'topic': 'orders.paused', 'kind': 'pull',
                                                                  'security': 'puller', 'is_active': False}), 201)
    assert made['subscription']['is_active'] is False


@pytest.mark.parametrize('body, field, why', [
    ({'kind': 'service'}, 'service', 'is required for a service subscription'),
    ({'kind': 'pull'}, 'security', 'is required for a pull subscription'),
    ({'kind': 'websocket'}, 'security', 'is required for a websocket subscription'),
    ({'kind': 'rest_push', 'push_url': 'ftp://host/in'}, 'push_url', 'must be an http:// or https:// URL'),
])
def test_each_kind_refuses_a_subscription_without_its_fields_naming_the_field(
        client: AppClient, body: dict, field: str, why: str) -> None:
    # Each kind says what it requires (its plug-in's refused_field); the admin API names the field.
    _ok(client.simulate_post('/admin/topics', json={'name': 'orders.fields'}), 201)
    answer = client.simulate_post('/admin/subscriptions', json={'topic': 'orders.fields', **body})
    assert answer.status_code == 400, answer.text
    assert answer.json['details'].startswith(f"input field '{field}' {why}"), answer.json
    assert _ok(client.simulate_get('/admin/subscriptions'))['subscriptions'] == []
