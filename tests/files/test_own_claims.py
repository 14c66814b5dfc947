"""A claim left by this very worker (it could not put the file back) is taken again at the next poll.

The SFTP server breaking off in the middle of a file and coming back a moment later leaves such a
claim: the processor stops, cannot rename the file back while the server is down, and its owner
process is alive, so the claim is not stale. Waiting out ``claim_timeout_secs`` (300 s) would hold
the file for five minutes; the poller knows which files its processors hold and takes the others.
The live scenario is ``tests/files/test_transfer_live.py`` (SFTP restarted mid-file); this
makes the claim by hand so that the path is taken every time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sqlalchemy import select

from runtime.db.blocking import run_transaction
from runtime.db.models import Message
from runtime.files.admin import FileChannelAdmin
from runtime.files.claims import claim_name
from runtime.files.definition import FileChannelDef
from runtime.testing import TestRuntime, make_settings, wait_until


def _published(rt: TestRuntime, topic: str) -> list[str]:
    return run_transaction(rt.engine, lambda conn: list(conn.execute(
        select(Message.data).where(Message.topic_name == topic)).scalars()), write=False)


def test_a_claim_of_this_worker_that_nothing_processes_is_taken_again(runtime_factory, db_url: str,
                                                                      tmp_path: Path) -> None:
    rt = runtime_factory(settings=make_settings(tmp_path / 'rt', db_url))
    rt.catalog.create_topic('own.claims')
    inbox = tmp_path / 'in'
    inbox.mkdir()
    # Claimed a moment ago by this worker, as a processor that could not rename it back leaves it.
    claimed = inbox / claim_name('rows.csv', rt.file_transfer.owner, time.time())
    claimed.write_text('id\n1\n2\n', encoding='utf-8')
    # A claim of another live owner of this host, just as fresh, is left alone.
    other = inbox / claim_name('other.csv', 'otherhost_1', time.time())
    other.write_text('id\n3\n', encoding='utf-8')
    FileChannelAdmin(rt.engine, rt.file_transfer.reload).create(FileChannelDef.from_values(
        {'name': 'own-claims', 'directory': str(inbox), 'format': 'csv', 'topics': ['own.claims'],
         'poll_interval_secs': 0.05, 'stable_polls': 1}, 'test'))
    wait_until(lambda: len(_published(rt, 'own.claims')) == 2, timeout=30, message='the own claim processed')
    wait_until(lambda: not claimed.exists(), timeout=30, message='the processed file deleted')
    assert sorted(json.loads(d)['id'] for d in _published(rt, 'own.claims')) == ['1', '2']
    assert other.exists()
