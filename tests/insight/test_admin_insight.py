"""The admin API's runtime insight against real servers: workers and their leases, totals, rates, service usage,
deepest queues, service sources and users, and the deployment history; hostile input answers a clear 4xx.
"""

from __future__ import annotations

import time
from typing import Any

import requests

from tests.live_server import LiveServer, poll

#: Heartbeats and flushes fast enough for a test; deliveries quick.
FAST = '''
[stats]
heartbeat_secs = 0.3
flush_interval_secs = 0.3
[pubsub]
poll_interval_secs = 0.05
lease_ttl_secs = 2.0
lease_renew_secs = 0.3
'''

MODULE = '''
from runtime import Service


class Echo(Service):
    """Answers what it got."""

    name = 'insight.echo'
    input = '-n',

    def handle(self):
        self.response.payload = {'echo': self.request.payload}


class Broken(Service):
    name = 'insight.broken'

    def handle(self):
        raise ValueError('always')
'''


def _admin(server: LiveServer):
    def call(method: str, path: str, status: int = 200, **kwargs: Any) -> Any:
        r = server.request(method, path, auth=server.admin, **kwargs)
        assert r.status_code == status, f'{method} {path}: {r.status_code} {r.text}'
        return r.json()
    return call


def _start(server_factory, workers: int = 1) -> tuple[LiveServer, Any]:
    server = server_factory(workers=workers, extra_config=FAST).start()
    admin = _admin(server)
    admin('POST', '/admin/deploy', json={'file_name': 'insight_mod.py', 'source': MODULE})
    return server, admin


def test_workers_totals_rates_usage_and_deepest(server_factory) -> None:
    server, admin = _start(server_factory, workers=2)
    before = admin('GET', '/admin/stats/totals')
    time.sleep(5.1)  # the totals are cached for 5 s
    admin('POST', '/admin/topics', 201, json={'name': 'orders'})
    admin('POST', '/admin/topics', 201, json={'name': 'bills'})
    live = admin('POST', '/admin/subscriptions', 201, json={'topic': 'bills', 'kind': 'service',
                                                           'service': 'insight.echo'})['subscription']
    deep = admin('POST', '/admin/subscriptions', 201, json={'topic': 'orders', 'kind': 'service',
                                                           'service': 'insight.echo', 'is_active': False})
    deep_id = deep['subscription']['id']
    time.sleep(1)  # both workers know the subscriptions (sync.interval_secs)
    for n in range(3):
        admin('POST', '/admin/publish', json={'topic': 'orders', 'data': {'n': n}})
    admin('POST', '/admin/publish', json={'topic': 'bills', 'data': {'n': 9}})
    for _ in range(3):
        admin('POST', '/admin/services/insight.echo/invoke', json={'n': 1})
    admin('POST', '/admin/services/insight.broken/invoke', 500, json={})

    # Both workers of the server are registered under one server id, fresh; the delivering one holds a lease.
    def workers() -> list[dict[str, Any]]:
        return admin('GET', '/admin/workers')['workers']
    poll(lambda: len(workers()) == 2, message='two workers registered')
    listed = workers()
    assert len({w['server'] for w in listed}) == 1
    assert all(not w['stale'] and w['heartbeat_age_secs'] < 5 for w in listed)
    poll(lambda: any(f'sub:{live["id"]}' in ' '.join(w['lease_names']) or w['leases'] for w in workers()),
         message='a lease held')

    totals = admin('GET', '/admin/stats/totals')
    assert totals['topics'] == before['topics'] + 2
    assert totals['subscriptions'] == before['subscriptions'] + 2
    assert totals['services'] >= 2 and totals['dead_letters'] == 0
    assert totals['messages_waiting'] >= 3 and totals['messages_waiting_estimated'] is False

    queues = admin('GET', '/admin/queues/deepest?limit=5')['queues']
    assert queues[0]['sub_id'] == deep_id and queues[0]['depth'] == 3
    assert queues[0]['pattern'] == 'orders' and queues[0]['subscriber'] == 'insight.echo'
    assert queues[0]['oldest_message']['msg_id']

    # Counts reach the database within a flush, summed over both workers.
    def usage() -> dict[str, Any]:
        page = admin('GET', '/admin/stats/services?search=INSIGHT.&limit=10')
        return {s['name']: s for s in page['services']}
    poll(lambda: usage().get('insight.echo', {}).get('invocations', 0) >= 4
         and usage()['insight.broken']['errors'] == 1, message='service statistics flushed')
    echo = usage()['insight.echo']
    assert echo['errors'] == 0 and echo['mean_secs'] > 0 and echo['p99_secs'] > 0
    assert admin('GET', '/admin/stats/services?search=insight.&limit=1&offset=1')['services'][0]['name'] == \
        'insight.echo'
    assert admin('GET', '/admin/stats/services?search=insight.')['total'] == 2
    assert admin('GET', '/admin/stats/services?search=no-such-thing')['services'] == []

    def rates() -> dict[str, int]:
        buckets = admin('GET', '/admin/stats/rates')['buckets']
        return {k: sum(b[k] for b in buckets) for k in ('published', 'delivered', 'failed', 'dead_lettered')}
    poll(lambda: rates()['published'] >= 4 and rates()['delivered'] >= 1, message='rates flushed')
    answer = admin('GET', f'/admin/stats/rates?since={time.time() - 60}')
    assert answer['bucket_secs'] == 10 and answer['since'] >= time.time() - 80
    assert len(admin('GET', '/admin/stats/rates?since=0')['buckets']) <= 361  # never more than the retention


def test_source_usage_and_deployments(server_factory) -> None:
    server, admin = _start(server_factory)
    source = admin('GET', '/admin/services/insight.echo/source')
    assert source['source'] == MODULE and source['origin'] == 'deployment' and source['truncated'] is False
    assert source['module'] == 'insight_mod'

    admin('POST', '/admin/channels', 201, json={'name': 'echo-ch', 'service': 'insight.echo', 'url_path': '/e'})
    admin('POST', '/admin/topics', 201, json={'name': 'audit.trail'})
    admin('POST', '/admin/subscriptions', 201, json={'topic': 'audit.trail', 'kind': 'service',
                                                    'service': 'insight.echo'})
    users = admin('GET', '/admin/services/insight.echo/usage')
    assert [c['name'] for c in users['users']['channels']] == ['echo-ch']
    assert [s['pattern'] for s in users['users']['subscriptions']] == ['audit.trail']
    assert users['users']['jobs'] == [] and users['stats']['invocations'] >= 0

    admin('DELETE', '/admin/services/insight.broken')
    history = admin('GET', '/admin/deployments')
    assert history['total'] == 2
    undeploy, deploy = history['deployments']
    assert undeploy['kind'] == 'undeploy' and undeploy['services'] == ['insight.broken']
    assert deploy['kind'] == 'deploy' and deploy['module'] == 'insight_mod'
    assert set(deploy['services']) == {'insight.echo', 'insight.broken'}
    assert deploy['actor'] == server.admin[0] and deploy['ok'] is True and deploy['size'] == len(MODULE)
    assert undeploy['actor'] == server.admin[0]
    assert admin('GET', '/admin/deployments?limit=1&offset=1')['deployments'][0]['id'] == deploy['id']
    assert admin('GET', '/admin/deployments?module=insight_mod')['total'] == 2
    assert admin('GET', '/admin/deployments?module=other')['total'] == 0

    # A module dropped into the hot-deploy directory has no admin behind it.
    server.write_module('dropped.py', MODULE.replace('insight.', 'dropped.'))
    poll(lambda: admin('GET', '/admin/deployments')['total'] == 3, message='dropped module recorded')
    assert admin('GET', '/admin/deployments')['deployments'][0]['source'] == 'directory'


def test_hostile_input_and_auth(server_factory) -> None:
    server, admin = _start(server_factory)
    for path in ('/admin/stats/services?limit=0', '/admin/stats/services?limit=abc', '/admin/stats/services?limit=1e9',
                 '/admin/stats/services?limit=100000', '/admin/stats/services?offset=-1',
                 '/admin/stats/services?offset=99999999999', '/admin/stats/services?search=' + 'x' * 3000,
                 '/admin/stats/services?search=a%00b', '/admin/stats/rates?since=abc', '/admin/stats/rates?since=-5',
                 '/admin/stats/rates?since=1e300', '/admin/stats/rates?since=nan', '/admin/queues/deepest?limit=0',
                 '/admin/queues/deepest?limit=101', '/admin/queues/deepest?limit=x',
                 '/admin/deployments?limit=-3', '/admin/deployments?module=' + 'm' * 3000,
                 '/admin/deployments?module=%01'):
        r = server.request('GET', path, auth=server.admin)
        assert r.status_code == 400, f'{path[:80]}: {r.status_code} {r.text[:300]}'
        body = r.json()
        assert body['is_ok'] is False and 'Traceback' not in r.text
    r = server.request('GET', '/admin/stats/services?search=' + 'x' * 3000, auth=server.admin)
    assert 'search' in r.json()['details']
    # Longer than a request line may be: refused before anything reads it.
    assert server.request('GET', '/admin/stats/services?search=' + 'x' * 10_000, auth=server.admin).status_code == 414
    for name in ('no.such.service', 'x' * 3000, '%C3%A9t%C3%A9', '..%2F..%2Fetc%2Fpasswd'):
        for what in ('source', 'usage'):
            r = server.request('GET', f'/admin/services/{name}/{what}', auth=server.admin)
            assert r.status_code == 404, f'{name[:80]} {what}: {r.status_code} {r.text[:300]}'
    r = server.request('GET', '/admin/services/no.such.service/source', auth=server.admin)
    assert 'no.such.service' in r.json()['details']
    for path in ('/admin/workers', '/admin/stats/rates', '/admin/stats/services', '/admin/stats/totals',
                 '/admin/queues/deepest', '/admin/services/insight.echo/source', '/admin/services/insight.echo/usage',
                 '/admin/deployments'):
        assert server.request('GET', path).status_code == 401, path
        assert server.request('GET', path, auth=('admin', 'wrong')).status_code == 401, path
        assert server.request('POST', path, auth=server.admin, json={}).status_code == 405, path


def test_a_clean_stop_leaves_the_registry(server_factory) -> None:
    first, admin = _start(server_factory)
    second = server_factory(extra_config=FAST, name='second').start()
    poll(lambda: len({w['server'] for w in admin('GET', '/admin/workers')['workers']}) == 2,
         message='both servers registered')
    second.stop()
    poll(lambda: len(admin('GET', '/admin/workers')['workers']) == 1, message='the stopped worker gone')
    assert requests.get(first.url + '/health', timeout=5).status_code == 200
