"""Every SQL statement of inbound file processing: channels, runs and the digests of failed runs.

Functions take an open ``Connection`` inside the caller's transaction, so that what must be atomic
(a batch's publications and the run's progress; a run's failure and its digests) is one transaction;
nothing here decides policy: ``runtime.files.processor`` does.

A run's progress is a compare-and-set on its owner: ``advance_run``, ``finish_run`` and
``fail_run`` raise ``RunLost`` when another worker has taken the run over (it took this worker for
dead), so that the transaction carrying the batch's publications is rolled back and nothing is
published twice.
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update

from runtime.db.models import FileChannelRow, FileDigest, FileRun

#: States of a run.
RUNNING, DONE, FAILED, SKIPPED, SUPERSEDED = 'running', 'done', 'failed', 'skipped', 'superseded'

#: Longest error text kept on a run.
MAX_ERROR_CHARS = 4000


class RunLost(Exception):
    """The run is no longer this worker's (another took it over): the transaction must not commit."""

    def __init__(self, run_id: int, owner: str) -> None:
        super().__init__(f'file run #{run_id} is no longer owned by {owner}')
        self.run_id = run_id


@dataclass(frozen=True)
class RunInfo:
    """What the processor needs of a run."""

    id: int
    file_name: str
    state: str
    owner: str
    records_done: int
    published: int
    invoked: int
    finished_at: float | None


def _info(row: Row[Any]) -> RunInfo:
    return RunInfo(id=row.id, file_name=row.file_name, state=row.state, owner=row.owner,
                   records_done=row.records_done, published=row.published, invoked=row.invoked,
                   finished_at=row.finished_at)


_RUN_COLUMNS = (FileRun.id, FileRun.file_name, FileRun.state, FileRun.owner, FileRun.records_done,
                FileRun.published, FileRun.invoked, FileRun.finished_at)


# Channels


def load_channels(conn: Connection) -> list[tuple[str, str, bool]]:
    """Every stored channel: (name, definition JSON without the name, is_active)."""
    return [(r.name, r.definition, r.is_active)
            for r in conn.execute(select(FileChannelRow.name, FileChannelRow.definition, FileChannelRow.is_active)
                                  .order_by(FileChannelRow.name)).all()]


def lock_channel(conn: Connection, channel: str) -> None:
    """Serialise the start of runs of one channel until the transaction ends.

    Two workers that claimed two files of identical content must not both find no run for that
    content and both start one. SQLite's write transactions already exclude each other; PostgreSQL
    takes a transaction-scoped advisory lock keyed on the channel's name.
    """
    if conn.dialect.name == 'postgresql':
        key = zlib.crc32(f'conduit_file_channel:{channel}'.encode()) - 2**31
        conn.exec_driver_sql('SELECT pg_advisory_xact_lock(%s)', (key,))


# Runs


def runs_by_hash(conn: Connection, channel: str, content_hash: str) -> list[RunInfo]:
    """A channel's runs of a content, newest first (skipped ones left out: they point at a done run)."""
    rows = conn.execute(select(*_RUN_COLUMNS).where(FileRun.channel == channel, FileRun.content_hash == content_hash,
                                                    FileRun.state != SKIPPED).order_by(FileRun.id.desc())).all()
    return [_info(r) for r in rows]


def insert_run(conn: Connection, *, channel: str, file_name: str, size: int, mtime: float, content_hash: str,
               state: str, owner: str, error: str = '', records_done: int = 0, published: int = 0) -> int:
    """A new run; one that is not running (skipped, or done at once) is finished now."""
    now = time.time()
    return conn.execute(insert(FileRun).values(
        channel=channel, file_name=file_name, size=size, mtime=mtime, content_hash=content_hash, state=state,
        records_done=records_done, published=published, invoked=0, owner=owner, started_at=now,
        finished_at=None if state == RUNNING else now, error=error[:MAX_ERROR_CHARS])).inserted_primary_key[0]


def is_new(conn: Connection, channel: str, content_hash: str, file_name: str) -> bool:
    """Whether a channel has no run of this content (but skipped ones) and no failed run of this file name."""
    seen = conn.execute(select(FileRun.id).where(
        FileRun.channel == channel, FileRun.content_hash == content_hash, FileRun.state != SKIPPED).limit(1)).first()
    if seen is not None:
        return False
    failed = conn.execute(select(FileRun.id).where(
        FileRun.channel == channel, FileRun.file_name == file_name, FileRun.state == FAILED).limit(1)).first()
    return failed is None


def take_over_run(conn: Connection, run_id: int, *, from_state: str, from_owner: str, owner: str, file_name: str,
                  size: int, mtime: float) -> RunInfo | None:
    """Make a run this worker's and running again, if it still is in from_state with from_owner; None if not."""
    done = conn.execute(update(FileRun).where(FileRun.id == run_id, FileRun.state == from_state,
                                              FileRun.owner == from_owner)
                        .values(state=RUNNING, owner=owner, file_name=file_name, size=size, mtime=mtime,
                                finished_at=None, error='')).rowcount
    if not done:
        return None
    return _info(conn.execute(select(*_RUN_COLUMNS).where(FileRun.id == run_id)).one())


def _owned(conn: Connection, run_id: int, owner: str, **values: object) -> None:
    done = conn.execute(update(FileRun).where(FileRun.id == run_id, FileRun.owner == owner, FileRun.state == RUNNING)
                        .values(**values)).rowcount
    if not done:
        raise RunLost(run_id, owner)


def advance_run(conn: Connection, run_id: int, owner: str, records_done: int, published: int, invoked: int) -> None:
    """Record the progress of a running run of this owner; RunLost if it is not that any more."""
    _owned(conn, run_id, owner, records_done=records_done, published=published, invoked=invoked)


def finish_run(conn: Connection, run_id: int, owner: str, *, channel: str, file_name: str, records_done: int,
               published: int, invoked: int) -> int:
    """Mark a run done, and the earlier failed runs of its file name superseded (their digests deleted).

    Returns how many failed runs were superseded.
    """
    _owned(conn, run_id, owner, state=DONE, records_done=records_done, published=published, invoked=invoked,
           finished_at=time.time())
    earlier = list(conn.execute(select(FileRun.id).where(
        FileRun.channel == channel, FileRun.file_name == file_name, FileRun.state == FAILED,
        FileRun.id != run_id)).scalars())
    if earlier:
        conn.execute(delete(FileDigest).where(FileDigest.run_id.in_(earlier)))
        conn.execute(update(FileRun).where(FileRun.id.in_(earlier)).values(state=SUPERSEDED))
    return len(earlier)


def fail_run(conn: Connection, run_id: int, owner: str, *, records_done: int, published: int, invoked: int,
             error: str, digests: Counter[str]) -> None:
    """Mark a run failed with its reason, and store the digests of the records it published."""
    _owned(conn, run_id, owner, state=FAILED, records_done=records_done, published=published, invoked=invoked,
           finished_at=time.time(), error=error[:MAX_ERROR_CHARS])
    conn.execute(delete(FileDigest).where(FileDigest.run_id == run_id))
    if digests:
        conn.execute(insert(FileDigest), [{'run_id': run_id, 'digest': d, 'count': n} for d, n in digests.items()])


def park_run(conn: Connection, run_id: int, *, error: str, records_done: int | None = None) -> None:
    """Mark a run failed with why its file was parked (its after action or error move was refused).

    A done run keeps its records_done, so a drop of the same content later resumes after its last
    record and publishes nothing again; a skipped run is given the records_done of the done run it
    pointed at for the same reason.
    """
    values: dict[str, object] = {'state': FAILED, 'finished_at': time.time(), 'error': error[:MAX_ERROR_CHARS]}
    if records_done is not None:
        values['records_done'] = records_done
    conn.execute(update(FileRun).where(FileRun.id == run_id).values(**values))


def failed_digests(conn: Connection, channel: str, file_name: str, exclude_run: int) -> Counter[str]:
    """The digests of records that earlier failed runs of a file name published, as a multiset."""
    rows = conn.execute(select(FileDigest.digest, FileDigest.count).join(FileRun, FileRun.id == FileDigest.run_id)
                        .where(FileRun.channel == channel, FileRun.file_name == file_name,
                               FileRun.state == FAILED, FileRun.id != exclude_run)).all()
    found: Counter[str] = Counter()
    for digest, count in rows:
        found[digest] += count
    return found


def finished_files(conn: Connection, channel: str, file_names: Collection[str]) -> dict[str, list[tuple[int, float]]]:
    """(size, mtime) of the done and skipped runs of these file names, by name."""
    found: dict[str, list[tuple[int, float]]] = {}
    names = list(file_names)
    for start in range(0, len(names), 500):  # bounded IN lists
        rows = conn.execute(select(FileRun.file_name, FileRun.size, FileRun.mtime).where(
            FileRun.channel == channel, FileRun.file_name.in_(names[start:start + 500]),
            FileRun.state.in_((DONE, SKIPPED)))).all()
        for name, size, mtime in rows:
            found.setdefault(name, []).append((size, mtime))
    return found


def delete_old_runs(conn: Connection, before: float, keep_channels: Iterable[str] = ()) -> int:
    """Delete finished runs (and their digests) that ended before a time; returns how many.

    Runs of keep_channels are kept (channels that leave files in place: their runs tell the
    pollers which files were processed already).
    """
    where = [FileRun.state != RUNNING, FileRun.finished_at.is_not(None), FileRun.finished_at < before]
    keep = list(keep_channels)
    if keep:
        where.append(FileRun.channel.not_in(keep))
    ids = list(conn.execute(select(FileRun.id).where(*where).limit(10000)).scalars())
    if not ids:
        return 0
    conn.execute(delete(FileDigest).where(FileDigest.run_id.in_(ids)))
    conn.execute(delete(FileRun).where(FileRun.id.in_(ids)))
    return len(ids)


def run_of(conn: Connection, run_id: int) -> RunInfo | None:
    """One run, or None."""
    row = conn.execute(select(*_RUN_COLUMNS).where(FileRun.id == run_id)).one_or_none()
    return _info(row) if row is not None else None
