"""/metrics: Prometheus counters move with traffic; queue depths are read from the database."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from runtime.observability.metrics import Histogram
from tests.live_server import LiveServer, poll

FAST = '''
[pubsub]
wait_non_sock_err = 0.05
max_wait_secs = 0.2
poll_interval_secs = 0.05
'''

SERVICES = '''
from runtime import Service


class Flaky(Service):
    """Fails for data that says fail."""

    name = 'metrics.flaky'

    def handle(self):
        if self.request.payload.get('fail'):
            raise ValueError('asked to fail')
'''


def _samples(server: LiveServer) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    r = server.request('GET', '/metrics', auth=server.admin)
    assert r.status_code == 200 and r.headers['Content-Type'].startswith('text/plain')
    found = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            labels = frozenset((k, v) for k, v in sample.labels.items() if k != 'pid')
            found[(sample.name, labels)] = sample.value
    return found


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    """Sum of the samples of a name whose labels include the given ones."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def test_counters_move_after_traffic(server_factory) -> None:
    server = server_factory(extra_config=FAST)
    server.write_module('metrics_services.py', SERVICES)
    server.start()
    admin = server.admin
    before = _samples(server)
    assert _value(before, 'conduit_pubsub_published_total', topic='metrics.t') == 0

    def call(method: str, path: str, expected: int = 200, **kwargs: Any) -> Any:
        r = server.request(method, path, auth=admin, **kwargs)
        assert r.status_code == expected, r.text
        return r.json()

    call('POST', '/admin/topics', 201, json={'name': 'metrics.t'})
    sub = call('POST', '/admin/subscriptions', 201, json={
        'topic': 'metrics.t', 'kind': 'service', 'service': 'metrics.flaky',
        'options': {'max_attempts': 2, 'err_should_block': False}})['subscription']
    call('POST', '/admin/security', 201, json={'name': 'm', 'username': 'm', 'password': 'metrics-secret-pw'})
    call('PUT', '/admin/security/m/permissions', json={'sub': ['metrics.**']})
    pull = call('POST', '/admin/subscriptions', 201, json={'topic': 'metrics.t', 'kind': 'pull',
                                                          'security': 'm'})['subscription']
    for n in range(3):
        call('POST', '/admin/publish', json={'topic': 'metrics.t', 'data': {'n': n}})
    call('POST', '/admin/publish', json={'topic': 'metrics.t', 'data': {'fail': True}})
    poll(lambda: call('GET', f'/admin/queues/{sub["id"]}')['queue']['dead_letters'] == 1, message='dead letter')
    call('POST', '/admin/services/conduit.ping/invoke', json={})
    server.request('GET', '/no/such/channel')

    after = _samples(server)
    labels = {'topic': 'metrics.t', 'subscription': str(sub['id']), 'subscriber': 'metrics.flaky'}
    assert _value(after, 'conduit_pubsub_published_total', topic='metrics.t') == 4
    assert _value(after, 'conduit_pubsub_delivered_total', **labels) == 3
    assert _value(after, 'conduit_pubsub_failed_total', **labels) == 2  # max_attempts 2
    assert _value(after, 'conduit_pubsub_dead_lettered_total', reason='max_attempts', **labels) == 1
    assert _value(after, 'conduit_pubsub_queue_depth', subscription=str(pull['id']), kind='pull') == 4
    assert _value(after, 'conduit_pubsub_dead_letters', subscription=str(sub['id'])) == 1
    assert _value(after, 'conduit_http_requests_total', method='POST', route='/admin/publish', status='200') == 4
    assert _value(after, 'conduit_http_requests_total', route='channel', status='404') == 1
    assert _value(after, 'conduit_http_request_duration_seconds_count', method='POST', route='/admin/publish') == 4
    assert _value(after, 'conduit_invoke_duration_seconds_count', service='conduit.ping') >= 1
    assert _value(after, 'conduit_invoke_duration_seconds_count', service='metrics.flaky') == 5
    assert _value(after, 'conduit_invoke_duration_seconds_bucket', service='metrics.flaky', le='+Inf') == 5
    # No secret ever becomes a label.
    text = server.request('GET', '/metrics', auth=server.admin).text
    assert 'sk.' not in text and 'metrics-secret-pw' not in text


def test_histogram_buckets_are_cumulative() -> None:
    histogram = Histogram((0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 2.0):
        histogram.observe('svc', value)
    family = histogram.family('x_seconds', 'doc', ['service'])
    samples = {(s.name, s.labels.get('le')): s.value for s in family.samples}
    assert samples[('x_seconds_bucket', '0.1')] == 2  # 0.1 itself is "less than or equal"
    assert samples[('x_seconds_bucket', '1.0')] == 3
    assert samples[('x_seconds_bucket', '+Inf')] == 4
    assert samples[('x_seconds_count', None)] == 4
    assert abs(samples[('x_seconds_sum', None)] - 2.65) < 1e-9
