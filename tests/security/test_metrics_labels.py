"""/metrics under attack: no request adds a series, and a scrape does not stop the worker's hub.

Invented HTTP methods and paths used to become label values: 20,000 unauthenticated requests made
the exposition 48 MB, and formatting it froze the worker for seconds. Here 2,000 such requests go to
a real server and the HTTP series stay few, each label within its fixed set.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable

import gevent.monkey
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from runtime.observability import metrics as metrics_module
from runtime.observability.metrics import CHANNEL_ROUTE, OTHER_METHOD, STANDARD_METHODS
from runtime.testing import TestRuntime
from tests.live_server import LiveServer

#: Requests sent with random methods and paths.
REQUESTS = 2000

#: Most HTTP series the server may show afterwards: methods x routes x statuses actually reached.
MAX_SERIES = 100


def _token(rng: random.Random, length: int = 8) -> str:
    return ''.join(rng.choice(string.ascii_uppercase) for _ in range(length))


def test_random_methods_and_paths_add_no_series(target: LiveServer) -> None:
    rng = random.Random(20261123)
    # Paths that need no credentials: a wrong sign-in would count against this client's budget.
    paths: list[Callable[[], str]] = [
        lambda: '/health',
        lambda: '/api/sec/open',
        lambda: f'/api/sec/{_token(rng).lower()}',
        lambda: f'/{_token(rng).lower()}/{_token(rng, 4).lower()}',
        lambda: f'/health/{_token(rng).lower()}',
    ]
    methods = [*STANDARD_METHODS, 'PROPFIND', 'TRACE']
    with requests.Session() as session:
        for n in range(REQUESTS):
            # Mostly invented methods: uppercase tokens of 3 to 20 letters reach the app.
            method = 'X' + _token(rng, rng.randint(3, 12)) if n % 4 else rng.choice(methods)
            r = session.request(method, target.url + rng.choice(paths)(), json={} if n % 3 == 0 else None,
                                timeout=10)
            assert r.status_code < 500, (method, r.status_code, r.text)

    r = target.request('GET', '/metrics', auth=target.admin)
    assert r.status_code == 200, r.text
    series = [s for family in text_string_to_metric_families(r.text) for s in family.samples
              if s.name == 'conduit_http_requests_total']
    assert sum(s.value for s in series) >= REQUESTS
    assert len(series) <= MAX_SERIES, f'{len(series)} series of conduit_http_requests_total'
    assert {s.labels['method'] for s in series} <= STANDARD_METHODS | {OTHER_METHOD}
    assert sum(s.value for s in series if s.labels['method'] == OTHER_METHOD) >= REQUESTS // 2
    routes = {s.labels['route'] for s in series}
    assert CHANNEL_ROUTE in routes
    assert all(route == CHANNEL_ROUTE or route in ('/health', '/metrics') for route in routes), routes
    assert all(s.labels['status'].isdigit() for s in series)

    latency = {s.labels['method'] for family in text_string_to_metric_families(r.text) for s in family.samples
               if s.name.startswith('conduit_http_request_duration_seconds')}
    assert latency <= STANDARD_METHODS | {OTHER_METHOD}
    assert len(r.content) < 1_000_000


def test_a_scrape_is_formatted_off_the_hub(runtime_factory: Callable[..., TestRuntime],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    rt = runtime_factory()
    get_ident = gevent.monkey.get_original('_thread', 'get_ident')
    hub_thread = get_ident()
    formatted_in: list[int] = []
    generate_latest = metrics_module.generate_latest

    def spy(collector: object) -> bytes:
        formatted_in.append(get_ident())
        return generate_latest(collector)

    monkeypatch.setattr(metrics_module, 'generate_latest', spy)
    rt.metrics.http_requests[('GET', '/health', '200')] = 3
    text = rt.metrics.render().decode()
    assert formatted_in and formatted_in[0] != hub_thread
    assert 'conduit_http_requests_total{method="GET"' in text


def test_the_snapshot_is_a_copy(runtime_factory: Callable[..., TestRuntime]) -> None:
    rt = runtime_factory()
    rt.metrics.http_requests[('GET', '/health', '200')] = 1
    rt.metrics.http_latency.observe(('GET', '/health'), 0.001)
    snapshot = rt.metrics.snapshot()
    # Greenlets keep counting while a pool thread formats: the snapshot must not change under it.
    rt.metrics.http_requests[('POST', '/health', '405')] = 1
    rt.metrics.http_latency.observe(('GET', '/health'), 0.001)
    assert snapshot.http_requests == [(('GET', '/health', '200'), 1)]
    [(_key, series)] = snapshot.http_latency[1]
    assert sum(series[:-1]) == 1
