"""Inbound file channels in-process, on SQLite and on PostgreSQL: files dropped into local directories.

Each test runs a started runtime (``runtime_factory``) whose ``FileTransfer`` polls the channels the
test stores (rows of ``conduit_file_channel``, then ``reload``), every 0.05 s with ``stable_polls``
1. What was published is read back from ``conduit_message`` (data, ``ext_client_id``, publisher), so
that "exactly once" is checked against what was stored, not against what a subscriber happened to
see. Tests that need several workers or a crash build ``FileTransfer`` instances of their own over
the runtime's broker, with distinct claim owners.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import pytest
from sqlalchemy import insert, select

from runtime.db.blocking import run_transaction
from runtime.db.models import FileChannelRow, FileDigest, FileRun, Message, QueueEntry
from runtime.errors import MessageTooLarge, TopicNotFound
from runtime.files.claims import CLAIM_MARK, this_host, this_owner
from runtime.files.definition import FileChannelDef
from runtime.files.manager import FileTransfer
from runtime.pubsub.message import decode_data
from runtime.service import Service
from runtime.testing import TestRuntime, admin_client, make_settings, wait_until
from runtime.util.json_limits import JsonLimits
from tests.recorder import Recorder
from tests.sshd import SshServer

TIMEOUT = 30  # how long a condition may take under load; met conditions return at once

#: Channel values every test starts from: fast polls.
FAST = {'poll_interval_secs': 0.05, 'stable_polls': 1, 'invoke_retry_wait_secs': 0.01}


class Sink(Service):
    """Records what it is invoked with (payload and the raw request the file channel gives)."""

    name = 'ft.sink'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('sink', (self.channel, self.request.payload, self.request.raw_request))


class Picky(Service):
    """Refuses records whose 'amount' is negative."""

    name = 'ft.picky'
    recorder: Recorder

    def handle(self) -> None:
        payload = self.request.payload
        if isinstance(payload, dict) and str(payload.get('amount', '')).startswith('-'):
            raise ValueError('a negative amount')
        self.recorder.add('picky', payload)


# Fixtures and helpers


@pytest.fixture
def make_rt(db_url: str, tmp_path: Path, runtime_factory: Callable[..., TestRuntime],
            recorder: Recorder) -> Iterator[Callable[..., TestRuntime]]:
    """A started runtime on the database under test with the given services (bound to the recorder)."""
    made: list[TestRuntime] = []

    def make(*services: type[Service]) -> TestRuntime:
        base = tmp_path / f'rt{len(made)}'
        base.mkdir()
        settings = make_settings(base, db_url)
        settings.pubsub.poll_interval_secs = 0.02
        settings.pubsub.lease_renew_secs = 0.1
        settings.pubsub.wait_non_sock_err = 0.05
        rt = runtime_factory(*recorder.bind_all(services), settings=settings)
        made.append(rt)
        return rt

    yield make
    for rt in made:
        if rt.started:
            rt.stop()


def store_channel(rt: TestRuntime, name: str, directory: Path, **values: Any) -> FileChannelDef:
    """Store a channel (as the admin API would) and reload the runtime's file transfer."""
    definition = FileChannelDef.from_values({'name': name, 'directory': str(directory), **FAST, **values},
                                            f'file channel {name!r}')
    run_transaction(rt.engine, lambda conn: conn.execute(insert(FileChannelRow).values(
        name=name, definition=definition.stored(), is_active=definition.is_active, origin='api', owner='',
        updated_at=time.time())))
    rt.file_transfer.reload()
    return definition


def topic_with_pull(rt: TestRuntime, topic: str) -> int:
    """A topic with a pull subscription (so that its messages are kept); returns the subscription id."""
    rt.catalog.create_topic(topic)
    return rt.catalog.subscribe(topic, 'pull', service='ft.sink').id


def published(rt: TestRuntime, topic: str) -> list[tuple[Any, str | None, str]]:
    """(data, ext_client_id, publisher) of every message stored for a topic, in publication order."""
    rows = run_transaction(rt.engine, lambda conn: conn.execute(
        select(Message.data, Message.mime_type, Message.ext_client_id, Message.publisher)
        .where(Message.topic_name == topic).order_by(Message.id)).all(), write=False)
    return [(decode_data(r.data, r.mime_type), r.ext_client_id, r.publisher) for r in rows]


def data_of(rt: TestRuntime, topic: str) -> list[Any]:
    return [d for d, _, _ in published(rt, topic)]


def runs(rt: TestRuntime, channel: str) -> list[Any]:
    return run_transaction(rt.engine, lambda conn: conn.execute(
        select(FileRun).where(FileRun.channel == channel).order_by(FileRun.id)).all(), write=False)


def drop(directory: Path, name: str, content: str | bytes) -> Path:
    """Write a file as a sender would: under a dot name first, then renamed into place."""
    directory.mkdir(parents=True, exist_ok=True)
    temp = directory / f'.{name}.part'
    temp.write_bytes(content.encode('utf-8') if isinstance(content, str) else content)
    target = directory / name
    temp.rename(target)
    return target


def files_in(directory: Path) -> list[str]:
    """Names of the files directly in a directory."""
    return sorted(p.name for p in directory.iterdir() if p.is_file()) if directory.exists() else []


def gone(path: Path) -> Callable[[], bool]:
    """Whether a dropped file was handled: neither there nor claimed (a claim is a rename in place)."""
    def check() -> bool:
        return not path.exists() and not any(n.startswith(path.name + CLAIM_MARK) for n in files_in(path.parent))
    return check


def csv_text(rows: list[tuple[Any, ...]], header: str = 'id,amount') -> str:
    return header + '\n' + ''.join(','.join(map(str, r)) + '\n' for r in rows)


def dead_pid() -> int:
    """A process id that no process has now (a child that has exited and been reaped)."""
    child = subprocess.Popen(['true'])
    child.wait()
    return child.pid


def make_transfer(rt: TestRuntime, owner: str) -> FileTransfer:
    """A FileTransfer of its own over the runtime's broker: another "worker" with its claim owner."""
    return FileTransfer(rt.engine, rt.settings.file_transfer, rt.spawner.spawn, prepare=rt.broker.prepare,
                        store_prepared=rt.broker.store_prepared, run_service=rt._run_file_service,
                        json_limits=JsonLimits.from_settings(rt.settings.http),
                        max_message_size=rt.settings.pubsub.max_message_size, owner=owner)


# Formats


def test_csv_rows_become_one_message_each_for_a_pull_subscriber(make_rt: Callable[..., TestRuntime],
                                                                  tmp_path: Path) -> None:
    rt = make_rt()
    sub_id = topic_with_pull(rt, 'invoice.received')
    inbox = tmp_path / 'inbox'
    inbox.mkdir()
    store_channel(rt, 'invoices', inbox, patterns=['*.csv'], format='csv', topics=['invoice.received'])
    drop(inbox, 'notes.txt', 'not a csv: left alone')
    content = csv_text([(1, '10.50'), (2, '7'), (3, '0')])
    path = drop(inbox, 'batch-1.csv', content)

    wait_until(gone(path), TIMEOUT, message='the CSV processed and deleted')
    assert published(rt, 'invoice.received') == [
        ({'id': '1', 'amount': '10.50'}, 'batch-1.csv', 'file:invoices'),
        ({'id': '2', 'amount': '7'}, 'batch-1.csv', 'file:invoices'),
        ({'id': '3', 'amount': '0'}, 'batch-1.csv', 'file:invoices')]
    queued = run_transaction(rt.engine, lambda conn: conn.execute(
        select(QueueEntry.id).where(QueueEntry.sub_id == sub_id)).all(), write=False)
    assert len(queued) == 3
    assert files_in(inbox) == ['notes.txt']  # not matching the pattern: never touched
    (run,) = runs(rt, 'invoices')
    assert (run.state, run.file_name, run.records_done, run.published) == ('done', 'batch-1.csv', 3, 3)
    assert run.size == len(content)
    families = {f.name: f for f in rt.metrics.collect()}
    files = {(s.labels['channel'], s.labels['outcome']): s.value
             for s in families['conduit_file_transfer_files'].samples if s.name.endswith('_total')}
    assert files == {('invoices', 'processed'): 1}
    (sample,) = [s for s in families['conduit_file_transfer_published'].samples if s.name.endswith('_total')]
    assert (sample.labels['channel'], sample.value) == ('invoices', 3)


def test_every_format_and_record_mode(make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    cases: dict[str, tuple[dict[str, Any], str, bytes | str, list[Any]]] = {
        'array': ({'format': 'json', 'records': 'each'}, 'a.json', '[{"n": 1}, 2, "three", [4]]',
                  [{'n': 1}, 2, 'three', [4]]),
        'whole': ({'format': 'json'}, 'w.json', '{"order": {"lines": [1, 2]}}', [{'order': {'lines': [1, 2]}}]),
        'lines': ({'format': 'jsonl'}, 'l.jsonl', '{"a": 1}\n\n{"b": 2}\n', [{'a': 1}, {'b': 2}]),
        'text': ({'format': 'text', 'records': 'each'}, 't.txt', 'first line\nsecond — line\n',
                 ['first line', 'second — line']),
        'textfile': ({'format': 'text'}, 'tf.txt', 'whole\ntext\n', ['whole\ntext\n']),
        'bytes': ({'format': 'bytes'}, 'b.bin', b'\x00\x01\xffbinary', [b'\x00\x01\xffbinary']),
        'csvfile': ({'format': 'csv', 'records': 'file', 'csv_delimiter': ';'}, 'c.csv', 'x;y\n1;2\n3;4\n',
                    [[{'x': '1', 'y': '2'}, {'x': '3', 'y': '4'}]]),
    }
    paths = {}
    for name, (values, _, _, _) in cases.items():
        topic_with_pull(rt, f'fmt.{name}')
        store_channel(rt, f'fmt-{name}', tmp_path / name, topics=[f'fmt.{name}'], **values)
    for name, (_, file_name, content, _) in cases.items():
        paths[name] = drop(tmp_path / name, file_name, content)
    for name, path in paths.items():
        wait_until(gone(path), TIMEOUT, message=f'{name} processed')
    for name, (_, _, _, expected) in cases.items():
        assert data_of(rt, f'fmt.{name}') == expected, name


# Services


def test_a_service_is_invoked_per_file_and_per_record(make_rt: Callable[..., TestRuntime], tmp_path: Path,
                                                       recorder: Recorder) -> None:
    rt = make_rt(Sink, Picky)
    store_channel(rt, 'per-file', tmp_path / 'pf', format='csv', service='ft.sink', invoke_per='file')
    store_channel(rt, 'per-record', tmp_path / 'pr', format='jsonl', service='ft.picky', invoke_per='record',
                  batch_size=2)
    a = drop(tmp_path / 'pf', 'two rows.csv', csv_text([(1, 5), (2, 6)]))
    b = drop(tmp_path / 'pr', 'records.jsonl', '{"amount": 1}\n{"amount": 2}\n{"amount": 3}\n')
    wait_until(gone(a), TIMEOUT, message='per-file processed')
    wait_until(gone(b), TIMEOUT, message='per-record processed')

    ((channel, payload, raw),) = recorder['sink']
    assert channel == 'file-transfer'
    assert payload == {'file_name': 'two rows.csv', 'path': f'{tmp_path / "pf"}/two rows.csv',
                       'size': len(csv_text([(1, 5), (2, 6)])),
                       'data': [{'id': '1', 'amount': '5'}, {'id': '2', 'amount': '6'}]}
    assert raw == {'file_name': 'two rows.csv'}
    assert recorder['picky'] == [{'amount': 1}, {'amount': 2}, {'amount': 3}]
    (run,) = runs(rt, 'per-record')
    assert (run.state, run.records_done, run.invoked, run.published) == ('done', 3, 3, 0)


def test_a_service_failing_past_its_retries_fails_the_file_at_that_record(
        make_rt: Callable[..., TestRuntime], tmp_path: Path, recorder: Recorder) -> None:
    rt = make_rt(Picky)
    topic_with_pull(rt, 'pay')
    store_channel(rt, 'pay', tmp_path / 'in', format='jsonl', topics=['pay'], service='ft.picky',
                  invoke_per='record', invoke_retries=2)
    path = drop(tmp_path / 'in', 'p.jsonl', '{"amount": 1}\n{"amount": -2}\n{"amount": 3}\n')
    wait_until(gone(path), TIMEOUT, message='the file failed')
    report = json.loads((tmp_path / 'in' / 'errors' / 'p.jsonl.error.json').read_text())
    assert (report['record'], report['line']) == (2, 2)
    assert 'ft.picky failed 3 time(s)' in report['reason'] and 'negative amount' in report['reason']
    assert data_of(rt, 'pay') == [{'amount': 1}]  # the record before it, not the one that failed
    assert recorder['picky'] == [{'amount': 1}]


# After processing


def test_after_delete_move_and_leave(make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'after')
    store_channel(rt, 'del', tmp_path / 'del', topics=['after'])
    store_channel(rt, 'move', tmp_path / 'move', topics=['after'], after='move',
                  move_to='done/{stem}-{channel}{suffix}')
    store_channel(rt, 'leave', tmp_path / 'leave', topics=['after'], after='leave')
    d = drop(tmp_path / 'del', 'd.json', '{"k": "del"}')
    m1 = drop(tmp_path / 'move', 'm.json', '{"k": "move1"}')
    wait_until(gone(d), TIMEOUT, message='deleted')
    wait_until(gone(m1), TIMEOUT, message='moved')
    assert files_in(tmp_path / 'move' / 'done') == ['m-move.json']
    m2 = drop(tmp_path / 'move', 'm.json', '{"k": "move2"}')  # same target name: never overwritten
    wait_until(gone(m2), TIMEOUT, message='moved again')
    assert files_in(tmp_path / 'move' / 'done') == ['m-move-1.json', 'm-move.json']
    assert json.loads((tmp_path / 'move' / 'done' / 'm-move.json').read_text()) == {'k': 'move1'}

    left = drop(tmp_path / 'leave', 'l.json', '{"k": "leave"}')
    wait_until(lambda: any(r.state == 'done' for r in runs(rt, 'leave')), TIMEOUT, message='left processed')
    wait_until(left.exists, TIMEOUT, message='put back under its name')
    poller = rt.file_transfer.pollers()['leave']
    polls = poller.polls
    wait_until(lambda: poller.polls >= polls + 5, TIMEOUT, message='more polls')
    assert files_in(tmp_path / 'leave') == ['l.json']
    assert [r.state for r in runs(rt, 'leave')] == ['done']  # never taken again
    assert sorted(d['k'] for d in data_of(rt, 'after')) == ['del', 'leave', 'move1', 'move2']


def test_a_left_file_is_not_taken_again_by_a_worker_that_did_not_process_it(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'left')
    store_channel(rt, 'leave', tmp_path / 'in', topics=['left'], after='leave')
    left = drop(tmp_path / 'in', 'l.json', '{"k": 1}')
    wait_until(lambda: any(r.state == 'done' for r in runs(rt, 'leave')), TIMEOUT, message='processed')
    wait_until(left.exists, TIMEOUT, message='put back')
    rt.file_transfer.stop()
    other = make_transfer(rt, f'{this_host()}-other_{os.getpid()}')  # knows nothing in memory
    other.start()
    try:
        wait_until(lambda: other.pollers()['leave'].polls >= 5, TIMEOUT, message='polls of the other worker')
    finally:
        other.stop()
    assert [r.state for r in runs(rt, 'leave')] == ['done']
    assert data_of(rt, 'left') == [{'k': 1}]


# Exactly once


def test_the_same_content_dropped_again_is_skipped_and_logged(make_rt: Callable[..., TestRuntime], tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'orders')
    store_channel(rt, 'orders', tmp_path / 'in', format='csv', topics=['orders'])
    first = drop(tmp_path / 'in', 'orders-monday.csv', csv_text([(1, 1), (2, 2)]))
    wait_until(gone(first), TIMEOUT, message='first processed')
    with caplog.at_level(logging.INFO, logger='runtime.files'):
        again = drop(tmp_path / 'in', 'orders-tuesday.csv', csv_text([(1, 1), (2, 2)]))
        wait_until(gone(again), TIMEOUT, message='the copy handled')
    assert len(data_of(rt, 'orders')) == 2
    assert [(r.file_name, r.state) for r in runs(rt, 'orders')] == [('orders-monday.csv', 'done'),
                                                                    ('orders-tuesday.csv', 'skipped')]
    skipped = [r.getMessage() for r in caplog.records if 'skipped: same content' in r.getMessage()]
    assert len(skipped) == 1
    assert skipped[0].startswith('file channel orders: orders-tuesday.csv skipped: same content as '
                                 'orders-monday.csv processed at 20')


def test_reprocess_same_publishes_identical_content_again(make_rt: Callable[..., TestRuntime],
                                                          tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'again')
    store_channel(rt, 'again', tmp_path / 'in', topics=['again'], reprocess_same=True)
    for _ in range(2):
        path = drop(tmp_path / 'in', 'same.json', '{"x": 1}')
        wait_until(gone(path), TIMEOUT, message='processed')
    assert data_of(rt, 'again') == [{'x': 1}, {'x': 1}]


def test_a_partly_bad_file_publishes_its_good_rows_once_and_the_fixed_file_only_the_rest(
        make_rt: Callable[..., TestRuntime], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'rows')
    store_channel(rt, 'rows', tmp_path / 'in', format='csv', topics=['rows'], batch_size=2)
    bad = 'id,amount\n1,10\n2,20\n3,30\n4,40,EXTRA\n5,50\n'
    with caplog.at_level(logging.WARNING, logger='runtime.files'):
        path = drop(tmp_path / 'in', 'day 1.csv', bad)
        wait_until(gone(path), TIMEOUT, message='the bad file failed')
    assert [d['id'] for d in data_of(rt, 'rows')] == ['1', '2', '3']
    errors = tmp_path / 'in' / 'errors'
    assert files_in(errors) == ['day 1.csv', 'day 1.csv.error.json']
    assert (errors / 'day 1.csv').read_text() == bad  # unchanged
    report = json.loads((errors / 'day 1.csv.error.json').read_text())
    assert report['channel'] == 'rows' and report['file_name'] == 'day 1.csv'
    assert (report['record'], report['line'], report['published_before_error']) == (4, 5, 3)
    assert report['size'] == len(bad) and len(report['content_hash']) == 64
    assert report['failed_at'].startswith('20') and report['reason']
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [w for w in warnings if 'day 1.csv failed at record 4 (line 5)' in w]

    # Fixed (row 4 corrected, a row added) and dropped again: only what was not published before.
    fixed = 'id,amount\n1,10\n2,20\n3,30\n4,40\n5,50\n6,60\n'
    with caplog.at_level(logging.INFO, logger='runtime.files'):
        path = drop(tmp_path / 'in', 'day 1.csv', fixed)
        wait_until(gone(path), TIMEOUT, message='the fixed file processed')
    assert [d['id'] for d in data_of(rt, 'rows')] == ['1', '2', '3', '4', '5', '6']
    assert [r.getMessage() for r in caplog.records if '3 record(s) already published' in r.getMessage()]
    assert [r.state for r in runs(rt, 'rows')] == ['superseded', 'done']
    digests = run_transaction(rt.engine, lambda conn: conn.execute(select(FileDigest)).all(), write=False)
    assert digests == []  # the superseded run's digests are gone with it


def test_the_same_bad_file_dropped_again_publishes_nothing_twice(make_rt: Callable[..., TestRuntime],
                                                                 tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'rows')
    store_channel(rt, 'rows', tmp_path / 'in', format='jsonl', topics=['rows'])
    bad = '{"n": 1}\n{"n": 2}\n{"n": \n{"n": 4}\n'
    for attempt in range(2):
        path = drop(tmp_path / 'in', 'bad.jsonl', bad)
        wait_until(gone(path), TIMEOUT, message=f'failed ({attempt})')
    assert data_of(rt, 'rows') == [{'n': 1}, {'n': 2}]
    assert files_in(tmp_path / 'in' / 'errors') == ['bad-1.jsonl', 'bad-1.jsonl.error.json', 'bad.jsonl',
                                                    'bad.jsonl.error.json']
    assert [r.state for r in runs(rt, 'rows')] == ['failed']  # resumed from where it failed, and failed again


def test_a_crash_mid_file_resumes_after_the_last_committed_batch(make_rt: Callable[..., TestRuntime],
                                                                 tmp_path: Path) -> None:
    rt = make_rt()
    rt.file_transfer.stop()  # two workers of our own instead
    topic_with_pull(rt, 'big')
    store_channel(rt, 'big', tmp_path / 'in', format='csv', topics=['big'], batch_size=3)
    crashed = make_transfer(rt, f'{this_host()}_{dead_pid()}')  # its process "is gone" on this host

    def crash(channel: str, file_name: str, batches: int) -> None:
        if batches == 2:
            # The whole "process" dies: its poller must not poll again, or it would find its own claim
            # abandoned and resume the file before the test stops it (seen under load: 9 records done).
            for poller in crashed.pollers().values():
                poller.request_stop()
            raise gevent.GreenletExit  # as a kill -9 mid-file: no clean-up at all
    crashed.after_batch = crash
    crashed.start()
    rows = [(i, i * 10) for i in range(1, 11)]
    path = drop(tmp_path / 'in', 'big.csv', csv_text(rows))
    wait_until(lambda: len(data_of(rt, 'big')) == 6, TIMEOUT, message='two batches committed')
    wait_until(lambda: any(CLAIM_MARK in n for n in files_in(tmp_path / 'in')) and not path.exists(), TIMEOUT,
               message='the claim left behind')
    crashed.stop()
    (run,) = runs(rt, 'big')
    assert (run.state, run.records_done) == ('running', 6)

    restarted = make_transfer(rt, this_owner())
    restarted.start()
    try:
        wait_until(lambda: files_in(tmp_path / 'in') == [], TIMEOUT, message='the claim taken over and processed')
    finally:
        restarted.stop()
    assert [int(d['id']) for d in data_of(rt, 'big')] == list(range(1, 11))
    (run,) = runs(rt, 'big')
    assert (run.state, run.records_done, run.published) == ('done', 10, 10)
    assert run.owner.startswith(this_owner() + '/')


def test_two_workers_over_one_directory_publish_every_record_exactly_once(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    rt.file_transfer.stop()
    topic_with_pull(rt, 'shared')
    store_channel(rt, 'shared', tmp_path / 'in', format='jsonl', topics=['shared'], batch_size=2,
                  max_parallel_files=3)
    workers = [make_transfer(rt, f'{this_host()}-w{i}_{os.getpid()}') for i in (1, 2)]
    for worker in workers:
        worker.start()
    try:
        expected = []
        for f in range(12):
            lines = [{'file': f, 'row': r} for r in range(5)]
            expected += lines
            drop(tmp_path / 'in', f'f{f:02d}.jsonl', ''.join(json.dumps(x) + '\n' for x in lines))
        # Identical content under two names at once: one is processed, the other skipped.
        drop(tmp_path / 'in', 'dup-a.jsonl', '{"dup": 1}\n{"dup": 2}\n')
        drop(tmp_path / 'in', 'dup-b.jsonl', '{"dup": 1}\n{"dup": 2}\n')
        expected += [{'dup': 1}, {'dup': 2}]
        wait_until(lambda: files_in(tmp_path / 'in') == [], TIMEOUT, message='every file processed')
    finally:
        for worker in workers:
            worker.stop()
    got = data_of(rt, 'shared')
    key = json.dumps
    assert sorted(map(key, got)) == sorted(map(key, expected))
    states = sorted(r.state for r in runs(rt, 'shared'))
    assert states == ['done'] * 13 + ['skipped']


# Edges


def test_names_with_spaces_and_non_ascii_empty_files_and_header_only_csv(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'edge')
    store_channel(rt, 'edge', tmp_path / 'in', format='csv', topics=['edge'])
    names = ['Überweisung März 2026.csv', 'empty.csv', 'header only.csv', '请求 订单.csv']
    paths = [drop(tmp_path / 'in', names[0], 'id,name\n1,Zoë\n'), drop(tmp_path / 'in', names[1], ''),
             drop(tmp_path / 'in', names[2], 'id,name\n'), drop(tmp_path / 'in', names[3], 'id,name\n2,王\n')]
    for path in paths:
        wait_until(gone(path), TIMEOUT, message=f'{path.name} processed')
    assert sorted((d['id'], ext) for d, ext, _ in published(rt, 'edge')) == [('1', names[0]), ('2', names[3])]
    assert sorted((r.file_name, r.state, r.records_done) for r in runs(rt, 'edge')) == sorted([
        (names[0], 'done', 1), (names[1], 'done', 0), (names[2], 'done', 0), (names[3], 'done', 1)])
    assert not (tmp_path / 'in' / 'errors').exists()


def test_a_long_file_name_is_cut_in_ext_client_id(make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'long')
    store_channel(rt, 'long', tmp_path / 'in', topics=['long'], recursive=True)
    deep = tmp_path / 'in' / ('d' * 120)
    name = 'n' * 120 + '.json'
    path = drop(deep, name, '{"deep": true}')
    wait_until(gone(path), TIMEOUT, message='processed')
    ((data, ext, _),) = published(rt, 'long')
    assert data == {'deep': True}
    assert ext == f'{"d" * 120}/{name}'[:200]


def test_the_directory_removed_and_made_again_while_polled(make_rt: Callable[..., TestRuntime], tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'back')
    inbox = tmp_path / 'in'
    inbox.mkdir()
    with caplog.at_level(logging.INFO, logger='runtime.files'):
        store_channel(rt, 'back', inbox, topics=['back'])
        poller = rt.file_transfer.pollers()['back']
        wait_until(lambda: poller.polls >= 2, TIMEOUT, message='polling')
        inbox.rmdir()
        wait_until(lambda: [r for r in caplog.records if 'is missing' in r.getMessage()], TIMEOUT,
                   message='the missing directory logged')
        gevent.sleep(0.3)  # several polls of a missing directory: logged once
        inbox.mkdir()
        path = drop(inbox, 'after.json', '{"back": 1}')
        wait_until(gone(path), TIMEOUT, message='processed once the directory is back')
    missing = [r for r in caplog.records if 'is missing' in r.getMessage()]
    assert len(missing) == 1 and missing[0].levelno == logging.WARNING
    assert len([r for r in caplog.records if 'is back' in r.getMessage()]) == 1
    assert data_of(rt, 'back') == [{'back': 1}]


def test_a_record_the_topic_refuses_fails_the_file(make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'limits')
    rt.broker.settings.max_message_size = 100
    store_channel(rt, 'limits', tmp_path / 'in', format='jsonl', topics=['limits'])
    path = drop(tmp_path / 'in', 'big.jsonl', '{"ok": 1}\n' + json.dumps({'big': 'x' * 300}) + '\n{"ok": 3}\n')
    wait_until(gone(path), TIMEOUT, message='failed')
    report = json.loads((tmp_path / 'in' / 'errors' / 'big.jsonl.error.json').read_text())
    assert report['record'] == 2 and 'limits' in report['reason']
    assert data_of(rt, 'limits') == [{'ok': 1}]


def test_a_channel_removed_stops_polling_and_a_changed_one_restarts(make_rt: Callable[..., TestRuntime],
                                                                    tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'one')
    topic_with_pull(rt, 'two')
    store_channel(rt, 'chg', tmp_path / 'in', topics=['one'])
    path = drop(tmp_path / 'in', 'a.json', '{"n": 1}')
    wait_until(gone(path), TIMEOUT, message='processed')
    changed = FileChannelDef.from_values({'name': 'chg', 'directory': str(tmp_path / 'in'), **FAST,
                                          'topics': ['two']}, 'chg')
    run_transaction(rt.engine, lambda conn: conn.execute(
        FileChannelRow.__table__.update().where(FileChannelRow.name == 'chg').values(definition=changed.stored())))
    rt.file_transfer.reload()
    path = drop(tmp_path / 'in', 'b.json', '{"n": 2}')
    wait_until(gone(path), TIMEOUT, message='processed by the new definition')
    assert (data_of(rt, 'one'), data_of(rt, 'two')) == ([{'n': 1}], [{'n': 2}])
    run_transaction(rt.engine, lambda conn: conn.execute(
        FileChannelRow.__table__.delete().where(FileChannelRow.name == 'chg')))
    rt.file_transfer.reload()
    assert rt.file_transfer.pollers() == {}
    path = drop(tmp_path / 'in', 'c.json', '{"n": 3}')
    gevent.sleep(0.3)
    assert path.exists()


def test_with_a_marker_a_file_waits_for_it_and_the_marker_goes_with_the_file(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'marked')
    store_channel(rt, 'marked', tmp_path / 'in', topics=['marked'], complete_when='marker', marker_suffix='.ok',
                  recursive=True, after='move', move_to='processed/{name}')
    path = drop(tmp_path / 'in', 'm.json', '{"m": 1}')
    poller = rt.file_transfer.pollers()['marked']
    polls = poller.polls
    wait_until(lambda: poller.polls >= polls + 5, TIMEOUT, message='polls without the marker')
    assert path.exists() and data_of(rt, 'marked') == []
    drop(tmp_path / 'in', 'm.json.ok', '')
    wait_until(gone(path), TIMEOUT, message='processed once the marker is there')
    assert files_in(tmp_path / 'in') == []  # the marker removed with its file
    assert files_in(tmp_path / 'in' / 'processed') == ['m.json']
    polls = poller.polls
    wait_until(lambda: poller.polls >= polls + 3, TIMEOUT, message='more polls')
    assert data_of(rt, 'marked') == [{'m': 1}]  # the processed directory is not polled, though recursive


def test_records_too_large_for_one_invocation_fail_the_file(make_rt: Callable[..., TestRuntime], tmp_path: Path,
                                                             recorder: Recorder) -> None:
    rt = make_rt(Sink)
    rt.file_transfer.stop()
    transfer = make_transfer(rt, this_owner())
    transfer._max_message_size = 64
    store_channel(rt, 'huge', tmp_path / 'in', format='text', records='each', service='ft.sink')
    transfer.start()
    try:
        path = drop(tmp_path / 'in', 'h.txt', ''.join(f'line {i:04d} of a file too large to send whole\n'
                                                      for i in range(10)))
        wait_until(gone(path), TIMEOUT, message='failed')
    finally:
        transfer.stop()
    report = json.loads((tmp_path / 'in' / 'errors' / 'h.txt.error.json').read_text())
    assert 'too large for one invocation of ft.sink' in report['reason']
    assert recorder['sink'] == []


def test_an_sftp_directory_is_processed_exactly_once_like_a_local_one(
        make_rt: Callable[..., TestRuntime], sshd: SshServer, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in sshd.secret_env.items():
        monkeypatch.setenv(name, value)
    rt = make_rt()
    topic_with_pull(rt, 'remote')
    inbox = sshd.root / 'inbox'
    inbox.mkdir()
    store_channel(rt, 'remote', inbox, format='csv', topics=['remote'], after='move',
                  move_to='processed/{date}/{name}', batch_size=2, sftp_host=sshd.host, sftp_port=sshd.port,
                  sftp_username=sshd.username, sftp_private_key=sshd.key_reference,
                  sftp_host_key=sshd.host_key_line)
    first = drop(inbox, 'remote 1.csv', csv_text([(1, 1), (2, 2), (3, 3)]))
    wait_until(gone(first), TIMEOUT, message='processed over SFTP')
    again = drop(inbox, 'remote 2.csv', csv_text([(1, 1), (2, 2), (3, 3)]))
    wait_until(gone(again), TIMEOUT, message='the copy handled')
    assert [(d['id'], ext) for d, ext, _ in published(rt, 'remote')] == [
        ('1', 'remote 1.csv'), ('2', 'remote 1.csv'), ('3', 'remote 1.csv')]
    assert [(r.file_name, r.state) for r in runs(rt, 'remote')] == [('remote 1.csv', 'done'),
                                                                    ('remote 2.csv', 'skipped')]
    (day,) = (inbox / 'processed').iterdir()
    assert files_in(day) == ['remote 1.csv', 'remote 2.csv']


# The broker's batch publication, which file channels rest on


def test_prepared_publications_and_other_work_commit_together_or_not_at_all(
        make_rt: Callable[..., TestRuntime]) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'batch')
    rt.catalog.create_topic('dropped', on_no_subs='drop')
    pubs = [rt.broker.prepare('batch', {'n': n}, publisher='file:x', ext_client_id='f.csv') for n in range(3)]
    assert all(p is not None and p.has_gd for p in pubs)
    assert rt.broker.prepare('dropped', {'n': 0}) is None  # no subscribers: dropped, as publish() would
    with pytest.raises(TopicNotFound):
        rt.broker.prepare('no.such.topic', {'n': 0})
    rt.broker.settings.max_message_size = 10
    with pytest.raises(MessageTooLarge):
        rt.broker.prepare('batch', {'n': 'x' * 20})
    assert data_of(rt, 'batch') == []  # nothing is stored by prepare

    class Refused(Exception):
        pass

    def refuse(conn: Any) -> None:
        conn.execute(insert(FileChannelRow).values(name='written', definition='{}', is_active=True, origin='api',
                                                   owner='', updated_at=0.0))
        raise Refused
    with pytest.raises(Refused):
        rt.broker.store_prepared([p for p in pubs if p is not None], refuse)
    assert data_of(rt, 'batch') == []

    def names() -> list[str]:
        return run_transaction(rt.engine, lambda conn: list(conn.execute(select(FileChannelRow.name)).scalars()),
                               write=False)
    assert names() == []

    def accept(conn: Any) -> str:
        conn.execute(insert(FileChannelRow).values(name='written', definition='{}', is_active=True, origin='api',
                                                   owner='', updated_at=0.0))
        return 'stored'
    assert rt.broker.store_prepared([p for p in pubs if p is not None], accept) == 'stored'
    assert data_of(rt, 'batch') == [{'n': 0}, {'n': 1}, {'n': 2}]
    assert names() == ['written']


def test_runs_older_than_history_days_are_deleted_except_those_of_channels_that_leave_files(
        make_rt: Callable[..., TestRuntime], tmp_path: Path) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'hist')
    store_channel(rt, 'deleting', tmp_path / 'a', topics=['hist'])
    store_channel(rt, 'leaving', tmp_path / 'b', topics=['hist'], after='leave')
    for directory, channel in (('a', 'deleting'), ('b', 'leaving')):
        drop(tmp_path / directory, 'x.json', '{"x": 1}')
        wait_until(lambda channel=channel: [r.state for r in runs(rt, channel)] == ['done'], TIMEOUT,
                   message=f'{channel} processed')
    days = rt.settings.file_transfer.history_days
    assert rt.file_transfer.sweep_history(now=time.time() + (days - 1) * 86400) == 0  # not old enough yet
    assert rt.file_transfer.sweep_history(now=time.time() + (days + 1) * 86400) == 1
    assert runs(rt, 'deleting') == []
    assert [r.state for r in runs(rt, 'leaving')] == ['done']


def test_a_file_whose_name_is_too_long_to_claim_is_logged_once_and_the_others_go_on(
        make_rt: Callable[..., TestRuntime], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    rt = make_rt()
    topic_with_pull(rt, 'names')
    with caplog.at_level(logging.WARNING, logger='runtime.files'):
        store_channel(rt, 'names', tmp_path / 'in', topics=['names'])
        long_name = 'a' * 240 + '.json'  # a legal name, but its claim name would pass 255 bytes
        drop(tmp_path / 'in', long_name, '{"n": "long"}')
        path = drop(tmp_path / 'in', 'b.json', '{"n": "short"}')
        wait_until(gone(path), TIMEOUT, message='the other file processed')
        poller = rt.file_transfer.pollers()['names']
        polls = poller.polls
        wait_until(lambda: poller.polls >= polls + 3, TIMEOUT, message='more polls')
    assert data_of(rt, 'names') == [{'n': 'short'}]
    assert files_in(tmp_path / 'in') == [long_name]
    assert len([r for r in caplog.records if 'cannot be claimed' in r.getMessage()]) == 1


@pytest.mark.parametrize('case', ['processed', 'errors'])
def test_a_file_whose_move_is_refused_is_parked_once_and_shown_failed(
        make_rt: Callable[..., TestRuntime], tmp_path: Path, caplog: pytest.LogCaptureFixture, case: str) -> None:
    # Issue 33, defect 6: a processed or errors directory that is a link out of the tree refuses the
    # move; the file must not be taken again at every poll (one run row, one log line).
    rt = make_rt()
    topic_with_pull(rt, 'parked')
    inbox, outside = tmp_path / 'in', tmp_path / 'outside'
    inbox.mkdir()
    outside.mkdir()
    os.symlink(outside, inbox / case)
    with caplog.at_level(logging.WARNING, logger='runtime.files'):
        store_channel(rt, 'parked', inbox, topics=['parked'], after='move', move_to='processed/{name}',
                      error_dir='errors')
        path = drop(inbox, 'a.json', '{"n": 1}' if case == 'processed' else '{"n": ')
        wait_until(gone(path), TIMEOUT, message='the file taken')
        poller = rt.file_transfer.pollers()['parked']
        polls = poller.polls
        wait_until(lambda: poller.polls >= polls + 5, TIMEOUT, message='more polls')
    [run] = runs(rt, 'parked')
    assert run.state == 'failed' and 'symbolic link' in run.error and 'parked as a.json.conduit-parked.' in run.error
    assert list(outside.iterdir()) == []
    [parked] = [n for n in files_in(inbox) if n not in (case,)]
    assert parked.startswith('a.json.conduit-parked.'), files_in(inbox)
    lines = [r for r in caplog.records if 'a.json' in r.getMessage() and r.levelno >= logging.ERROR]
    assert len(lines) == 1 and 'parked as' in lines[0].getMessage(), [r.getMessage() for r in caplog.records]
    assert 'until taken over' not in caplog.text
    assert data_of(rt, 'parked') == ([{'n': 1}] if case == 'processed' else [])
    # The admin API shows it.
    answer = admin_client(rt).simulate_get('/admin/file-channels/parked/runs').json
    assert [(r['state'], 'parked as' in r['error']) for r in answer['runs']] == [('failed', True)]
