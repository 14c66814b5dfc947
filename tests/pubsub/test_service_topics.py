"""A service's implicit topic and subscription, made on first use: once, however many publish at that moment."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import gevent
import pytest
from sqlalchemy import Connection, Engine, func, select
from sqlalchemy.exc import IntegrityError

from runtime.db.blocking import run_transaction
from runtime.db.models import Subscription
from runtime.errors import TopicNotFound
from runtime.pubsub import statements
from runtime.pubsub.registry import KIND_SERVICE, Registry, SubInfo, TopicInfo, service_topic_name
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
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


def _implicit_subscriptions(engine: Engine, service: str) -> list[int]:
    with engine.connect() as conn:
        return list(conn.execute(select(Subscription.id).where(Subscription.service == service,
                                                               Subscription.origin == 'service')).scalars())


def test_a_second_implicit_subscription_of_a_service_is_refused_by_the_database(
        db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime]) -> None:
    # Two workers (or servers) that both found the subscription missing could each insert one; the
    # in-process lock cannot stop that, the unique index does.
    (tmp_path / 'rt').mkdir()
    sink = _sink(0)
    rt = runtime_factory(sink, settings=make_settings(tmp_path / 'rt', db_url))
    rt.broker.publish(sink.name, {'n': 1})
    name = service_topic_name(sink.name)

    def another(conn: Connection) -> None:
        statements.create_subscription(conn, statements.load_topics(conn), SUBSCRIBER_KINDS, name, KIND_SERVICE,
                                       service=sink.name,
                                       origin='service')
    with pytest.raises(IntegrityError):
        run_transaction(rt.engine, another)
    # A subscription made through the API for the same service and topic is the user's own, and allowed.
    rt.broker.catalog.subscribe(name, KIND_SERVICE, service=sink.name)
    assert len(_implicit_subscriptions(rt.engine, sink.name)) == 1


def test_a_worker_that_loses_the_race_uses_the_winners_subscription(
        db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime],
        monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / 'rt').mkdir()
    sink = _sink(1)
    rt = runtime_factory(sink, settings=make_settings(tmp_path / 'rt', db_url))
    name = service_topic_name(sink.name)

    def winner(conn: Connection) -> None:
        # Another worker's transaction, committed without telling this one (no sync bump).
        statements.create_topic(conn, name, {'has_gd': True}, is_service_topic=True, origin='service')
        statements.create_subscription(conn, statements.load_topics(conn), SUBSCRIBER_KINDS, name, KIND_SERVICE,
                                       service=sink.name,
                                       origin='service')
    run_transaction(rt.engine, winner)
    [won] = _implicit_subscriptions(rt.engine, sink.name)
    # This worker's transaction read the subscriptions just before the winner committed.
    real_load = statements.load_registry
    calls = 0

    def stale(conn: Connection, settings: object, option_types: object) -> object:
        nonlocal calls
        calls += 1
        registry = real_load(conn, settings, option_types)  # type: ignore[arg-type]
        if calls > 1:
            return registry
        return Registry(list(registry.topics.values()),
                        [s for s in registry.subs.values() if s.service != sink.name])
    monkeypatch.setattr(statements, 'load_registry', stale)
    rt.broker.catalog.ensure_service_topic(sink.name)
    monkeypatch.undo()
    assert _implicit_subscriptions(rt.engine, sink.name) == [won]
    assert rt.broker.registry.service_subscription(sink.name).id == won  # type: ignore[union-attr]
    rt.broker.publish(sink.name, {'n': 2})


def test_a_service_found_by_its_topic_must_still_be_deployed(
        db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime]) -> None:
    # Publishing to a service whose topic is made takes one lookup; an undeployed service is no target.
    (tmp_path / 'rt').mkdir()
    sink = _sink(2)
    rt = runtime_factory(sink, settings=make_settings(tmp_path / 'rt', db_url))
    rt.broker.publish(sink.name, {'n': 1})
    assert rt.broker.resolve(sink.name).name == service_topic_name(sink.name)
    rt.hot_deployer.undeploy(sink.name)
    with pytest.raises(TopicNotFound):
        rt.broker.publish(sink.name, {'n': 2})
    # The topic by its own name is still a topic.
    assert rt.broker.resolve(service_topic_name(sink.name)).is_service_topic


def test_the_registry_knows_the_topic_of_each_service_with_its_subscription() -> None:
    made = TopicInfo(id=1, name=service_topic_name('shop.order'), is_service_topic=True)
    alone = TopicInfo(id=2, name=service_topic_name('shop.lonely'), is_service_topic=True)
    odd = TopicInfo(id=3, name=service_topic_name(' shop.odd'), is_service_topic=True)
    subs = [SubInfo(id=1, sub_key='sk.1', pattern=made.name, kind=KIND_SERVICE, service='shop.order'),
            SubInfo(id=2, sub_key='sk.2', pattern='shop.**', kind=KIND_SERVICE, service='shop.any'),
            SubInfo(id=3, sub_key='sk.3', pattern=odd.name, kind=KIND_SERVICE, service=' shop.odd')]
    registry = Registry([made, alone, odd], subs)
    assert registry.service_topic('shop.order') is made
    assert registry.service_topic('shop.lonely') is None  # a topic, but no implicit subscription
    assert registry.service_topic('shop.any') is None  # a subscription, but not to its own topic
    # Not a valid topic name: publishing by it is refused (InvalidTopicName), so it is not found here.
    assert registry.service_topic(' shop.odd') is None
