"""A service run by an ``Invoker`` alone: no runtime and no database, only the context it is given.

``invoke``, ``invoke_async``, ``patterns``, ``publish``, ``pubsub`` and ``config`` of a service all go
through the service's context, the invoker's ``ServiceContext``: what the tests give the invoker is all a
service can reach.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import gevent
import pytest

from runtime.errors import ConfigError
from runtime.service import Service
from runtime.service.context import CHANNEL_CALLBACK, ServiceContext
from runtime.service.invoke import Invoker
from runtime.service.store import ServiceStore
from runtime.spark import SparkService
from runtime.util.spawn import Spawner
from tests.recorder import Recorder

pytestmark = pytest.mark.unit


class FakePubSub:
    """The pub/sub API of one service, recording what it publishes."""

    def __init__(self, published: list[tuple[str, str, Any, dict[str, Any]]], service: Service) -> None:
        self._published = published
        self._service = service

    def publish(self, topic: str, data: Any = None, **kwargs: Any) -> str:
        self._published.append((self._service.name, topic, data, kwargs))
        return f'msg-{len(self._published)}'


class Caller(Service):
    name = 'ctx.caller'

    def handle(self) -> None:
        payload = self.request.payload or {}
        self.response.payload = {
            'greeting': self.config.get('greeting'),
            'answer': self.invoke('ctx.callee', {'x': payload.get('x', 1)}),
            'msg_id': self.publish('ctx.topic', {'from': self.name}, priority=7),
            'context': self._context,
        }


class Callee(Service):
    name = 'ctx.callee'
    input = ('x',)

    def handle(self) -> None:
        self.response.payload = {'doubled': self.request.input.x * 2, 'config': dict(self.config)}


class Fan(Service):
    name = 'ctx.fan'

    def handle(self) -> None:
        self.response.payload = self.patterns.parallel.invoke({'ctx.callee': {'x': 5}}, on_target='ctx.collect')


class Collect(Service):
    """Records (channel, payload) on 'collected' (bound per test with recorder.bind)."""

    name = 'ctx.collect'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('collected', (self.channel, self.request.payload))


class Spark(SparkService):
    name = 'ctx.spark'
    pipeline = 'nothing'

    def handle(self) -> None:
        self.response.payload = self.spark


class _Recorder:
    """Answers every method call with (its name, the method, the arguments)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, method: str) -> Any:
        return lambda *args: (self._name, method, args)


@pytest.fixture
def spawner() -> Iterator[Spawner]:
    spawner = Spawner()
    yield spawner
    spawner.stop(1.0)


@pytest.fixture
def published() -> list[tuple[str, str, Any, dict[str, Any]]]:
    return []


@pytest.fixture
def spawned() -> list[str]:
    return []


@pytest.fixture
def invoker(spawner: Spawner, spawned: list[str], published: list[tuple[str, str, Any, dict[str, Any]]],
            recorder: Recorder) -> Invoker:
    store = ServiceStore()
    for cls in (Caller, Callee, Fan, recorder.bind(Collect), Spark):
        store.register(cls)

    def spawn(func: Any, *args: Any, name: str = '', **kwargs: Any) -> gevent.Greenlet:
        spawned.append(name)
        return spawner.spawn(func, *args, name=name, **kwargs)

    config = {'ctx.caller': {'greeting': 'hello'}, 'ctx.callee': {'depth': 2}}
    return Invoker(store, spawn, pubsub=lambda svc: FakePubSub(published, svc), config=config)


def test_the_invoker_gives_every_service_its_context(invoker: Invoker) -> None:
    svc = invoker.run(Caller, {'x': 21})
    assert isinstance(invoker.context, ServiceContext)
    assert svc.response.payload['context'] is invoker.context
    assert not hasattr(svc, '_runtime')


def test_invoke_publish_and_config_go_through_the_context(invoker: Invoker, published: list[Any]) -> None:
    answer = invoker.invoke('ctx.caller', {'x': 21})
    assert answer['greeting'] == 'hello'
    assert answer['answer'] == {'doubled': 42, 'config': {'depth': 2}}
    assert answer['msg_id'] == 'msg-1'
    assert published == [('ctx.caller', 'ctx.topic', {'from': 'ctx.caller'}, {'priority': 7})]


def test_config_is_read_only_and_empty_for_a_service_without_a_table(invoker: Invoker, recorder: Recorder) -> None:
    svc = invoker.run(recorder.bind(Collect))
    assert dict(svc.config) == {}
    with pytest.raises(TypeError):
        invoker.run(Caller, {'x': 1}).config['greeting'] = 'changed'  # type: ignore[index]


def test_patterns_spawn_through_the_context(invoker: Invoker, spawned: list[str], recorder: Recorder) -> None:
    cid = invoker.invoke('ctx.fan')
    channel, result = recorder.wait_for('collected')[0]
    assert channel == CHANNEL_CALLBACK
    assert (result['cid'], result['target'], result['ok']) == (cid, 'ctx.callee', True)
    assert result['response'] == {'doubled': 10, 'config': {'depth': 2}}
    assert spawned[:2] == [f'patterns:{cid}', f'patterns:{cid}:ctx.callee']


def test_the_context_is_frozen(invoker: Invoker) -> None:
    with pytest.raises(AttributeError):
        invoker.context.config = {}  # type: ignore[misc]


def test_spark_jobs_come_from_the_context(spawner: Spawner) -> None:
    store = ServiceStore()
    store.register(Spark)
    manager, admin = _Recorder('manager'), _Recorder('admin')
    with_spark = Invoker(store, spawner.spawn, pubsub=lambda svc: None, config={}, spark=lambda: manager,
                         spark_admin=lambda: admin)
    jobs = with_spark.invoke('ctx.spark')
    # What a Spark service reads of the jobs comes from the cluster's admin; its wait, from this worker's manager.
    assert [jobs.get('j1'), jobs.jobs(status='failed'), jobs.log('j1', 5), jobs.kill('j1'), jobs.wait('j1', 2.0)] == [
        ('admin', 'get', ('j1', None)), ('admin', 'list', ('failed', None, 50, 0)), ('admin', 'log', ('j1', 5)),
        ('admin', 'kill', ('j1', 'killed on request')), ('manager', 'wait', ('j1', 2.0))]
    without = Invoker(store, gevent.spawn, pubsub=lambda svc: None, config={})
    with pytest.raises(ConfigError, match='no Spark jobs'):
        without.invoke('ctx.spark')
