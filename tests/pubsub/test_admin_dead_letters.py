"""Dead letters across subscriptions, moving a message to the DLQ and messages waiting in a topic, on real servers.

A service that fails until the data says ok fills two subscriptions' dead-letter queues; the
routes filter them, count them, and re-drive or delete all that match — never more than the
count the user confirmed. Every route answers hostile input with a clear 4xx.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.http.test_admin_api import Admin, _records, _start
from tests.live_server import poll


def _failing_subs(admin: Admin) -> tuple[int, int]:
    admin('POST', '/admin/topics', 201, json={'name': 'dlq.orders'})
    admin('POST', '/admin/topics', 201, json={'name': 'dlq.invoices'})
    ids = []
    for topic in ('dlq.orders', 'dlq.invoices'):
        ids.append(admin('POST', '/admin/subscriptions', 201, json={
            'topic': topic, 'kind': 'service', 'service': 'test.picky',
            'options': {'max_attempts': 1, 'err_should_block': False}})['subscription']['id'])
    return ids[0], ids[1]


def _all(admin: Admin, query: str) -> list[dict[str, Any]]:
    rows, before = [], None
    while True:
        page = admin('GET', f'/admin/dead-letters?limit=2&{query}' + (f'&before={before}' if before else ''))
        rows += page['dead_letters']
        before = page['next_before']
        if before is None:
            return rows


def test_filter_count_and_redrive_or_delete_all_that_match(server_factory: Any, tmp_path: Path) -> None:
    server, admin, out = _start(server_factory, tmp_path)
    orders, invoices = _failing_subs(admin)
    for n in range(5):
        admin('POST', '/admin/publish', json={'topic': 'dlq.orders', 'data': {'ok': False, 'n': n}})
    for n in range(3):
        admin('POST', '/admin/publish', json={'topic': 'dlq.invoices', 'data': {'ok': False, 'n': n}})
    poll(lambda: admin('POST', '/admin/dead-letters/count', json={})['count'] == 8, message='eight dead letters')

    assert len(_all(admin, '')) == 8
    by_topic = _all(admin, 'topic=dlq.orders')
    assert len(by_topic) == 5 and {r['sub_id'] for r in by_topic} == {orders}
    assert len(_all(admin, 'topic=dlq.*')) == 8
    assert len(_all(admin, f'sub_id={invoices}')) == 3
    assert len(_all(admin, 'error=NOT%20OK')) == 8 and _all(admin, 'error=nothing%20like%20it') == []
    assert len(_all(admin, 'since=2000-01-01T00:00:00Z&until=2999-01-01')) == 8
    assert _all(admin, 'until=2000-01-01T00:00:00%2B00:00') == []
    one = by_topic[0]
    # One letter's own view has its last error and traceback; it is edited and re-driven alone.
    letter = admin('GET', f'/admin/queues/{orders}/dead-letters/{one["msg_id"]}')['dead_letter']
    assert 'not ok' in letter['last_error'] and 'ValueError' in (letter['last_traceback'] or '')

    counted = admin('POST', '/admin/dead-letters/count', json={'topic': 'dlq.orders'})
    assert counted == {'is_ok': True, 'count': 5, 'capped': False}
    # A confirmation of 4 does not cover the 5 that match now: refused, nothing done.
    refused = admin('POST', '/admin/dead-letters/redrive', 409, json={'topic': 'dlq.orders', 'expected': 4})
    assert '4 confirmed' in refused['details']
    assert admin('POST', '/admin/dead-letters/count', json={'topic': 'dlq.orders'})['count'] == 5

    # Fix the data of the orders' letters (the service wants ok) and re-drive all of them.
    for row in by_topic:
        admin('PATCH', f'/admin/queues/{orders}/dead-letters/{row["msg_id"]}',
              json={'data': {'ok': True, 'n': 100 + len(row['msg_id'])}})
    done = admin('POST', '/admin/dead-letters/redrive', json={'topic': 'dlq.orders', 'expected': 5})
    assert done['redriven'] == 5
    poll(lambda: sum(1 for r in _records(out, 'dlq.orders') if r['data'].get('ok')) == 5,
         message='five re-driven deliveries')
    assert all(r['count'] == 1 for r in _records(out, 'dlq.orders') if r['data'].get('ok'))  # attempts were reset

    assert admin('POST', '/admin/dead-letters/delete', json={'sub_id': invoices, 'expected': 3})['deleted'] == 3
    assert admin('POST', '/admin/dead-letters/count', json={})['count'] == 0
    audit = admin('GET', '/admin/audit?limit=50')['entries']
    assert {'redrive', 'delete'} <= {e['action'] for e in audit if 'dead-letters' in e.get('path', '')}


def test_move_a_queued_message_to_the_dead_letters_and_topic_messages(server: Any) -> None:
    admin = Admin(server)
    admin('POST', '/admin/security', 201, json={'name': 'puller', 'username': 'puller', 'password': 'pw'})
    admin('POST', '/admin/topics', 201, json={'name': 'held', 'on_no_subs': 'accept'})
    waiting = [admin('POST', '/admin/publish', json={'topic': 'held', 'data': {'n': n}})['msg_id'] for n in range(3)]
    page = admin('GET', '/admin/topic-messages?topic=held&limit=2')
    assert page['waiting'] == 3 and [m['msg_id'] for m in page['messages']] == waiting[:2]
    rest = admin('GET', f'/admin/topic-messages?topic=held&after={page["next_after"]}')
    assert [m['msg_id'] for m in rest['messages']] == waiting[2:] and rest['next_after'] is None
    edited = admin('PATCH', f'/admin/topic-messages/{waiting[0]}', json={'data': {'n': 'edited'}})
    assert edited['message']['data'] == {'n': 'edited'}
    assert admin('DELETE', f'/admin/topic-messages/{waiting[1]}')['deleted'] == waiting[1]
    admin('GET', f'/admin/topic-messages/{waiting[1]}', 404)

    # A pull subscription takes the waiting messages; the edited one arrives edited.
    sub = admin('POST', '/admin/subscriptions', 201, json={'topic': 'held', 'kind': 'pull',
                                                            'security': 'puller'})['subscription']['id']
    queued = admin('GET', f'/admin/queues/{sub}/messages')['messages']
    assert {m['msg_id'] for m in queued} == {waiting[0], waiting[2]}
    admin('GET', f'/admin/topic-messages/{waiting[0]}', 404)  # no longer waiting in the topic
    assert admin('GET', f'/admin/queues/{sub}/messages/{waiting[0]}')['message']['data'] == {'n': 'edited'}

    moved = admin('POST', f'/admin/queues/{sub}/messages/{waiting[0]}/dead-letter', json={'error': 'poison'})
    assert moved['dead_lettered'] == waiting[0]
    letter = admin('GET', f'/admin/queues/{sub}/dead-letters/{waiting[0]}')['dead_letter']
    assert letter['reason'] == 'admin' and letter['last_error'] == 'poison'
    admin('POST', f'/admin/queues/{sub}/messages/{waiting[0]}/dead-letter', 404)  # not queued any more
    # Without a body: a default error naming the administrator.
    admin('POST', f'/admin/queues/{sub}/messages/{waiting[2]}/dead-letter')
    assert 'administrator' in admin('GET', f'/admin/queues/{sub}/dead-letters/{waiting[2]}')['dead_letter'][
        'last_error']


def test_hostile_input_gets_a_clear_4xx(server: Any) -> None:
    admin = Admin(server)
    admin('POST', '/admin/topics', 201, json={'name': 'host.a'})
    admin('POST', '/admin/topics', 201, json={'name': 'host.b'})
    admin('POST', '/admin/security', 201, json={'name': 'p', 'username': 'p', 'password': 'pw'})
    admin('PUT', '/admin/security/p/permissions', json={'sub': ['host.**']})
    sub_a = admin('POST', '/admin/subscriptions', 201, json={'topic': 'host.a', 'kind': 'pull',
                                                              'security': 'p'})['subscription']['id']
    sub_b = admin('POST', '/admin/subscriptions', 201, json={'topic': 'host.b', 'kind': 'pull',
                                                              'security': 'p'})['subscription']['id']
    msg_a = admin('POST', '/admin/publish', json={'topic': 'host.a', 'data': 1, 'has_gd': True})['msg_id']

    for query in ('limit=-1', 'limit=0', 'limit=100000', 'limit=x', 'before=-5', 'before=99999999999999999999999',
                  'sub_id=-1', 'sub_id=abc', 'sub_id=99999999999', 'error=' + 'x' * 201, 'error=a%00b',
                  'topic=a%00b', 'topic=' + 'x' * 201, 'topic=%23hash', 'topic=%20lead', 'since=yesterday',
                  'until=1e999', 'since=-5', 'since=' + '9' * 50, 'topic=caf%C3%A9'):
        r = server.request('GET', f'/admin/dead-letters?{query}', auth=server.admin)
        assert r.status_code == 400, f'{query}: {r.status_code} {r.text}'
        assert r.json()['is_ok'] is False and r.json()['details']

    bad_bodies: list[Any] = [
        {'expected': -1}, {'expected': 'all'}, {'expected': 2 ** 40}, {'expected': True}, {},
        {'expected': 0, 'sub_id': 'x'}, {'expected': 0, 'sub_id': 0}, {'expected': 0, 'error': 5},
        {'expected': 0, 'error': 'e' * 10_000}, {'expected': 0, 'error': 'a\x00b'}, {'expected': 0, 'topic': ['x']},
        {'expected': 0, 'since': {'t': 1}}, {'expected': 0, 'until': float('nan')}, {'expected': 0, 'nope': 1},
        [1, 2], 'text']
    for path in ('/admin/dead-letters/redrive', '/admin/dead-letters/delete'):
        for body in bad_bodies:
            r = server.request('POST', path, data=json.dumps(body), auth=server.admin,
                               headers={'Content-Type': 'application/json'})
            assert r.status_code == 400, f'{path} {body!r}: {r.status_code} {r.text}'
        r = server.request('POST', path, data=b'{"expected": ', auth=server.admin,
                           headers={'Content-Type': 'application/json'})
        assert r.status_code == 400
        r = server.request('POST', path, data=b'{"error": "' + b'x' * 20_000_000 + b'"}', auth=server.admin,
                           headers={'Content-Type': 'application/json'})
        assert r.status_code == 413, r.status_code
    for body in ({'sub_id': -3}, {'error': 'x' * 500}, {'topic': 'a#b'}):
        admin('POST', '/admin/dead-letters/count', 400, json=body)
    assert admin('POST', '/admin/dead-letters/count')['count'] == 0  # no body: every letter

    # Moving to the DLQ: another subscription's message, bad ids, a NUL, huge text.
    admin('POST', f'/admin/queues/{sub_b}/messages/{msg_a}/dead-letter', 404)
    admin('POST', f'/admin/queues/999999/messages/{msg_a}/dead-letter', 404)
    admin('POST', f'/admin/queues/{sub_a}/messages/a%00b/dead-letter', 400)
    admin('POST', f'/admin/queues/{sub_a}/messages/{"m" * 2000}/dead-letter', 404)
    admin('POST', f'/admin/queues/{sub_a}/messages/{msg_a}/dead-letter', 400, json={'error': 'e' * 1001})
    admin('POST', f'/admin/queues/{sub_a}/messages/{msg_a}/dead-letter', 400, json={'error': 7})
    admin('POST', f'/admin/queues/{sub_a}/messages/{msg_a}/dead-letter', 400, json={'bogus': 1})
    r = server.request('POST', f'/admin/queues/-1/messages/{msg_a}/dead-letter', auth=server.admin)
    assert r.status_code in (400, 404)
    assert admin('GET', f'/admin/queues/{sub_a}/messages/{msg_a}')['message']['msg_id'] == msg_a  # still queued
    # Keyset pages of a queue: a cursor from a previous page, or a clear 400.
    page = admin('GET', f'/admin/queues/{sub_a}/messages?limit=1')
    assert page['next_after'] == page['messages'][0]['cursor']
    assert admin('GET', f'/admin/queues/{sub_a}/messages?after={page["next_after"]}')['messages'] == []
    for bad in ('x', '1.2', '-5.1.2.3', '5.99999999999999999999.1', '-5.1.a', '-123.1.1', 'a' * 100):
        assert 'after' in admin('GET', f'/admin/queues/{sub_a}/messages?after={bad}', 400)['details']
    assert 'NUL' in admin('GET', f'/admin/queues/{sub_a}/messages?after=%00', 400)['details']

    # Topic messages: missing or bad topic, bad cursors, bad ids.
    admin('GET', '/admin/topic-messages', 400)
    admin('GET', '/admin/topic-messages?topic=no.such.topic', 404)
    admin('GET', '/admin/topic-messages?topic=a%00b', 400)
    admin('GET', '/admin/topic-messages?topic=host.a&after=-1', 400)
    admin('GET', '/admin/topic-messages?topic=host.a&limit=0', 400)
    admin('GET', '/admin/topic-messages/a%00b', 400)
    admin('GET', f'/admin/topic-messages/{"m" * 65}', 400)
    admin('GET', f'/admin/topic-messages/{msg_a}', 404)  # in a queue, not waiting in its topic
    admin('PATCH', '/admin/topic-messages/zpsmnope', 404, json={'data': 1})
    admin('DELETE', '/admin/topic-messages/zpsmnope', 404)

    # No credentials: 401 for every new route.
    for method, path in (('GET', '/admin/dead-letters'), ('POST', '/admin/dead-letters/count'),
                         ('POST', '/admin/dead-letters/redrive'), ('POST', '/admin/dead-letters/delete'),
                         ('GET', '/admin/topic-messages?topic=host.a'), ('GET', f'/admin/topic-messages/{msg_a}'),
                         ('POST', f'/admin/queues/{sub_a}/messages/{msg_a}/dead-letter')):
        assert server.request(method, path, json={'expected': 0}).status_code == 401


def test_topics_list_pages_and_searches(server: Any) -> None:
    admin = Admin(server)
    for name in ('page.alpha', 'page.beta', 'page.gamma', 'other.delta'):
        admin('POST', '/admin/topics', 201, json={'name': name})
    admin('POST', '/admin/publish', json={'topic': 'page.beta', 'data': {'x': 1}, 'has_gd': True})
    page = admin('GET', '/admin/topics?q=PAGE.&limit=2')
    assert page['total'] == 3 and [t['name'] for t in page['topics']] == ['page.alpha', 'page.beta']
    assert page['topics'][0]['last_pub_time_iso'] is None and page['topics'][1]['last_pub_time_iso']
    assert page['topics'][1]['depth']['gd'] == 1  # no subscriber: waiting in the topic
    rest = admin('GET', '/admin/topics?q=page.&limit=2&offset=2')
    assert [t['name'] for t in rest['topics']] == ['page.gamma']
    every = admin('GET', '/admin/topics')  # without limit: every topic (services' own too), as before
    assert every['total'] == len(every['topics']) >= 4
    for query in ('limit=0', 'limit=-1', 'limit=5000', 'offset=-1', 'q=a%00b', 'q=' + 'x' * 201):
        admin('GET', f'/admin/topics?{query}', 400)
    for name in ('page.alpha', 'page.beta'):
        admin('POST', '/admin/subscriptions', 201, json={'topic': name, 'kind': 'service', 'service': 'conduit.ping',
                                                         'is_active': False})
    queues = admin('GET', '/admin/queues?q=page.b&limit=10')
    assert queues['total'] == 1 and queues['queues'][0]['topic'] == 'page.beta'
    assert len(admin('GET', '/admin/queues?limit=1&offset=1')['queues']) == 1
    for query in ('limit=0', 'offset=-1', 'q=a%00b'):
        admin('GET', f'/admin/queues?{query}', 400)
