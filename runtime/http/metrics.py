"""The HTTP side of the metrics: the falcon middleware that counts requests, and ``GET /metrics``.

The counters themselves live in ``runtime.observability.metrics`` (no falcon there); this module
feeds ``conduit_http_requests_total`` and ``conduit_http_request_duration_seconds`` and serves the
server's exposition.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

import falcon
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from runtime.observability.metrics import CHANNEL_ROUTE, OTHER_METHOD, OTHER_STATUS, STANDARD_METHODS, Metrics


class HttpMetrics:
    """Falcon middleware: counts requests and times them, by method, route template and status."""

    def __init__(self, metrics: Metrics) -> None:
        self._requests = metrics.http_requests
        self._latency = metrics.http_latency

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        req.context.metrics_started = perf_counter()

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         req_succeeded: bool) -> None:
        started = req.context.get('metrics_started')
        if started is None:
            return
        method = req.method if req.method in STANDARD_METHODS else OTHER_METHOD
        # Only the router sets uri_template, to a template an add_route call registered: bounded.
        route = req.uri_template or CHANNEL_ROUTE
        key = (method, route, _status_label(resp))
        self._requests[key] = self._requests.get(key, 0) + 1
        self._latency.observe((method, route), perf_counter() - started)


def _status_label(resp: falcon.Response) -> str:
    """The response's status code as a label: a number from 100 to 599, else OTHER_STATUS."""
    try:
        code = int(resp.status_code)
    except (TypeError, ValueError):
        return OTHER_STATUS
    return str(code) if 100 <= code <= 599 else OTHER_STATUS


class MetricsResource:
    """GET /metrics: the server's metrics (its workers added up) in the Prometheus text format."""

    openapi = {'get': {
        'summary': "The server's metrics, its workers added up, in the Prometheus text format", 'tags': ['runtime'],
        'responses': {'200': {'description': 'Prometheus text exposition',
                              'content': {'text/plain': {'schema': {'type': 'string'}}}}}}}

    def __init__(self, metrics: Metrics, auth: str) -> None:
        self._metrics = metrics
        #: Who may read it (runtime.http.auth): the admin unless http.metrics_public, since it names
        #: every topic, security definition and subscriber.
        self.auth = auth

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = CONTENT_TYPE_LATEST
        resp.data = self._metrics.render()
