"""The pattern tester route and the searched, paged lists of security definitions and channels."""

from __future__ import annotations

from tests.live_server import LiveServer


def _topics(server: LiveServer, *names: str) -> None:
    for name in names:
        r = server.request('POST', '/admin/topics', json={'name': name}, auth=server.admin)
        assert r.status_code == 201, r.text


def test_topic_matches_pages_the_topics_a_pattern_matches(server: LiveServer) -> None:
    _topics(server, 'orders.created', 'orders.paid', 'Orders.Shipped', 'orders.emea.created', 'invoices.created')
    r = server.request('GET', '/admin/pubsub/topic-matches?pattern=orders.*', auth=server.admin)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer['total'] == 3 and answer['topics'] == ['orders.created', 'orders.paid', 'Orders.Shipped']
    r = server.request('GET', '/admin/pubsub/topic-matches?pattern=**.created&limit=1&offset=1', auth=server.admin)
    assert r.json()['total'] == 3 and r.json()['topics'] == ['orders.created']
    r = server.request('GET', '/admin/pubsub/topic-matches?pattern=nothing.here', auth=server.admin)
    assert r.json()['total'] == 0 and r.json()['topics'] == []


def test_topic_matches_refuses_bad_input_with_400(server: LiveServer) -> None:
    for query in ('', 'pattern=', 'pattern=a**', 'pattern=' + 'x' * 201, 'pattern=a&limit=0', 'pattern=a&limit=100000',
                  'pattern=a&offset=-1', 'pattern=a&limit=x', 'pattern=a%00b', 'pattern=a%23b'):
        r = server.request('GET', '/admin/pubsub/topic-matches?' + query, auth=server.admin)
        assert r.status_code == 400, (query, r.text)
        assert r.json()['details']
    assert server.request('GET', '/admin/pubsub/topic-matches?pattern=a').status_code == 401


def test_security_and_channel_lists_are_searched_and_paged(server: LiveServer) -> None:
    for i in range(5):
        r = server.request('POST', '/admin/security', auth=server.admin,
                           json={'name': f'team{i}.def', 'username': f'user-{i}', 'password': 'pw-123456'})
        assert r.status_code == 201, r.text
        r = server.request('POST', '/admin/channels', auth=server.admin,
                           json={'name': f'ch{i}', 'service': 'conduit.ping', 'url_path': f'/api/ping/{i}'})
        assert r.status_code == 201, r.text
    everything = server.request('GET', '/admin/security', auth=server.admin).json()
    assert everything['total'] == 5 and len(everything['security']) == 5  # without limit, as before
    page = server.request('GET', '/admin/security?search=USER-&limit=2&offset=2', auth=server.admin).json()
    assert page['total'] == 5 and [d['name'] for d in page['security']] == ['team2.def', 'team3.def']
    one = server.request('GET', '/admin/security?search=team4', auth=server.admin).json()
    assert [d['name'] for d in one['security']] == ['team4.def']
    assert server.request('GET', '/admin/security?search=%25', auth=server.admin).json()['total'] == 0
    channels = server.request('GET', '/admin/channels?search=/api/ping/3', auth=server.admin).json()
    assert channels['total'] == 1 and channels['channels'][0]['name'] == 'ch3'
    paged = server.request('GET', '/admin/channels?limit=3', auth=server.admin).json()
    assert paged['total'] == 5 and len(paged['channels']) == 3
    for bad in ('limit=0', 'limit=5000', 'offset=-3', 'search=' + 'x' * 201, 'search=a%01b'):
        for path in ('/admin/security', '/admin/channels'):
            assert server.request('GET', f'{path}?{bad}', auth=server.admin).status_code == 400, (path, bad)
