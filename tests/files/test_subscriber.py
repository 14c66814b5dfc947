"""File subscribers: a topic's messages written as files into a local (and an SFTP) directory.

Runtimes in-process on SQLite and PostgreSQL, writing into the test's temporary directory; what
was written is read back with ordinary readers (json, csv). A reader polling the directory from
another process checks that no file is ever seen half written under its final name. The SFTP
test writes through a real OpenSSH server (tests/sshd.py) on a free loopback port.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import paramiko
import pytest
from click.testing import CliRunner

from runtime import cli as cli_module
from runtime.cli import subscriptions as sub_cli
from runtime.config import Settings
from runtime.errors import ConfigError, FileTargetUnreachable, FileWriteFailed
from runtime.pubsub.hooks import DeliveryHook
from runtime.pubsub.message import Delivery
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS
from runtime.pubsub.subscribers.file import FileDeliverer, FileOptions, parse_target
from runtime.testing import TestRuntime, admin_client, make_settings, wait_until
from runtime.util.urls import shown_target
from tests.sshd import SshServer

#: Broker settings of every runtime here: quick lease renewal, polling and retries.
FAST = {'wait_non_sock_err': 0.05, 'wait_sock_err': 0.05, 'max_wait_secs': 1.0, 'lease_renew_secs': 0.1,
        'poll_interval_secs': 0.02}

TIMEOUT = 30  # how long a condition may take under load; met conditions return at once

SECRET = 'sftp-pw-5c1e-never-shown'

#: A well-formed public key line for a pinned host key (no server holds its private half).
_KEY = paramiko.ECDSAKey.generate()
HOST_KEY = f'{_KEY.get_name()} {_KEY.get_base64()}'
#: An RSA key line whose crafted numbers make paramiko's parser overflow.
CRAFTED_RSA_KEY = ('ssh-rsa AAAAB3NzaC1yc2GE0gHX5c/sNsY1SWiOh7dcRLJGLnd4PWahda/zNE2DXO96HPq7M2qxr6FPGVUAVvA0onAkW5sbYgZ'
                   'yTtzra50aw597UrDDQvSxZ6+v/JgHGyf4iWrz5SmiN378Zb/daNS7429MhUCREgpz/n4=')


@pytest.fixture
def settings_factory(db_url: str, tmp_path: Path) -> Callable[..., Settings]:
    """Settings on the database under test, each runtime with a base directory of its own."""
    counter = itertools.count()

    def make(**pubsub: Any) -> Settings:
        base = tmp_path / f'rt{next(counter)}'
        base.mkdir()
        settings = make_settings(base, db_url)
        for key, value in {**FAST, **pubsub}.items():
            setattr(settings.pubsub, key, value)
        return settings

    return make


@pytest.fixture
def make_rt(settings_factory: Callable[..., Settings],
            runtime_factory: Callable[..., TestRuntime]) -> Callable[..., TestRuntime]:
    """A started runtime (pubsub settings as keyword arguments)."""

    def make(settings: Settings | None = None, **pubsub: Any) -> TestRuntime:
        return runtime_factory(settings=settings or settings_factory(**pubsub))

    return make


def file_subscription(rt: TestRuntime, topic: str, target: str | Path, paused: bool = False,
                      pattern: str | None = None, **options: Any) -> SubInfo:
    """A new topic with a file subscriber writing into target (a directory path or a URL)."""
    rt.catalog.create_topic(topic)
    url = target if isinstance(target, str) else f'file://{target}'
    sub = rt.catalog.subscribe(pattern or topic, 'file', push_url=url, options=options or None)
    if paused:
        rt.catalog.set_active(sub.sub_key, False)
    return sub


def files(directory: Path) -> dict[str, bytes]:
    """Every file under directory by relative path (temporary ones too: their names start with '.')."""
    if not directory.exists():
        return {}
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in sorted(directory.rglob('*')) if p.is_file()}


def drained(rt: TestRuntime, sub: SubInfo) -> None:
    wait_until(lambda: rt.catalog.queue_depth(sub.sub_key) == 0, TIMEOUT, message='queue empty')


def read_csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode('utf-8'), newline='')))


# One file per message


def test_each_message_is_one_file_named_after_it_in_a_directory_made_when_missing(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    out = tmp_path / 'out box' / 'données'  # missing, with a space and non-ASCII
    sub = file_subscription(rt, 'files.out', out)
    published = {
        rt.broker.publish('files.out', {'order': 1, 'name': 'Zoë'}): b'{"order":1,"name":"Zo\xc3\xab"}\n',
        rt.broker.publish('files.out', [1, 2.5, None]): b'[1,2.5,null]\n',
        rt.broker.publish('files.out', 'a JSON string', mime_type='application/json'): b'"a JSON string"\n',
        # Text and bytes of other mime types are written as they are.
        rt.broker.publish('files.out', 'plain text\r\nline 2', mime_type='text/csv'): b'plain text\r\nline 2',
        rt.broker.publish('files.out', b'\x00\x01\xff binary'): b'\x00\x01\xff binary',
    }
    wait_until(lambda: len(files(out)) == 5, TIMEOUT, message='five files')
    drained(rt, sub)
    written = files(out)
    today = {datetime.now(UTC).strftime('%Y-%m-%d'), datetime.fromtimestamp(time.time() - 60, UTC).strftime('%Y-%m-%d')}
    by_id = {}
    for name, data in written.items():
        m = re.fullmatch(r'files\.out-(\d{4}-\d{2}-\d{2})-(zpsm\w+)\.json', name)
        assert m and m.group(1) in today, name
        by_id[m.group(2)] = data
    assert by_id == published
    assert rt.catalog.dead_letters(sub.sub_key) == []


def test_the_name_template_makes_subdirectories_and_values_cannot_escape_the_target(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    area = tmp_path / 'area'
    out = area / 'out'
    topic = '/crm/../out'  # a topic name with '/' and '..' in it
    sub = file_subscription(rt, topic, out, file_name='by-date/{date}/{topic}/{time}-{seq}-{msg_id}.{ext}',
                            file_format='jsonl')
    msg_id = rt.broker.publish(topic, {'n': 1})
    wait_until(lambda: files(out), TIMEOUT, message='a file')
    drained(rt, sub)
    [(name, data)] = files(out).items()
    parts = name.split('/')
    assert parts[0] == 'by-date' and re.fullmatch(r'\d{4}-\d{2}-\d{2}', parts[1]), name
    assert len(parts) == 4 and '..' not in parts and not parts[2].startswith('.'), name
    assert re.fullmatch(rf'\d{{6}}-1-{msg_id}\.jsonl', parts[3]), name
    assert data == b'{"n":1}\n'
    assert [p for p in area.rglob('*') if p.is_file() and out not in p.parents] == []


# One file per batch


@pytest.mark.parametrize('fmt', ['json', 'jsonl', 'csv'])
def test_a_batch_is_one_file_per_run_of_one_topic_in_order(make_rt: Callable[..., TestRuntime], tmp_path: Path,
                                                           fmt: str) -> None:
    rt = make_rt()
    out = tmp_path / 'batches'
    rt.catalog.create_topic('batch.a')
    sub = file_subscription(rt, 'batch.b', out, pattern='batch.*', paused=True, file_per='batch', file_format=fmt,
                            file_name='{seq}-{topic}-{msg_id}.{ext}')
    rows = [('batch.a', {'id': 1, 'name': 'one, "quoted"'}), ('batch.a', {'id': 2, 'extra': True}),
            ('batch.b', {'id': 3, 'name': 'line\nbreak'}), ('batch.a', {'id': 4, 'name': None})]
    ids = [rt.broker.publish(topic, data) for topic, data in rows]
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(files(out)) == 3, TIMEOUT, message='three files')
    drained(rt, sub)
    written = files(out)
    assert sorted(written) == [f'1-batch.a-{ids[0]}.{fmt}', f'2-batch.b-{ids[2]}.{fmt}', f'3-batch.a-{ids[3]}.{fmt}']
    first, second, third = (written[name] for name in sorted(written))
    if fmt == 'json':
        assert json.loads(first) == [rows[0][1], rows[1][1]]
        assert json.loads(second) == [rows[2][1]] and json.loads(third) == [rows[3][1]]
    elif fmt == 'jsonl':
        assert [json.loads(line) for line in first.splitlines()] == [rows[0][1], rows[1][1]]
        assert second == b'{"id":3,"name":"line\\nbreak"}\n'
    else:
        assert read_csv(first) == [['id', 'name', 'extra'], ['1', 'one, "quoted"', ''], ['2', '', 'true']]
        assert read_csv(second) == [['id', 'name'], ['3', 'line\nbreak']]
        assert read_csv(third) == [['id', 'name'], ['4', '']]


def test_csv_columns_given_pick_the_cells(make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    out = tmp_path / 'csv'
    sub = file_subscription(rt, 'csv.cols', out, paused=True, file_per='batch', file_format='csv',
                            file_csv_columns='amount,id,currency')
    for n in range(3):
        rt.broker.publish('csv.cols', {'id': n, 'amount': n * 10.5, 'internal': 'not exported'})
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: files(out), TIMEOUT, message='a file')
    drained(rt, sub)
    [data] = files(out).values()
    assert read_csv(data) == [['amount', 'id', 'currency'], ['0.0', '0', ''], ['10.5', '1', ''], ['21.0', '2', '']]


# Readers never see half a file


POLLER = r'''
import json, os, sys
directory, ready, stop = sys.argv[1:4]
complete, partial, temporary = set(), [], set()
open(ready, 'w').close()
while not os.path.exists(stop):
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        continue
    for name in names:
        if name.startswith('.'):
            temporary.add(name)
            continue
        try:
            with open(os.path.join(directory, name), 'rb') as f:
                data = f.read()
        except FileNotFoundError:
            continue
        try:
            value = json.loads(data)
            assert len(value['pad']) == value['size']
            complete.add(name)
        except (ValueError, KeyError, AssertionError, TypeError):
            partial.append((name, len(data)))
print(json.dumps({'complete': sorted(complete), 'partial': partial, 'temporary': sorted(temporary)}))
'''


def test_a_reader_polling_the_directory_never_sees_a_partial_file(make_rt: Callable[..., TestRuntime],
                                                                  tmp_path: Path) -> None:
    rt = make_rt()
    out = tmp_path / 'polled'
    out.mkdir()
    ready, stop = tmp_path / 'ready', tmp_path / 'stop'
    poller = subprocess.Popen([sys.executable, '-c', POLLER, str(out), str(ready), str(stop)],
                              stdout=subprocess.PIPE, text=True)
    try:
        wait_until(ready.exists, TIMEOUT, message='the poller')
        sub = file_subscription(rt, 'big.files', out)
        sizes = [200_000 + n * 1000 for n in range(20)]
        for size in sizes:
            rt.broker.publish('big.files', {'size': size, 'pad': 'x' * size})
        wait_until(lambda: len([n for n in files(out) if not n.startswith('.')]) == 20, TIMEOUT,
                   message='twenty files')
        drained(rt, sub)
    finally:
        stop.touch()
        output, _ = poller.communicate(timeout=TIMEOUT)
    seen = json.loads(output)
    assert seen['partial'] == []
    assert seen['complete'], 'the poller read no file at all'
    assert all(re.fullmatch(r'\.big\.files-.+\.json\.conduit-tmp-.+', n) for n in seen['temporary']), seen
    assert sorted(files(out)) == sorted(n for n in files(out) if not n.startswith('.'))  # no temporary file left


# Failures


def test_a_target_that_cannot_be_written_is_retried_then_dead_lettered_with_the_reason(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    blocked = tmp_path / 'not-a-dir'
    blocked.write_text('a file where the directory should be')
    sub = file_subscription(rt, 'files.blocked', blocked, max_attempts=3)
    msg_id = rt.broker.publish('files.blocked', {'n': 1})
    wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='a dead letter')
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert (dead['msg_id'], dead['reason'], dead['delivery_count']) == (msg_id, 'max_attempts', 3)
    assert dead['last_error'].startswith(f'FileWriteFailed: file://{blocked}: '), dead['last_error']
    assert blocked.read_text() == 'a file where the directory should be'
    assert rt.catalog.queue_depth(sub.sub_key) == 0

    # Once the directory can be made, the next message is written: it is made again, not remembered as made.
    blocked.unlink()
    next_id = rt.broker.publish('files.blocked', {'n': 2})
    wait_until(lambda: files(blocked), TIMEOUT, message='a file once the target is fixed')
    [name] = files(blocked)
    assert next_id in name


def test_a_directory_removed_after_the_first_file_is_made_again(make_rt: Callable[..., TestRuntime],
                                                                 tmp_path: Path) -> None:
    rt = make_rt()
    out = tmp_path / 'comes-and-goes'
    sub = file_subscription(rt, 'files.gone', out)
    rt.broker.publish('files.gone', {'n': 1})
    wait_until(lambda: len(files(out)) == 1, TIMEOUT, message='the first file')
    drained(rt, sub)
    for path in out.iterdir():
        path.unlink()
    out.rmdir()
    rt.broker.publish('files.gone', {'n': 2})
    wait_until(lambda: len(files(out)) == 1, TIMEOUT, message='the second file, in the directory made again')
    drained(rt, sub)
    assert rt.catalog.dead_letters(sub.sub_key) == []


@pytest.mark.parametrize('per', ['message', 'batch'])
def test_what_cannot_be_rendered_is_dead_lettered_at_once_and_the_rest_written(
        make_rt: Callable[..., TestRuntime], tmp_path: Path, per: str) -> None:
    rt = make_rt()
    out = tmp_path / 'rendered'
    sub = file_subscription(rt, 'csv.bad', out, paused=True, file_format='csv', file_per=per, max_attempts=5)
    good = [rt.broker.publish('csv.bad', {'n': 1})]
    bad = [rt.broker.publish('csv.bad', [1, 2]), rt.broker.publish('csv.bad', {'n': {'nested': True}}),
           rt.broker.publish('csv.bad', 'text'), rt.broker.publish('csv.bad', b'bytes')]
    good.append(rt.broker.publish('csv.bad', {'n': 2}))
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: len(rt.catalog.dead_letters(sub.sub_key)) == 4, TIMEOUT, message='four dead letters')
    drained(rt, sub)
    dead = {d['msg_id']: d for d in rt.catalog.dead_letters(sub.sub_key)}
    assert sorted(dead) == sorted(bad)
    for d in dead.values():
        assert (d['reason'], d['delivery_count']) == ('unrenderable', 1)
        assert d['last_error'].startswith('UnrenderableMessage: ') and 'csv' in d['last_error'], d['last_error']
    rows = [row for data in files(out).values() for row in read_csv(data)[1:]]
    assert sorted(rows) == [['1'], ['2']]


def test_delivered_again_a_message_overwrites_its_own_file(tmp_path: Path) -> None:
    out = tmp_path / 'again'
    sub = SubInfo(1, 'sk', 'again', 'file', push_url=f'file://{out}', options=DeliveryOptions())
    writer = FileDeliverer(lambda s, d: {'data': d.payload()})
    first, second = delivery('zpsm-one', {'v': 1}), delivery('zpsm-two', {'v': 2})
    assert [o.ok for o in writer.deliver_batch(sub, [first])] == [True]
    before = files(out)
    # The same message again (its ack was lost, say): its file is written again, not a second one.
    assert [o.ok for o in writer.deliver_batch(sub, [first, second])] == [True, True]
    after = files(out)
    assert len(before) == 1 and len(after) == 2 and set(before) < set(after)
    [name] = before
    assert after[name] == before[name] == b'{"v":1}\n'
    writer.close()


def delivery(msg_id: str, data: Any, topic: str = 'again') -> Delivery:
    """A queued message as the delivery loop hands it over."""
    now = time.time()
    return Delivery(entry_id=1, sub_id=1, delivery_count=1, next_attempt_at=now, last_error='', recv_time=now,
                    message_id=1, msg_id=msg_id, topic_name=topic, data=json.dumps(data),
                    mime_type='application/json', priority=5, pub_time=now, expiration_time=now + 60, publisher='',
                    correl_id=None, in_reply_to=None, ext_client_id=None, has_gd=True, size=10)


# Configuration: the catalog, the object files, the admin API and the CLI


@pytest.mark.parametrize('url, options, named', [
    ('', {}, 'needs its target'),
    ('file://relative/dir', {}, 'file:///abs/dir'),
    ('file:///a/../etc', {}, 'without ..'),
    ('file:///out?x=1', {}, 'query'),
    ('http://example.com/out', {}, 'file:///abs/dir or sftp://'),
    ('file:///out', {'file_password': '${CONDUIT_SECRET_X}'}, 'only an sftp:// target'),
    (f'sftp://user:{SECRET}@127.0.0.1/out', {'file_host_key': HOST_KEY}, 'must not contain a password'),
    ('sftp://127.0.0.1/out', {'file_password': '${CONDUIT_SECRET_X}', 'file_host_key': HOST_KEY},
     'names its user'),
    ('sftp://user@127.0.0.1/out', {'file_host_key': HOST_KEY}, 'needs file_password or file_private_key'),
    ('sftp://user@127.0.0.1/out', {'file_password': '${CONDUIT_SECRET_X}'}, 'never trusted on first sight'),
    ('sftp://user@127.0.0.1/out', {'file_password': '${CONDUIT_SECRET_X}', 'file_host_key': 'ssh-ed25519 AAAA'},
     'host_key is not a valid ssh-ed25519 public key'),
    ('sftp://user@127.0.0.1/out', {'file_password': '${CONDUIT_SECRET_X}', 'file_host_key': CRAFTED_RSA_KEY},
     'host_key is not a valid'),
    ('sftp://user@127.0.0.1/out', {'file_password': SECRET, 'file_host_key': HOST_KEY},
     'file_password must be a ${CONDUIT_SECRET_...} reference'),
    ('sftp://user@127.0.0.1/out', {'file_private_key': '${HOME}', 'file_host_key': HOST_KEY},
     'file_private_key references ${HOME}'),
    ('sftp://user@127.0.0.1/out', {'file_password': '${CONDUIT_SECRET_X}', 'file_known_hosts': 'relative'},
     'absolute path'),
    ('file:///out', {'file_format': 'xml'}, 'file_format must be one of json, jsonl, csv'),
    ('file:///out', {'file_per': 'day'}, 'file_per must be one of'),
    ('file:///out', {'file_name': '/etc/{msg_id}'}, 'relative to the target'),
    ('file:///out', {'file_name': '{topic}-{secret}.json'}, 'secret'),
    ('file:///out', {'file_csv_columns': 'a,,b'}, 'empty column'),
])
def test_the_catalog_refuses_a_file_subscription_that_cannot_be_delivered(
        make_rt: Callable[..., TestRuntime], url: str, options: dict[str, Any], named: str) -> None:
    rt = make_rt()
    rt.catalog.create_topic('files.cfg')
    with pytest.raises(ConfigError) as e:
        rt.catalog.subscribe('files.cfg', 'file', push_url=url, options=options)
    assert named in str(e.value) and SECRET not in str(e.value), str(e.value)
    assert rt.broker.registry.all_subscribers('files.cfg') == []


def test_file_options_belong_to_file_subscriptions_only(make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    rt.catalog.create_topic('files.other')
    for kind, fields in (('service', {'service': 'conduit.ping'}), ('pull', {'security': 'x'}),
                         ('rest_push', {'push_url': 'http://127.0.0.1:1/x'})):
        with pytest.raises(ConfigError, match='file_format: file_\\* options are for subscriptions of kind file'):
            rt.catalog.subscribe('files.other', kind, options={'file_format': 'csv'}, **fields)
    with pytest.raises(ConfigError, match='takes no service'):
        rt.catalog.subscribe('files.other', 'file', service='conduit.ping', push_url='file:///tmp/x')


def test_targets_are_shown_and_labelled_without_credentials() -> None:
    opts = SUBSCRIBER_KINDS.options.typed(None, 'file', {'file_password': '${CONDUIT_SECRET_SFTP}',
                                                         'file_host_key': HOST_KEY}, 'w').of(FileOptions)
    target = parse_target('sftp://ann%40corp@[::1]:2222/srv/out%20box', opts, 'w')
    assert target.label == 'sftp://ann@corp@[::1]:2222/srv/out box'
    assert target.directory == '/srv/out box' and target.sftp is not None
    assert (target.sftp.host, target.sftp.port, target.sftp.username) == ('::1', 2222, 'ann@corp')
    assert target.sftp.password_ref == '${CONDUIT_SECRET_SFTP}'
    assert parse_target('sftp://ann@host/out', opts, 'w').sftp.port == 22  # type: ignore[union-attr]
    assert shown_target(f'sftp://ann:{SECRET}@host:22/out?token=t#f') == 'sftp://ann@host:22/out'
    sub = SubInfo(7, 'sk', 'payroll.*', 'file', push_url='file:///var/out')
    assert sub.label == 'sub#7(file:file:///var/out on payroll.*)'
    sub = SubInfo(8, 'sk', 'payroll.*', 'file', push_url='sftp://ann@host:2222/out')
    assert sub.label == 'sub#8(file:sftp://host:2222/out on payroll.*)'


OBJECTS = '''
pubsub_topic:
  - name: payroll.paid
pubsub_subscription:
  - name: payroll-outbox
    delivery_type: file
    file_target: file://{out}
    topic_list: [payroll.paid]
    file_format: jsonl
    file_per: batch
    file_name: payroll-{{msg_id}}.{{ext}}
    max_attempts: 4
'''


def test_config_objects_declare_a_file_subscription(make_rt: Callable[..., TestRuntime],
                                                    settings_factory: Callable[..., Settings],
                                                    tmp_path: Path) -> None:
    settings = settings_factory()
    objects_dir = settings.path(settings.objects.dir)
    objects_dir.mkdir(parents=True)
    out = tmp_path / 'outbox'
    path = objects_dir / 'files.yaml'
    path.write_text(OBJECTS.format(out=out), encoding='utf-8')
    rt = make_rt(settings=settings)
    [sub] = rt.broker.registry.all_subscribers('payroll.paid')
    file_options = sub.options.of(FileOptions)
    assert (sub.kind, sub.push_url, file_options.file_format, file_options.file_per, sub.options.max_attempts) == (
        'file', f'file://{out}', 'jsonl', 'batch', 4)
    msg_id = rt.broker.publish('payroll.paid', {'employee': 7, 'amount': 1200})
    wait_until(lambda: files(out), TIMEOUT, message='a file')
    assert files(out) == {f'payroll-{msg_id}.jsonl': b'{"employee":7,"amount":1200}\n'}

    # Applied again unchanged, it is the same subscription (its queue kept).
    rt.objects.apply()
    rt.synchronizer.poll()
    assert [s.sub_key for s in rt.broker.registry.all_subscribers('payroll.paid')] == [sub.sub_key]

    bad = {'file_target: file://{out}': 'file_target: relative/dir',
           'file_format: jsonl': f'file_format: jsonl\n    file_password: {SECRET}',
           'delivery_type: file': 'delivery_type: push\n    push_rest_endpoint: x',
           '    file_target: file://{out}\n': ''}
    for old, new in bad.items():
        path.write_text(OBJECTS.replace(old, new).format(out=out), encoding='utf-8')
        with pytest.raises(ConfigError) as e:
            rt.objects.apply()
        assert "'payroll-outbox'" in str(e.value) and SECRET not in str(e.value), str(e.value)


def test_the_admin_api_makes_shows_and_changes_file_subscriptions(make_rt: Callable[..., TestRuntime],
                                                                  tmp_path: Path) -> None:
    rt = make_rt()
    rt.catalog.create_topic('admin.files')
    client = admin_client(rt)
    out = tmp_path / 'admin-out'
    r = client.simulate_post('/admin/subscriptions', json={
        'topic': 'admin.files', 'kind': 'file', 'push_url': f'file://{out}',
        'options': {'file_format': 'csv', 'file_per': 'batch'}})
    assert r.status_code == 201, r.text
    view = r.json['subscription']
    assert (view['kind'], view['target'], view['push_url']) == ('file', f'file://{out}', f'file://{out}')
    assert view['options']['file_format'] == 'csv'
    sub_id = view['id']

    sftp = {'file_password': '${CONDUIT_SECRET_OUT}', 'file_host_key': HOST_KEY}
    r = client.simulate_post('/admin/subscriptions', json={
        'topic': 'admin.files', 'kind': 'file', 'push_url': 'sftp://ann@127.0.0.1:2222/out', 'options': sftp})
    assert r.status_code == 201, r.text
    assert r.json['subscription']['target'] == 'sftp://ann@127.0.0.1:2222/out'
    assert r.json['subscription']['options']['file_password'] == '${CONDUIT_SECRET_OUT}'

    refused = [
        {'push_url': f'sftp://ann:{SECRET}@127.0.0.1/out', 'options': sftp},
        {'push_url': 'sftp://ann@127.0.0.1/out', 'options': {**sftp, 'file_password': SECRET}},
        {'push_url': 'file://relative'},
        {'push_url': f'file://{out}', 'service': 'conduit.ping'},
        {'push_url': f'file://{out}', 'options': {'file_format': 'xml'}},
    ]
    for fields in refused:
        r = client.simulate_post('/admin/subscriptions', json={'topic': 'admin.files', 'kind': 'file', **fields})
        assert r.status_code == 400 and SECRET not in r.text, (fields, r.status_code, r.text)
    r = client.simulate_post('/admin/subscriptions', json={'topic': 'admin.files', 'kind': 'pull', 'security': '',
                                                           'service': 'conduit.ping',
                                                           'options': {'file_format': 'csv'}})
    assert r.status_code == 400 and 'kind file only' in r.text, r.text

    for patch in ({'push_url': 'file://x'}, {'options': {'file_per': 'never'}},
                  {'push_url': 'sftp://ann@127.0.0.1/out'}):  # an SFTP target without credentials
        r = client.simulate_patch(f'/admin/subscriptions/{sub_id}', json=patch)
        assert r.status_code == 400, (patch, r.text)
    r = client.simulate_patch(f'/admin/subscriptions/{sub_id}', json={'options': {'file_format': 'jsonl'}})
    assert r.status_code == 200 and r.json['subscription']['options']['file_format'] == 'jsonl', r.text
    r = client.simulate_get('/admin/subscriptions', params={'kind': 'file'})
    assert sorted(s['target'] for s in r.json['subscriptions']) == [f'file://{out}', 'sftp://ann@127.0.0.1:2222/out']
    assert SECRET not in r.text


def test_the_cli_sends_file_targets_and_options(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, str, Any]] = []

    def call(ctx: Any, method: str, path: str, body: Any = None, timeout: float = 30.0) -> dict[str, Any]:
        calls.append((method, path, body))
        return {'subscription': {'id': 4}, 'sub_key': 'sk.x'}
    monkeypatch.setattr(sub_cli, 'call', call)

    def run(*args: str, code: int = 0) -> str:
        result = CliRunner().invoke(cli_module.main, ['--url', 'http://127.0.0.1:1', 'sub', *args])
        assert result.exit_code == code, result.output
        return result.output

    out = run('create', 'payroll.*', '--file-target', 'sftp://ann@host/out', '--file-format', 'csv',
              '--file-password', '${CONDUIT_SECRET_OUT}', '--file-host-key', 'ssh-ed25519 AAAA', '--option',
              'max_attempts=3')
    assert 'created subscription 4 (file)' in out
    assert calls[-1] == ('POST', '/admin/subscriptions', {
        'topic': 'payroll.*', 'kind': 'file', 'service': '', 'security': '', 'push_url': 'sftp://ann@host/out',
        'options': {'max_attempts': 3, 'file_format': 'csv', 'file_password': '${CONDUIT_SECRET_OUT}',
                    'file_host_key': 'ssh-ed25519 AAAA'}})
    run('edit', '4', '--file-target', 'file:///srv/out', '--file-per', 'batch')
    assert calls[-1] == ('PATCH', '/admin/subscriptions/4', {'options': {'file_per': 'batch'},
                                                             'push_url': 'file:///srv/out'})
    run('create', 't', '--file-format', 'csv', code=2)  # --file-* without --file-target
    run('create', 't', '--file-target', 'file:///x', '--push-url', 'http://h/x', code=2)
    run('create', 't', '--file-target', 'file:///x', '--file-format', 'xml', code=2)
    assert len(calls) == 2


def test_logs_and_errors_never_show_an_sftp_password(make_rt: Callable[..., TestRuntime],
                                                     caplog: pytest.LogCaptureFixture,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv('CONDUIT_SECRET_SFTP_TEST', SECRET)
    rt = make_rt()
    # Nothing listens there: connecting fails, and the message is retried, then dead-lettered.
    sub = file_subscription(rt, 'files.sftp.down', 'sftp://ann@127.0.0.1:1/out', max_attempts=2,
                            file_password='${CONDUIT_SECRET_SFTP_TEST}', file_host_key=HOST_KEY)
    rt.broker.publish('files.sftp.down', {'n': 1})
    wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='a dead letter')
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert 'sftp://ann@127.0.0.1:1/out' in dead['last_error'], dead['last_error']
    assert SECRET not in dead['last_error'] and SECRET not in caplog.text


# SFTP, against a real OpenSSH server


def test_files_written_over_sftp_survive_a_server_restart_and_never_show_the_key(
        make_rt: Callable[..., TestRuntime], sshd: SshServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for name, value in sshd.secret_env.items():
        monkeypatch.setenv(name, value)
    rt = make_rt(wait_sock_err=0.1, max_wait_secs=0.5)
    out = sshd.root / 'outbox' / 'payroll'  # missing: made over SFTP, with its parent
    url = f'sftp://{sshd.username}@{sshd.host}:{sshd.port}{out}'
    sub = file_subscription(rt, 'payroll.paid', url, paused=True, file_format='csv', file_per='batch',
                            file_private_key=sshd.key_reference, file_host_key=sshd.host_key_line,
                            file_name='{date}/payroll-{msg_id}.{ext}')
    ids = [rt.broker.publish('payroll.paid', {'employee': n, 'amount': n * 100, 'name': f'Zoë, n° {n}'})
           for n in range(3)]
    rt.catalog.set_active(sub.sub_key, True)
    wait_until(lambda: files(out), TIMEOUT, message='a file over SFTP')
    drained(rt, sub)
    [(name, data)] = files(out).items()
    assert re.fullmatch(rf'\d{{4}}-\d{{2}}-\d{{2}}/payroll-{ids[0]}\.csv', name), name
    assert read_csv(data) == [['employee', 'amount', 'name'], ['0', '0', 'Zoë, n° 0'], ['1', '100', 'Zoë, n° 1'],
                              ['2', '200', 'Zoë, n° 2']]

    # The server goes away: the message waits (socket-level retries) and is written once it is back.
    failures: list[BaseException] = []
    rt.broker.hooks.add(Failures(failures))
    sshd.stop()
    later = rt.broker.publish('payroll.paid', {'employee': 9, 'amount': 1, 'name': 'late'})
    wait_until(lambda: len(failures) >= 2, TIMEOUT, message='two failed attempts while the server is down')
    assert all(isinstance(e, FileTargetUnreachable) and url in str(e) for e in failures), failures
    assert rt.catalog.dead_letters(sub.sub_key) == [] and rt.catalog.queue_depth(sub.sub_key) == 1
    sshd.start()
    wait_until(lambda: len(files(out)) == 2, TIMEOUT, message='the file written after the restart')
    drained(rt, sub)
    assert any(later in n for n in files(out))
    assert not [n for n in files(out) if '/.' in n or n.startswith('.')]  # no temporary file left
    assert rt.catalog.dead_letters(sub.sub_key) == []
    key_body = ''.join(sshd.client_key_text.splitlines()[1:-1])
    assert key_body[:40] not in caplog.text


class Failures(DeliveryHook):
    """Records the error of every failed delivery attempt."""

    def __init__(self, seen: list[BaseException]) -> None:
        self.seen = seen

    def after_deliver(self, sub: SubInfo, delivery: Delivery, ok: bool, error: BaseException | None,
                      duration_secs: float) -> None:
        if error is not None:
            self.seen.append(error)


def test_an_sftp_server_with_another_host_key_is_never_written_to(make_rt: Callable[..., TestRuntime],
                                                                   sshd: SshServer,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in sshd.secret_env.items():
        monkeypatch.setenv(name, value)
    rt = make_rt()
    out = sshd.root / 'spoofed'
    url = f'sftp://{sshd.username}@{sshd.host}:{sshd.port}{out}'
    sub = file_subscription(rt, 'files.spoofed', url, max_attempts=2, file_private_key=sshd.key_reference,
                            file_host_key=HOST_KEY)  # not this server's key
    rt.broker.publish('files.spoofed', {'n': 1})
    wait_until(lambda: rt.catalog.dead_letters(sub.sub_key), TIMEOUT, message='a dead letter')
    [dead] = rt.catalog.dead_letters(sub.sub_key)
    assert dead['reason'] == 'max_attempts' and url in dead['last_error'], dead
    assert 'host key' in dead['last_error'].lower(), dead['last_error']
    assert not out.exists()

    # With a known_hosts file naming the real key, the same target is written.
    known = sshd.known_hosts(sshd.dir / 'known_hosts')
    ok = file_subscription(rt, 'files.known', url, file_private_key=sshd.key_reference, file_known_hosts=str(known))
    rt.broker.publish('files.known', {'n': 2})
    wait_until(lambda: files(out), TIMEOUT, message='a file')
    drained(rt, ok)
    assert list(files(out).values()) == [b'{"n":2}\n']


# A link planted in the target is never followed (issue 33, defect 2)


@pytest.mark.parametrize('template, planted', [('{topic}/{date}-{time}-{seq}.{ext}', 'payroll.run'),
                                               ('link/{msg_id}.{ext}', 'link')])
@pytest.mark.parametrize('kind', ['local', 'sftp'])
def test_a_link_planted_in_the_target_is_refused_and_nothing_is_written_elsewhere(
        tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, kind: str, template: str, planted: str) -> None:
    if kind == 'sftp':
        server: SshServer = request.getfixturevalue('sshd')
        for name, value in server.secret_env.items():
            monkeypatch.setenv(name, value)
        out = server.root / 'outbox'
        elsewhere = server.root / 'elsewhere'
        url = f'sftp://{server.username}@{server.host}:{server.port}{out}'
        options = DeliveryOptions(kinds=(FileOptions(file_name=template, file_format='jsonl',
                                                     file_private_key=server.key_reference,
                                                     file_host_key=server.host_key_line),))
    else:
        out, elsewhere = tmp_path / 'outbox', tmp_path / 'elsewhere'
        url = f'file://{out}'
        options = DeliveryOptions(kinds=(FileOptions(file_name=template, file_format='jsonl'),))
    out.mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / planted)  # planted by whoever collects the files
    sub = SubInfo(1, 'sk', 'payroll.run', 'file', push_url=url, options=options)
    writer = FileDeliverer(lambda s, d: {'data': d.payload()})
    caplog.set_level(logging.WARNING)
    for _ in range(2):
        [outcome] = writer.deliver_batch(sub, [delivery('zpsm-link', {'v': 1}, topic='payroll.run')])
        assert not outcome.ok and isinstance(outcome.error, FileWriteFailed)
        assert f"'{planted}' is a symbolic link" in str(outcome.error), outcome.error
    writer.close()
    assert list(elsewhere.iterdir()) == []
    assert [p.name for p in out.iterdir()] == [planted]
    warnings = [r for r in caplog.records if 'symbolic link' in r.getMessage()]
    assert len(warnings) == 1 and sub.label in warnings[0].getMessage()
