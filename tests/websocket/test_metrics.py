"""The WebSocket metrics and the expired-subscriptions counter, in process: what /metrics shows of them.

The connections report through ``WebSocketMetrics`` (runtime.observability.websocket_metrics), which ``Metrics``
implements; the frames counter's action label stays within its fixed set whatever a client sends;
the attached-subscriptions gauge asks its callable at scrape time; the sweeper's
``on_subscription_expired`` event reaches the counter through the broker's observers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime.observability.metrics import Metrics
from runtime.observability.websocket_metrics import (
    FRAME_ACTIONS,
    INVALID_ACTION,
    NoWebSocketMetrics,
    WebSocketMetrics,
    frame_action,
)
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.subscribers.websocket import KIND_WEBSOCKET
from runtime.testing import TestRuntime


def _samples(metrics: Metrics) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the exposition, by name and labels (pid left out)."""
    found = {}
    for family in text_string_to_metric_families(generate_latest(metrics.snapshot()).decode()):
        for sample in family.samples:
            found[(sample.name, frozenset((k, v) for k, v in sample.labels.items() if k != 'pid'))] = sample.value
    return found


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)


def _series(samples: dict[Any, float], name: str) -> list[dict[str, str]]:
    return [dict(ls) for (n, ls) in samples if n == name]


def test_connections_frames_and_attached_subscriptions(runtime_factory: Callable[..., TestRuntime]) -> None:
    rt = runtime_factory()
    attached = [0]
    metrics = Metrics(rt.engine, lambda: rt.broker.registry, websocket_attached=lambda: attached[0])
    reporter: WebSocketMetrics = metrics  # what the HTTP side is given

    before = _samples(metrics)
    assert _value(before, 'conduit_websocket_connections') == 0
    assert _value(before, 'conduit_websocket_subscriptions_attached') == 0
    # Every known action is a series from the start, at 0: rate() works before the first frame.
    assert {s['action'] for s in _series(before, 'conduit_websocket_frames_total')} == FRAME_ACTIONS

    for _ in range(3):
        reporter.websocket_opened()
    reporter.websocket_closed()
    for action in ('hello', 'subscribe', 'ack', 'ack', 'ping', 'publish', 'unsubscribe'):
        reporter.websocket_frame(action)
    attached[0] = 4
    after = _samples(metrics)
    assert _value(after, 'conduit_websocket_connections') == 2
    assert _value(after, 'conduit_websocket_subscriptions_attached') == 4
    assert _value(after, 'conduit_websocket_frames_total', action='ack') == 2
    assert _value(after, 'conduit_websocket_frames_total', action='hello') == 1
    assert _value(after, 'conduit_websocket_frames_total', action=INVALID_ACTION) == 0


def test_unknown_actions_add_no_series(runtime_factory: Callable[..., TestRuntime]) -> None:
    rt = runtime_factory()
    metrics = Metrics(rt.engine, lambda: rt.broker.registry)
    hostile: list[Any] = [f'action-{n}' for n in range(500)] + ['', 'HELLO', 'message', 'pong', None, 7, ['ack']]
    for action in hostile:
        metrics.websocket_frame(action)
    samples = _samples(metrics)
    series = _series(samples, 'conduit_websocket_frames_total')
    assert {s['action'] for s in series} == FRAME_ACTIONS and len(series) == len(FRAME_ACTIONS)
    assert _value(samples, 'conduit_websocket_frames_total', action=INVALID_ACTION) == len(hostile)
    assert frame_action('ack') == 'ack' and frame_action('Ack') == INVALID_ACTION
    # Without a callable the attached gauge is 0, not missing.
    assert _value(samples, 'conduit_websocket_subscriptions_attached') == 0


def test_expired_subscriptions_are_counted_through_the_observers(runtime_factory: Callable[..., TestRuntime]) -> None:
    rt = runtime_factory()
    sub = SubInfo(id=41, sub_key='sk.secret-never-a-label', pattern='orders.**', kind=KIND_WEBSOCKET,
                  security='browser')
    # As the sweeper announces it: through the broker's observers, which include the runtime's metrics.
    rt.broker.observers.emit('on_subscription_expired', sub)
    rt.broker.observers.emit('on_subscription_expired', sub)
    samples = _samples(rt.metrics)
    assert _value(samples, 'conduit_pubsub_subscriptions_expired_total', kind=KIND_WEBSOCKET) == 2
    # Labelled by kind only: a deleted subscription's id or key would be a new series per deletion.
    assert _series(samples, 'conduit_pubsub_subscriptions_expired_total') == [{'kind': KIND_WEBSOCKET}]
    assert 'sk.secret' not in generate_latest(rt.metrics.snapshot()).decode()


def test_no_websocket_metrics_is_a_websocket_metrics() -> None:
    quiet: WebSocketMetrics = NoWebSocketMetrics()
    quiet.websocket_opened()
    quiet.websocket_frame('ack')
    quiet.websocket_closed()
