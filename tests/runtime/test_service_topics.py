"""A service's implicit topic and subscription, made on first use: once, however many publish at that moment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gevent
from sqlalchemy import func, select

from runtime.db.models import Subscription
from runtime.service import Service
from runtime.testing import TestRuntime, make_settings


def _sink(n: int) -> type[Service]:
    return type(f'Sink{n}', (Service,), {'name': f'first.use.{n}', 'handle': lambda self: None,
                                         '__doc__': 'A no-op subscriber.'})


def test_concurrent_first_publications_to_a_service_make_one_subscription(
        db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime]) -> None:
    # Before, two publishers that both found the topic missing each made a subscription (about one service
    # in ten on PostgreSQL), and every message to that service was delivered twice from then on.
    (tmp_path / 'rt').mkdir()
    sinks = [_sink(n) for n in range(12)]
    rt = runtime_factory(*sinks, settings=make_settings(tmp_path / 'rt', db_url))
    for sink in sinks:
        gevent.joinall([gevent.spawn(rt.broker.publish, sink.name, {'n': n}) for n in range(10)], raise_error=True)
    with rt.engine.connect() as conn:
        counts = dict(conn.execute(select(Subscription.service, func.count()).group_by(Subscription.service)).all())
    assert counts == {sink.name: 1 for sink in sinks}
