"""Long-polling pulls: ``POST /pubsub/messages/get`` with ``wait`` answers as soon as a message arrives.

Against a real server per backend (one worker), shared by the tests: each test has its own topic
and definitions (``Names``), so that no pull of one test reads another's queue. A message published
through the same worker wakes the waiting pull directly; one published by another process (an
in-process runtime on the server's database) wakes it through LISTEN/NOTIFY on PostgreSQL and the
queue poll on SQLite.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import pytest
import requests

from runtime.http.pubsub_rest import RECHECK_SECS
from runtime.testing import TestRuntime, make_settings
from tests.live_server import LiveServer


class Names:
    """One test's topic and the credentials of its publisher and subscriber."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:8]
        self.topic = f'lp{tag}.orders'
        self.pub_def, self.sub_def = f'lp.pub.{tag}', f'lp.sub.{tag}'
        self.publisher, self.subscriber = (f'lp-pub-{tag}', 'lp-pub-pw'), (f'lp-sub-{tag}', 'lp-sub-pw')

    def objects(self) -> str:
        """The object file that makes them."""
        return f'''
security:
  - name: {self.pub_def}
    username: {self.publisher[0]}
    password: {self.publisher[1]}
  - name: {self.sub_def}
    username: {self.subscriber[0]}
    password: {self.subscriber[1]}
pubsub_topic:
  - name: {self.topic}
pubsub_permission:
  - security: {self.pub_def}
    pub: [{self.topic}]
  - security: {self.sub_def}
    sub: [{self.topic}]
'''


#: Long polls of at most 10 s, so that a test of the cap is cheap.
CONFIG = '''
[pubsub]
max_pull_wait_secs = 10
'''


@pytest.fixture(scope='module')
def shared(module_server_factory: Callable[..., LiveServer],
           request: pytest.FixtureRequest) -> tuple[LiveServer, list[Names]]:
    """The module's server, started with the objects of every test, and the names no test has taken yet."""
    server = module_server_factory(extra_config=CONFIG)
    # Written before the start: one object file per test of this backend that takes names.
    backend = request.getfixturevalue('module_db_backend')
    ready = [Names() for item in request.session.items
             if item.module is request.module and 'names' in item.fixturenames
             and getattr(item, 'callspec', None) is not None
             and item.callspec.params.get('module_db_backend') == backend]
    for n in ready:
        server.write_objects(f'objects-{n.topic}.yaml', n.objects())
    return server.start(), ready


@pytest.fixture
def server(shared: tuple[LiveServer, list[Names]]) -> LiveServer:
    """The shared server."""
    return shared[0]


@pytest.fixture
def names(shared: tuple[LiveServer, list[Names]]) -> Names:
    """This test's topic and definitions, subscribed: the subscriber has a pull subscription to the topic."""
    server, ready = shared
    n = ready.pop()
    r = post(server, n.subscriber, f'/pubsub/subscribe/topic/{n.topic}')
    assert r.status_code == 200, r.text
    return n


def post(server: LiveServer, auth: tuple[str, str], path: str, body: Any = None, raw: str | None = None,
         timeout: float = 30) -> requests.Response:
    """A JSON POST as a non-Python client sends it."""
    return requests.post(server.url + path, json=body if raw is None else None, data=raw, auth=auth,
                         timeout=timeout, headers={'Content-Type': 'application/json'})


def pull(server: LiveServer, n: Names, **body: Any) -> dict[str, Any]:
    """A pull's 200 answer."""
    r = post(server, n.subscriber, '/pubsub/messages/get', body)
    assert r.status_code == 200, r.text
    return r.json()


def publish(server: LiveServer, n: Names, data: Any) -> str:
    """Publish through the server; the msg_id."""
    r = post(server, n.publisher, f'/pubsub/topic/{n.topic}', {'data': data})
    assert r.status_code == 200, r.text
    return r.json()['msg_id']


def waiting_pull(server: LiveServer, n: Names, **body: Any) -> gevent.Greenlet:
    """A pull sent now in a greenlet of its own; once it is waiting at the server (it has sent its request)."""
    started = time.monotonic()
    greenlet = gevent.spawn(lambda: (pull(server, n, **body), time.monotonic() - started))
    gevent.sleep(1.0)  # the request reaches the server and finds the queue empty
    assert not greenlet.ready(), f'the pull answered at once: {greenlet.value}'
    return greenlet


def test_a_waiting_pull_answers_as_soon_as_a_message_is_published(server: LiveServer, names: Names) -> None:
    waiting = waiting_pull(server, names, wait=10)
    published_at = time.monotonic()
    msg_id = publish(server, names, {'order': 1})
    answer, _ = waiting.get(timeout=15)
    # Woken by the commit, not by the look it would take anyway RECHECK_SECS later.
    assert time.monotonic() - published_at < RECHECK_SECS
    assert answer['message_count'] == 1 and answer['messages'][0]['meta']['msg_id'] == msg_id
    assert answer['messages'][0]['data'] == {'order': 1}
    assert pull(server, names)['message_count'] == 0  # auto ack: handed over once


def test_a_message_another_process_publishes_wakes_the_waiting_pull(
        server: LiveServer, names: Names, runtime_factory: Callable[..., TestRuntime], tmp_path: Path) -> None:
    other = runtime_factory(settings=make_settings(tmp_path / 'other', server.db_url))
    # Started after the subscription was made: its registry and permissions (from the database) have it.
    waiting = waiting_pull(server, names, wait=10, max_messages=5)
    published_at = time.monotonic()
    msg_id = other.broker.publish(names.topic, {'from': 'elsewhere'})
    answer, _ = waiting.get(timeout=15)
    assert time.monotonic() - published_at < RECHECK_SECS
    assert [m['meta']['msg_id'] for m in answer['messages']] == [str(msg_id)]
    assert answer['messages'][0]['data'] == {'from': 'elsewhere'}


def test_a_pull_with_nothing_to_take_answers_empty_once_its_wait_is_over(server: LiveServer, names: Names) -> None:
    started = time.monotonic()
    answer = pull(server, names, wait=1.5)
    assert time.monotonic() - started >= 1.5
    assert answer['is_ok'] is True and answer['message_count'] == 0 and answer['messages'] == []
    # Without wait (Zato's pull) the answer comes at once, empty.
    assert pull(server, names)['message_count'] == 0


def test_a_manual_ack_pull_waits_too_and_its_lease_holds(server: LiveServer, names: Names) -> None:
    waiting = waiting_pull(server, names, wait=10, ack='manual', ack_deadline=30, max_messages=5)
    publish(server, names, 'leased')
    answer, _ = waiting.get(timeout=15)
    [message] = answer['messages']
    assert message['data'] == 'leased' and message['meta']['ack_id']
    # Leased: another waiting pull does not get it, and ends empty.
    assert pull(server, names, wait=1, ack='manual')['message_count'] == 0
    r = post(server, names.subscriber, '/pubsub/messages/ack', {'ack_ids': [message['meta']['ack_id']]})
    assert r.status_code == 200 and r.json()['acked'] == 1, r.text


def test_two_waiting_pulls_of_one_subscriber_share_a_message_once(server: LiveServer, names: Names) -> None:
    first = waiting_pull(server, names, wait=4, max_messages=5)
    second = waiting_pull(server, names, wait=4, max_messages=5)
    msg_id = publish(server, names, 'once')
    answers = [g.get(timeout=15)[0] for g in (first, second)]
    handed = [m['meta']['msg_id'] for a in answers for m in a['messages']]
    assert handed == [msg_id]


def test_a_waiting_pull_takes_what_was_queued_before_it_looked(server: LiveServer, names: Names) -> None:
    msg_id = publish(server, names, 'already there')
    started = time.monotonic()
    answer = pull(server, names, wait=10, max_messages=5)
    assert time.monotonic() - started < RECHECK_SECS  # no wait at all: it was there
    assert [m['meta']['msg_id'] for m in answer['messages']] == [msg_id]


def test_a_wait_that_is_not_seconds_within_the_cap_is_refused_naming_it(server: LiveServer, names: Names) -> None:
    for wait in (-1, 'soon', True, [1], {'secs': 1}, 10.5, 1e308):
        r = post(server, names.subscriber, '/pubsub/messages/get', {'wait': wait})
        assert r.status_code == 400, (wait, r.text)
        assert "'wait'" in r.json()['details'], (wait, r.text)
    # Not one of JSON's numbers at all: refused by the parser, not a 500.
    r = post(server, names.subscriber, '/pubsub/messages/get', raw='{"wait": NaN}')
    assert r.status_code == 400, r.text
    # A message published meanwhile is still there for a pull that asks properly.
    msg_id = publish(server, names, 'kept')
    assert [m['meta']['msg_id'] for m in pull(server, names, wait=0, max_messages=5)['messages']] == [msg_id]


def test_a_caller_without_credentials_or_subscription_never_waits(server: LiveServer, names: Names) -> None:
    started = time.monotonic()
    for path in ('/pubsub/messages/get', '//pubsub/messages/get', '/pubsub/%2Fmessages/get'):
        r = requests.post(server.url + path, json={'wait': 10}, timeout=30)
        assert r.status_code in (401, 404), (path, r.status_code, r.text)
        assert 'Traceback' not in r.text
    wrong = post(server, (names.subscriber[0], 'not-the-password'), '/pubsub/messages/get', {'wait': 10})
    assert wrong.status_code == 401, wrong.text
    # Signed in, but no pull subscription: refused before any wait.
    nobody = post(server, names.publisher, '/pubsub/messages/get', {'wait': 10})
    assert nobody.status_code == 401 and nobody.json()['details'] == 'No subscription found for user', nobody.text
    assert time.monotonic() - started < 10  # none of them waited out its wait
