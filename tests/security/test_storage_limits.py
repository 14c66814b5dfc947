"""Storage limits and data at rest: queue depths, the overflow log's cap, file modes, ``${VAR}`` references.

Broker behaviour is proven in-process on both backends (``db_url``); a real server is used where the
HTTP answer matters (503 for a full queue, 400 from the admin API): the module-wide ``target`` of the
conftest, on SQLite. Its clean-log check holds for these answers too: the HTTP layer logs a refused
publication at WARNING, not ERROR.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import pytest
from sqlalchemy import func, insert, select

from runtime.db.blocking import run_transaction
from runtime.db.engine import make_engine
from runtime.db.models import Message, Subscription
from runtime.errors import ConfigError, OverflowLogFull, QueueFull, TopicFull
from runtime.pubsub import limits, topic_admin
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.subscribers.pull import get_messages
from runtime.security import secret_refs
from runtime.security.admin_credentials import admin_password
from runtime.service import Service
from runtime.spark.submit import SparkSubmitter, Submission
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.live_server import LiveServer
from tests.pubsub.test_push import Receiver
from tests.security.conftest import PASSWORD, USER

TIMEOUT = 30  # how long a condition may take under load; met conditions return at once

#: Broker settings of the in-process runtimes: quick polling and lease renewal.
FAST = {'poll_interval_secs': 0.02, 'lease_renew_secs': 0.1, 'wait_non_sock_err': 0.05, 'max_wait_secs': 0.5}

#: What a variable outside the allowed prefix holds in these tests: it must never leave the server.
LEAKED_VALUE = 'not-for-your-eyes-42'


class Sink(Service):
    """A subscriber that takes every message."""

    name = 'lim.sink'

    def handle(self) -> None:
        pass


@pytest.fixture
def make_rt(db_url: str, tmp_path: Path,
            runtime_factory: Callable[..., TestRuntime]) -> Iterator[Callable[..., TestRuntime]]:
    """A started runtime on the database under test; pub/sub settings as keyword arguments."""
    counter = itertools.count()

    def make(*services: type[Service], **pubsub: Any) -> TestRuntime:
        base = tmp_path / f'rt{next(counter)}'
        base.mkdir()
        settings = make_settings(base, db_url)
        for key, value in {**FAST, **pubsub}.items():
            assert hasattr(settings.pubsub, key), key
            setattr(settings.pubsub, key, value)
        return runtime_factory(*services, settings=settings)

    yield make


def _idle_and_busy(rt: TestRuntime, topic: str) -> tuple[SubInfo, SubInfo]:
    """Two pull subscriptions: one that never reads, one that is read after each publication."""
    return (rt.catalog.subscribe(topic, 'pull', service='lim.idle'),
            rt.catalog.subscribe(topic, 'pull', service='lim.busy'))


def _stored_messages(rt: TestRuntime) -> int:
    return run_transaction(rt.engine, lambda c: c.execute(select(func.count()).select_from(Message)).scalar_one(),
                           write=False)


def _overflow_path(rt: TestRuntime, file_name: str) -> Path:
    return rt.settings.path(rt.settings.pubsub.overflow_dir) / file_name


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, set explicitly: files would be 0644 and directories 0755 by default."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# Per-queue depth limits


def test_a_full_queue_rejects_the_publication_for_everybody(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('lim.reject', max_depth_gd=5, on_max_depth='reject')
    idle, busy = _idle_and_busy(rt, 'lim.reject')
    for n in range(5):
        rt.broker.publish('lim.reject', {'n': n})
        assert len(get_messages(rt.broker, busy.sub_key)) == 1

    with pytest.raises(QueueFull) as info:
        rt.broker.publish('lim.reject', {'n': 5})
    assert isinstance(info.value, TopicFull) and info.value.http_status == 503
    assert info.value.name == 'lim.reject' and info.value.depth == 5
    assert idle.sub_key not in str(info.value) and 'lim.idle' not in str(info.value)
    # Nothing stored for anybody: the busy subscriber, with room to spare, did not get it either.
    assert rt.catalog.queue_depth(idle.sub_key) == 5
    assert rt.catalog.queue_depth(busy.sub_key) == 0
    assert _stored_messages(rt) == 5
    assert not _overflow_path(rt, 'lim.reject.jsonl').exists()


def test_past_a_full_queue_its_copy_goes_to_the_overflow_log_and_the_others_get_it(
        make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('lim.overflow', max_depth_gd=3)  # on_max_depth: overflow (the default)
    idle, busy = _idle_and_busy(rt, 'lim.overflow')
    first = []
    for n in range(3):
        first.append(rt.broker.publish('lim.overflow', {'n': n}))
        assert [m['msg_id'] for m in get_messages(rt.broker, busy.sub_key)] == first[-1:]
    assert not any(msg_id.overflowed for msg_id in first)

    late = rt.broker.publish('lim.overflow', {'n': 3})
    assert late.overflowed  # the publisher is told
    assert [m['msg_id'] for m in get_messages(rt.broker, busy.sub_key)] == [late]
    assert [m['msg_id'] for m in get_messages(rt.broker, idle.sub_key)] == first

    path = _overflow_path(rt, 'lim.overflow.jsonl')
    [line] = [json.loads(text) for text in path.read_text(encoding='utf-8').splitlines()]
    assert (line['msg_id'], line['sub_ids'], json.loads(line['data'])) == (late, [idle.id], {'n': 3})
    assert idle.sub_key not in path.read_text(encoding='utf-8')


def test_concurrent_publishers_of_one_worker_never_pass_the_limit(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('lim.race', max_depth_gd=5, on_max_depth='reject')
    idle = rt.catalog.subscribe('lim.race', 'pull', service='lim.idle')

    def publish(n: int) -> bool:
        try:
            rt.broker.publish('lim.race', {'n': n})
        except QueueFull:
            return False
        return True

    greenlets = [gevent.spawn(publish, n) for n in range(40)]
    gevent.joinall(greenlets, timeout=TIMEOUT, raise_error=True)
    assert sum(g.value for g in greenlets) == 5
    assert rt.catalog.queue_depth(idle.sub_key) == 5


def test_service_queues_keep_every_message_past_the_limit(make_rt: Callable[..., TestRuntime]) -> None:
    # A message published to a service must survive until processed: its queue is drained by the
    # runtime itself, so the limit (meant for clients that may never read) does not apply to it.
    rt = make_rt(Sink)
    topic = rt.catalog.ensure_service_topic('lim.sink')
    sub = rt.broker.registry.service_subscription('lim.sink')
    assert sub is not None
    rt.catalog.set_active(sub.sub_key, False)  # a service that does not keep up: its queue grows
    run_transaction(rt.engine, lambda c: topic_admin.update_topic(c, topic.id, {'max_depth_gd': 3,
                                                                               'on_max_depth': 'reject'}))
    rt.broker.reload()
    for n in range(6):
        assert not rt.broker.publish('lim.sink', {'n': n}).overflowed
    assert rt.catalog.queue_depth(sub.sub_key) == 6


def test_a_drained_queue_takes_publications_again(make_rt: Callable[..., TestRuntime],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, 'FULL_RECHECK_SECS', 0.0)  # read a full queue's depth again at once
    rt = make_rt()
    rt.catalog.create_topic('lim.drained', max_depth_gd=2, on_max_depth='reject')
    sub = rt.catalog.subscribe('lim.drained', 'pull', service='lim.reader')
    rt.broker.publish('lim.drained', 1)
    rt.broker.publish('lim.drained', 2)
    with pytest.raises(QueueFull):
        rt.broker.publish('lim.drained', 3)
    assert len(get_messages(rt.broker, sub.sub_key)) == 2
    rt.broker.publish('lim.drained', 4)
    assert rt.catalog.queue_depth(sub.sub_key) == 1


def test_another_workers_publications_count_towards_the_limit(make_rt: Callable[..., TestRuntime]) -> None:
    first = make_rt()
    first.catalog.create_topic('lim.shared', max_depth_gd=3, on_max_depth='reject')
    sub = first.catalog.subscribe('lim.shared', 'pull', service='lim.idle')
    for n in range(3):
        first.broker.publish('lim.shared', n)
    second = make_rt()  # another worker on the same database: it reads the depth before it publishes
    with pytest.raises(QueueFull):
        second.broker.publish('lim.shared', 3)
    assert first.catalog.queue_depth(sub.sub_key) == 3


# The overflow log


def test_the_overflow_log_has_a_size_cap(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt(max_overflow_bytes=2000)
    rt.catalog.create_topic('lim.cap', max_depth_gd=0)  # every publication goes to the overflow log
    logged = []
    with pytest.raises(OverflowLogFull) as info:
        for n in range(100):
            logged.append(rt.broker.publish('lim.cap', 'x' * 300 + str(n)))
    assert info.value.http_status == 503 and isinstance(info.value, TopicFull)
    assert 3 <= len(logged) < 10 and all(msg_id.overflowed for msg_id in logged)
    path = _overflow_path(rt, 'lim.cap.jsonl')
    size = path.stat().st_size
    assert 0 < size <= 2000
    with pytest.raises(OverflowLogFull):
        rt.broker.publish('lim.cap', 'y' * 300)
    assert path.stat().st_size == size
    assert [json.loads(line)['msg_id'] for line in path.read_text(encoding='utf-8').splitlines()] == logged

    # A queue's overflowed copy meets the same cap, and then nobody gets the publication.
    rt.catalog.create_topic('lim.capq', max_depth_gd=1)
    idle, busy = _idle_and_busy(rt, 'lim.capq')
    rt.broker.publish('lim.capq', 'first')
    with pytest.raises(OverflowLogFull):
        for _ in range(100):
            rt.broker.publish('lim.capq', 'z' * 300)
    depth = rt.catalog.queue_depth(busy.sub_key)
    with pytest.raises(OverflowLogFull):
        rt.broker.publish('lim.capq', 'refused')
    assert rt.catalog.queue_depth(busy.sub_key) == depth
    assert rt.catalog.queue_depth(idle.sub_key) == 1
    assert _overflow_path(rt, 'lim.capq.jsonl').stat().st_size <= 2000


# File modes


def test_data_files_and_directories_are_owner_only(umask_022: None, tmp_path: Path,
                                                   runtime_factory: Callable[..., TestRuntime]) -> None:
    base = tmp_path / 'project'
    base.mkdir()
    settings = make_settings(base, f'sqlite:///{base / "data" / "db" / "conduit.db"}')
    settings.admin.password = ''
    settings.admin.password_file = 'secrets/admin.password'
    settings.pubsub.poll_interval_secs = 0.02
    rt = runtime_factory(Sink, settings=settings)

    # The database, its directories, and the WAL files SQLite made beside it.
    db = base / 'data' / 'db' / 'conduit.db'
    rt.catalog.create_topic('lim.files', max_depth_gd=0)
    for path in (db, db.with_name('conduit.db-wal'), db.with_name('conduit.db-shm')):
        assert path.exists() and _mode(path) == 0o600, path
    assert _mode(base / 'data') == _mode(base / 'data' / 'db') == 0o700

    # The overflow log.
    assert rt.broker.publish('lim.files', {'secret': 'data'}).overflowed
    overflow = base / 'var' / 'overflow'
    assert _mode(base / 'var') == _mode(overflow) == 0o700
    assert _mode(overflow / 'lim.files.jsonl') == 0o600

    # The archive: directories per topic and day, part files.
    rt.broker.publish('lim.sink', {'n': 1})
    assert rt.archive is not None
    wait_until(lambda: rt.archive.flush() or rt.archive.written, TIMEOUT, message='an archived delivery')
    archive = base / 'var' / 'archive'
    parts = list(archive.rglob('part-*.jsonl'))
    assert parts and all(_mode(p) == 0o600 for p in parts)
    assert all(_mode(d) == 0o700 for d in [archive, *(p for p in archive.rglob('*') if p.is_dir())])

    # The generated admin password.
    password = admin_password(settings, create=True)
    assert password and _mode(base / 'secrets') == 0o700
    assert _mode(base / 'secrets' / 'admin.password') == 0o600

    # A Spark job's directory and driver log.
    (base / 'pipelines').mkdir()
    sub = Submission(job_id='j1', pipeline='p', argv=[], master='local[1]', conf={}, pipelines_dir=base / 'pipelines',
                     job_dir=base / 'var' / 'spark' / 'jobs' / 'j1', output_location=str(base / 'out'), cwd=base)
    SparkSubmitter('/bin/true').run(sub, lambda _pid: None, lambda: None)
    assert _mode(base / 'var' / 'spark') == _mode(base / 'var' / 'spark' / 'jobs') == _mode(sub.job_dir) == 0o700
    assert _mode(sub.log_path) == 0o600


def test_an_existing_database_file_keeps_its_mode(umask_022: None, tmp_path: Path) -> None:
    path = tmp_path / 'operator.db'
    path.touch()
    path.chmod(0o640)  # the operator's choice, e.g. for a backup group
    engine = make_engine(f'sqlite:///{path}')
    try:
        with engine.connect() as conn:
            conn.exec_driver_sql('CREATE TABLE t (x INTEGER)')
            conn.exec_driver_sql('INSERT INTO t VALUES (1)')
    finally:
        engine.dispose()
    assert _mode(path) == 0o640


# ${VAR} references


def test_references_may_name_only_conduit_secret_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('CONDUIT_TEST_LEAK', LEAKED_VALUE)
    monkeypatch.setenv('CONDUIT_SECRET_TEST_OK', 'fine-to-read')
    assert secret_refs.resolve('${CONDUIT_SECRET_TEST_OK}', 'password', 'here') == 'fine-to-read'
    for bad in ('${CONDUIT_TEST_LEAK}', '${HOME}', '${PATH}'):
        with pytest.raises(ConfigError) as info:
            secret_refs.resolve(bad, 'password', 'here')
        assert 'CONDUIT_SECRET_' in str(info.value) and 'password' in str(info.value)
        assert LEAKED_VALUE not in str(info.value) and os.environ['PATH'] not in str(info.value)
    with pytest.raises(ConfigError) as info:
        secret_refs.resolve(LEAKED_VALUE, 'push_password', 'here')  # a plain value is never echoed
    assert LEAKED_VALUE not in str(info.value)


def test_object_files_and_subscriptions_refuse_other_variables(make_rt: Callable[..., TestRuntime],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv('CONDUIT_TEST_LEAK', LEAKED_VALUE)
    rt = make_rt()
    objects = rt.settings.path(rt.settings.objects.dir)
    objects.mkdir(parents=True, exist_ok=True)
    cases = {
        'security': 'security:\n  - name: leak.sec\n    type: basic_auth\n    username: leak\n'
                    '    password: ${CONDUIT_TEST_LEAK}\n',
        'outgoing_rest': 'pubsub_topic:\n  - name: leak.topic\noutgoing_rest:\n  - name: leak.out\n'
                         '    host: http://127.0.0.1:9\n    url_path: /x\n    username: u\n'
                         '    password: ${CONDUIT_TEST_LEAK}\npubsub_subscription:\n  - name: leak.sub\n'
                         '    delivery_type: push\n    push_rest_endpoint: leak.out\n    topic_list: [leak.topic]\n',
    }
    for name, text in cases.items():
        path = objects / f'{name}.yaml'
        path.write_text(text, encoding='utf-8')
        with pytest.raises(ConfigError) as info:
            rt.objects.apply()
        message = str(info.value)
        assert 'password' in message and 'CONDUIT_SECRET_' in message and LEAKED_VALUE not in message, message
        path.unlink()

    rt.catalog.create_topic('leak.api')
    with pytest.raises(ConfigError) as info:
        rt.catalog.subscribe('leak.api', 'rest_push', push_url='http://127.0.0.1:9/hook',
                            options={'push_username': 'u', 'push_password': '${CONDUIT_TEST_LEAK}'})
    assert 'push_password' in str(info.value) and 'CONDUIT_SECRET_' in str(info.value)
    assert LEAKED_VALUE not in str(info.value)


def test_a_stored_reference_to_another_variable_is_never_resolved(
        make_rt: Callable[..., TestRuntime], monkeypatch: pytest.MonkeyPatch) -> None:
    """Defence in depth: a push subscription stored before the rule (or by hand) reaches no variable."""
    monkeypatch.setenv('CONDUIT_TEST_LEAK', LEAKED_VALUE)
    receiver = Receiver()
    receiver.start()
    try:
        rt = make_rt()
        rt.catalog.create_topic('leak.stored')
        options = {'push_username': 'u', 'push_password': '${CONDUIT_TEST_LEAK}'}
        run_transaction(rt.engine, lambda c: c.execute(insert(Subscription).values(
            sub_key='sk.' + 'a' * 40, pattern='leak.stored', kind='rest_push', service='', security='',
            push_url=receiver.url, options=json.dumps(options), origin='api', created_at=0.0)))
        rt.broker.reload()
        rt.broker.publish('leak.stored', {'n': 1})
        wait_until(lambda: receiver.requests, TIMEOUT, message='a push request')
        for request in receiver.requests:
            sent = base64.b64decode(request.authorization.split()[1]).decode() if request.authorization else ''
            assert LEAKED_VALUE not in sent
    finally:
        receiver.stop()


# Over HTTP


def test_a_full_queue_answers_503_over_rest(target: LiveServer) -> None:
    server, auth = target, (USER, PASSWORD)
    r = server.request('POST', '/pubsub/subscribe/topic/sec.full', auth=auth)
    assert r.status_code == 200, r.text
    sub_key = r.json()['sub_key']
    for n in range(5):  # sec.full: max_depth_gd 5, on_max_depth reject
        r = server.request('POST', '/pubsub/topic/sec.full', json={'data': {'n': n}}, auth=auth)
        assert r.status_code == 200, r.text
    r = server.request('POST', '/pubsub/topic/sec.full', json={'data': {'n': 5}}, auth=auth)
    assert r.status_code == 503, r.text
    body = r.json()
    assert body['is_ok'] is False and 'full' in body['details']
    assert sub_key not in r.text
    r = server.request('POST', '/pubsub/messages/get', json={'sub_key': sub_key, 'max_messages': 100}, auth=auth)
    assert r.status_code == 200 and [m['data'] for m in r.json()['messages']] == [{'n': n} for n in range(5)]


def test_the_admin_api_refuses_references_to_other_variables(target: LiveServer) -> None:
    server = target
    r = server.request('POST', '/admin/subscriptions', auth=server.admin, json={
        'topic': 'sec.topic', 'kind': 'rest_push', 'push_url': 'http://127.0.0.1:9/hook',
        'options': {'push_username': 'u', 'push_password': '${HOME}'}})
    assert r.status_code == 400, r.text
    details = r.json()['details']
    assert 'push_password' in details and 'CONDUIT_SECRET_' in details
    home = os.environ.get('HOME', '')
    assert len(home) < 2 or home not in r.text  # the value is never read, so never echoed
