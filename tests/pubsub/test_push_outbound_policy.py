"""The outbound policy of REST push subscriptions, in process, on both backends.

A push_url may not target a loopback, link-local (cloud metadata), unspecified or multicast address,
nor this server's own admin API, unless ``[pubsub] push_allow_hosts`` lists the host; private ranges
are allowed. Checked when a subscription is made (the admin API answers 400 naming push_url and
the reason) and on every connection, against the address a name resolved to: a name that resolves
to 127.0.0.1 is refused at connect time, through the ordinary failure path, with nothing sent.
The receiver is a real HTTP server on loopback (tests.pubsub.test_push.Receiver).
"""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.config import Settings
from runtime.errors import ConfigError, PushUnreachable
from runtime.testing import TestRuntime, admin_client, make_settings, wait_until
from tests.pubsub.test_push import FAST, TIMEOUT, Attempts, Receiver

REFUSED = {
    'http://127.0.0.1:8080/hook': 'loopback',
    'http://127.8.9.10/hook': 'loopback',
    'http://[::1]:8080/hook': 'loopback',
    'http://[::ffff:127.0.0.1]/hook': 'loopback',
    'http://169.254.169.254/latest/meta-data/': 'link-local',
    'http://[fe80::1]/hook': 'link-local',
    'http://0.0.0.0:8080/hook': 'unspecified',
    'http://[::]/hook': 'unspecified',
    'http://224.0.0.1/hook': 'multicast',
    'http://localhost:8080/hook': 'loopback',
    'https://api.localhost/hook': 'loopback',
}
ADMIN = ['http://localhost:17010/admin/security', 'http://127.0.0.1/ADMIN/topics', 'http://[::1]/%61dmin/x',
         'http://127.0.0.1:17010/admin']


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


@pytest.fixture
def make_rt(db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime]) -> Callable[..., TestRuntime]:
    """A started runtime whose [pubsub] push_allow_hosts is the one given (the default: none)."""
    counter = itertools.count()

    def make(allow: str = '') -> TestRuntime:
        base = tmp_path / f'rt{next(counter)}'
        base.mkdir()
        settings: Settings = make_settings(base, db_url)
        for key, value in FAST.items():
            setattr(settings.pubsub, key, value)
        settings.pubsub.push_allow_hosts = allow
        return runtime_factory(settings=settings)

    return make


def test_refused_targets_at_creation_and_private_ranges_allowed(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('push.policy')
    client = admin_client(rt)
    for url, what in REFUSED.items():
        with pytest.raises(ConfigError) as refused:
            rt.catalog.subscribe('push.policy', 'rest_push', push_url=url)
        assert 'push_url' in str(refused.value) and what in str(refused.value), (url, str(refused.value))
        assert 'push_allow_hosts' in str(refused.value)
        # The admin API: 400 naming the field and the reason.
        answer = client.simulate_post('/admin/subscriptions', json={'topic': 'push.policy', 'kind': 'rest_push',
                                                                    'push_url': url})
        assert answer.status_code == 400, (url, answer.text)
        assert 'push_url' in answer.json['details'] and what in answer.json['details']
    for url in ADMIN:
        with pytest.raises(ConfigError, match="this server's admin API"):
            rt.catalog.subscribe('push.policy', 'rest_push', push_url=url)
    # Private ranges and ordinary names are normal for integrations (no traffic is sent: paused at once).
    for url in ('http://10.1.2.3:8080/hook', 'http://192.168.1.20/hook', 'http://172.16.0.9/hook',
                'http://[fd00::5]/hook', 'https://hooks.example.com/in'):
        sub = rt.catalog.subscribe('push.policy', 'rest_push', push_url=url)
        rt.catalog.set_active(sub.sub_key, False)
        rt.catalog.unsubscribe(sub.sub_key)


def test_allowed_hosts_are_allowed_but_never_this_servers_admin_api(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt('127.0.0.0/8, ::1, localhost, 169.254.169.254')
    rt.catalog.create_topic('push.allowed')
    for url in ('http://127.0.0.1:8080/hook', 'http://[::1]:8080/hook', 'http://localhost/hook',
                'http://169.254.169.254/x'):
        rt.catalog.unsubscribe(rt.catalog.subscribe('push.allowed', 'rest_push', push_url=url).sub_key)
    with pytest.raises(ConfigError, match='push_url'):
        rt.catalog.subscribe('push.allowed', 'rest_push', push_url='http://[fe80::1]/hook')
    for url in ADMIN:
        with pytest.raises(ConfigError, match="this server's admin API"):
            rt.catalog.subscribe('push.allowed', 'rest_push', push_url=url)


#: A name the tests' resolver answers with 127.0.0.1: a public-looking name rebound to loopback after creation.
REBOUND = 'hooks.rebound.test'


@pytest.fixture
def rebound(monkeypatch: pytest.MonkeyPatch) -> str:
    """REBOUND resolving to 127.0.0.1, every other name as the system resolves it (a DNS rebinding, in-process)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real('127.0.0.1' if host == REBOUND else host, port, *args, **kwargs)

    # Before, these tests skipped on machines where no name but localhost resolved to loopback.
    monkeypatch.setattr(socket, 'getaddrinfo', getaddrinfo)
    return REBOUND


def test_a_name_resolving_to_loopback_is_refused_when_connecting(make_rt: Callable[..., TestRuntime],
                                                                 receiver: Receiver, rebound: str) -> None:
    name = rebound
    rt = make_rt()
    attempts = Attempts()
    rt.broker.hooks.add(attempts)
    receiver.start()
    rt.catalog.create_topic('push.rebound')
    # The name passes at creation (names are resolved when connecting): as if it were rebound later.
    sub = rt.catalog.subscribe('push.rebound', 'rest_push', push_url=f'http://{name}:{receiver.port}/hook')
    rt.broker.publish('push.rebound', {'n': 1})
    wait_until(lambda: len(attempts.seen) >= 2, TIMEOUT, message='two refused attempts')
    for a in attempts.seen[:2]:
        assert not a.ok and isinstance(a.error, PushUnreachable), repr(a.error)
        assert 'refused by the outbound policy' in str(a.error) and '127.0.0.1' in str(a.error), str(a.error)
        assert 'push_allow_hosts' in str(a.error)
    assert receiver.requests == []  # nothing was sent
    rt.catalog.unsubscribe(sub.sub_key)


def test_a_name_resolving_to_loopback_is_delivered_to_when_allowed(make_rt: Callable[..., TestRuntime],
                                                                   receiver: Receiver, rebound: str) -> None:
    name = rebound
    rt = make_rt('127.0.0.0/8')
    receiver.start()
    rt.catalog.create_topic('push.local')
    sub = rt.catalog.subscribe('push.local', 'rest_push', push_url=f'http://{name}:{receiver.port}/hook')
    rt.broker.publish('push.local', {'n': 2})
    wait_until(lambda: receiver.bodies(), TIMEOUT, message='the delivery')
    body: Any = receiver.bodies()[0]
    assert body['data'] == {'n': 2}
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')
