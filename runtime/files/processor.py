"""Processing of one claimed file, exactly once: ``FileProcessor``.

The poller hands over a file it has claimed (renamed in place to a claim name, see
``runtime.files.claims``). The processor:

1. hashes the content (sha256, streamed in 1 MiB chunks);
2. decides, in one transaction under a per-channel lock (``statements.lock_channel``), from the
   channel's runs of that content: a done run → the file is *skipped* (logged, a 'skipped' run
   recorded, the ``after`` action done) unless the channel reprocesses identical content; a failed
   run → it is resumed (it fails at the same record again, nothing is published twice); a running
   run whose owner is gone → taken over and resumed; a running run whose owner still holds its
   claim (two files of identical content claimed at once) → this file is put back for a later poll;
   none → a new running run;
3. loads, as a multiset, the digests of records that earlier failed runs of the same file name
   published (a partly bad file fixed and dropped again): a record found there is skipped once;
4. reads the records (``runtime.files.parsers``) and publishes them in batches of ``batch_size``:
   a batch's publications and the run's progress (``records_done``) are committed in ONE
   transaction (``Broker.store_prepared``), so a crash between batches resumes exactly after the
   last committed batch. Progress is a compare-and-set on the run's owner: a worker that was taken
   for dead and lost its run commits nothing more;
5. on a bad record (parse error, a publication the topic refuses, a service failing past its
   retries): commits the good records before it together with the run marked failed and the
   digests of every record the run published, moves the file to ``error_dir`` and writes
   ``<name>.error.json`` beside it;
6. on success: marks the run done (earlier failed runs of the file name superseded) in the
   transaction of the last batch, then deletes, moves or leaves the file.

Services: with ``invoke_per = 'record'`` each record is invoked before its batch commits, with
``invoke_per = 'file'`` once after the last record with ``{file_name, path, size, data}``.
Invocations are at least once around a crash: at most the records of one uncommitted batch (or the
one file invocation) run again. Publications are exactly once.

Trouble that is not the file's (the database or the directory unavailable, a topic full) puts
the file back under its name, to be resumed from its last committed batch at a later poll.

Small files (most of them) take a shorter way when the channel invokes no service: read once into
memory, their records fit one batch, and the check that their content and name are new, the
publications and the run (done at once) are one transaction (``_in_one_transaction``).

This module is longer than most (about 600 lines) on purpose: it is one algorithm whose steps,
read in order, are the exactly-once argument; split up, the argument would be spread over files.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import posixpath
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import gevent
from sqlalchemy import Connection

from runtime.errors import (
    ConduitError,
    FileParseError,
    FileTransferError,
    MessageTooLarge,
    SourceUnavailable,
    StorageUnavailable,
    TopicFull,
)
from runtime.files import claims, naming, parsers, statements
from runtime.files.definition import FileChannelDef
from runtime.files.sources import Entry, Source
from runtime.files.statements import RunInfo, RunLost
from runtime.pubsub.message import Publication
from runtime.util.json_limits import JsonLimits
from runtime.util.timefmt import iso

_log = logging.getLogger(__name__)

#: Bytes read at a time when hashing a file.
HASH_CHUNK_BYTES = 1024 * 1024

#: What separates the claim owner from the processing's own token in a run's owner.
RUN_OWNER_MARK = '/'

#: Files up to this size are read once, into memory, for their hash and their records.
SMALL_FILE_BYTES = 1024 * 1024

#: Longest ext_client_id of a publication (the file name is cut there).
MAX_EXT_CLIENT_ID_CHARS = 200

#: Numeric suffixes tried for a free name in the error or move directory before giving up.
MAX_NAME_TRIES = 1000

#: Times the start of a run is decided again when another worker changed the run meanwhile.
MAX_DECIDE_TRIES = 3

#: What the processing of one file came to.
DONE, SKIPPED, FAILED, BUSY, RETRY, LOST, STOPPED = 'done', 'skipped', 'failed', 'busy', 'retry', 'lost', 'stopped'

#: Checks and prepares one publication (``Broker.prepare``).
Prepare = Callable[..., Publication | None]
#: Stores prepared publications and runs work(conn) in one transaction (``Broker.store_prepared``).
StorePrepared = Callable[[list[Publication], Callable[[Connection], Any] | None], Any]
#: Runs a service: run_service(name, data, raw_request) -> its response payload.
RunService = Callable[[str, Any, dict[str, Any]], Any]

#: Errors of the moment, not of the file: the file is put back and taken again at a later poll.
_TRANSIENT = (StorageUnavailable, TopicFull, FileTransferError, OSError)


class _NotNew(Exception):
    """A run of the file's content or name exists: the one-transaction way does not apply."""


class _RecordFailed(Exception):
    """A record cannot be processed: the file fails there."""

    def __init__(self, index: int | None, line: int | None, reason: str) -> None:
        super().__init__(reason)
        self.index = index
        self.line = line
        self.reason = reason


@dataclass
class ChannelContext:
    """What every file of one channel is processed with (the poller builds it)."""

    channel: FileChannelDef
    source: Source
    owner: str
    prepare: Prepare
    store_prepared: StorePrepared
    run_service: RunService
    json_limits: JsonLimits
    max_message_size: int
    claim_timeout_secs: float
    #: Whether a claim of this file name by this owner, other than the given claim path, is held now.
    claim_alive: Callable[[str, str, str], bool] = lambda _file_name, _owner, _exclude: True
    #: Counts for metrics: count(channel, what, n) with what in processed/failed/skipped/published.
    count: Callable[[str, str, int], None] = lambda _channel, _what, _n: None
    #: Called after each batch is committed: after_batch(channel, file_name, batches) (tests stop there).
    after_batch: Callable[[str, str, int], None] | None = None
    #: Whether the channel's poller is stopping: a file in progress is put back at its next batch.
    stopping: Callable[[], bool] = lambda: False
    #: A file left in place (after = leave): left(path, size, mtime), so the poller does not take it again.
    left: Callable[[str, int, float], None] = lambda _path, _size, _mtime: None
    #: The same file system or server rooted at '/', for an error_dir or move_to outside the directory.
    wide_source: Callable[[], Source] | None = None


def claim_owner(run_owner: str) -> str:
    """The claim owner (``<host>_<pid>``) of a run's owner."""
    return run_owner.partition(RUN_OWNER_MARK)[0]


def claim_path(path: str, owner: str, now: float) -> str:
    """Where a file at path is while claimed by owner since now (same directory)."""
    directory, name = posixpath.split(path)
    return posixpath.join(directory, claims.claim_name(name, owner, now))


@dataclass
class _Progress:
    """Counts of a run: committed, and pending in the batch being built."""

    records_done: int
    published: int
    invoked: int
    pubs: list[Publication] = field(default_factory=list)
    batches: int = 0


class FileProcessor:
    """Processes one claimed file of a channel (one instance per file)."""

    def __init__(self, ctx: ChannelContext, entry: Entry, claimed_path: str, claimed_at: float) -> None:
        self.ctx = ctx
        self.ch = ctx.channel
        #: The file as listed before it was claimed: its original path, size and mtime.
        self.entry = entry
        self.claim_path = claimed_path
        self.claim_at = claimed_at
        self.size = entry.size
        self.content_hash = ''
        #: The whole content of a small file, read once for the hash and the records.
        self._content: bytes | None = None
        #: Who owns the run while this processor works on it: the claim owner and a token of this
        #: processing, so that two processings in one process (a poller restarted while a file of the
        #: old one still runs) never pass each other's compare-and-set of the run's progress.
        self.run_owner = f'{ctx.owner}{RUN_OWNER_MARK}{secrets.token_hex(4)}'
        #: The run row of this processing, and for a skipped one the records of the done run it points at.
        self._run_id: int | None = None
        self._skipped_records: int | None = None

    @property
    def _label(self) -> str:
        return f'file channel {self.ch.name}: {self.entry.path}'

    def run(self) -> str:
        """Process the file: DONE, SKIPPED, FAILED, BUSY, RETRY, LOST or STOPPED (raises only GreenletExit)."""
        started = time.monotonic()
        try:
            return self._run(started)
        except gevent.GreenletExit:
            raise  # abandoned: the claim and a running run stay for the next claimer
        except RunLost:
            _log.warning('%s: another worker took the file over (this one was taken for dead); stopped', self._label)
            return LOST
        except _TRANSIENT as e:
            _log.warning('%s: not processed now (%s); taken again at a later poll', self._label, _reason(e))
            self._put_back()
            return RETRY
        except Exception:
            _log.exception('%s: processing failed unexpectedly; taken again at a later poll', self._label)
            self._put_back()
            return RETRY

    def _run(self, started: float) -> str:
        self.content_hash, self.size = self._hash()
        if self._content is not None and not self.ch.service:
            outcome = self._in_one_transaction(started)
            if outcome is not None:
                return outcome
        decision = self._decide()
        if decision is None:
            _log.info('%s: a file of the same content is being processed now; put back for a later poll',
                      self._label)
            self._put_back()
            return BUSY
        kind, run, digests = decision
        if kind == SKIPPED:
            when = iso(run.finished_at) if run.finished_at is not None else 'an unknown time'
            _log.info('file channel %s: %s skipped: same content as %s processed at %s', self.ch.name,
                      self.entry.path, run.file_name, when)
            self.ctx.count(self.ch.name, 'skipped', 1)
            self._after()
            return SKIPPED
        return self._process(run, digests, started)

    # Steps

    def _hash(self) -> tuple[str, int]:
        """The sha256 of the content and its length, streamed; a small file's content is kept (read once)."""
        sha = hashlib.sha256()
        size = 0
        with self.ctx.source.open_read(self.claim_path) as stream:
            if self.entry.size <= SMALL_FILE_BYTES:
                content = stream.read(SMALL_FILE_BYTES + 1)
                if len(content) <= SMALL_FILE_BYTES:
                    content += stream.read(1)  # a short read is not the end: only an empty one is
                if len(content) <= SMALL_FILE_BYTES:
                    self._content = content
                    return hashlib.sha256(content).hexdigest(), len(content)
                sha.update(content)  # it grew since it was listed: streamed after all
                size = len(content)
            while True:
                chunk = stream.read(HASH_CHUNK_BYTES)
                if not chunk:
                    break
                sha.update(chunk)
                size += len(chunk)
                gevent.sleep(0)  # a large file must not keep the other greenlets waiting
        return sha.hexdigest(), size

    def _decide(self) -> tuple[str, RunInfo, Counter[str]] | None:
        """(SKIPPED, the done run, _) or ('start', this worker's run, digests); None: put the file back."""
        for _ in range(MAX_DECIDE_TRIES):
            kind, run, digests = self.ctx.store_prepared([], self._begin)
            if kind != 'check':
                return kind, run, digests
            # A running run of this content: its owner died mid-file, or another file of the same content
            # is being processed right now. Its claim tells which (looked at outside the transaction).
            if self.ctx.claim_alive(run.file_name, claim_owner(run.owner), self.claim_path):
                return None
            taken = self.ctx.store_prepared([], lambda conn, r=run: self._take_over(conn, r))
            if taken is not None:
                _log.info('%s: resuming run #%d of %s left by %s after %d record(s)', self._label, taken[0].id,
                          run.file_name, run.owner, taken[0].records_done)
                return 'start', *taken
        return None

    def _begin(self, conn: Connection) -> tuple[str, Any, Counter[str]]:
        ch, entry = self.ch, self.entry
        statements.lock_channel(conn, ch.name)
        runs = statements.runs_by_hash(conn, ch.name, self.content_hash)
        running = next((r for r in runs if r.state == statements.RUNNING), None)
        if running is not None:
            return 'check', running, Counter()
        latest = runs[0] if runs else None
        if latest is not None and latest.state == statements.DONE and not ch.reprocess_same:
            self._skipped_records = latest.records_done
            self._run_id = statements.insert_run(
                                  conn, channel=ch.name, file_name=entry.path, size=self.size, mtime=entry.mtime,
                                  content_hash=self.content_hash, state=statements.SKIPPED, owner=self.run_owner,
                                  error=f'same content as {latest.file_name} (run #{latest.id})')
            return SKIPPED, latest, Counter()
        if latest is not None and latest.state in (statements.FAILED, statements.SUPERSEDED):
            run = statements.take_over_run(conn, latest.id, from_state=latest.state, from_owner=latest.owner,
                                           owner=self.run_owner, file_name=entry.path, size=self.size,
                                           mtime=entry.mtime)
            if run is not None:  # always, under the channel's lock
                return 'start', run, statements.failed_digests(conn, ch.name, entry.path, run.id)
        run_id = statements.insert_run(conn, channel=ch.name, file_name=entry.path, size=self.size,
                                       mtime=entry.mtime, content_hash=self.content_hash,
                                       state=statements.RUNNING, owner=self.run_owner)
        run = RunInfo(id=run_id, file_name=entry.path, state=statements.RUNNING, owner=self.run_owner,
                      records_done=0, published=0, invoked=0, finished_at=None)
        return 'start', run, statements.failed_digests(conn, ch.name, entry.path, run_id)

    def _in_one_transaction(self, started: float) -> str | None:
        """A small file published whole in one transaction with its run, done; None: take the usual way.

        Most files are small and new: their records fit one batch, and no run of their content or
        name exists. Their publications and a run already done are then committed together (one
        commit per file instead of two). Anything else — more records than a batch, a bad record, a
        run of the same content or a failed run of the same name found inside the transaction —
        leaves nothing stored and the file goes the usual way, which handles it. Channels that invoke
        a service never come here: a service must not be invoked for a file that turns out to be a
        duplicate.
        """
        ch = self.ch
        pubs: list[Publication] = []
        count = 0
        records = self._records()
        try:
            for record in records:
                count += 1
                if count > ch.batch_size:
                    return None
                progress = _Progress(records_done=0, published=0, invoked=0)
                self._act(record, progress, per_record=False)
                pubs.extend(progress.pubs)
        except (_RecordFailed, FileParseError):
            return None
        finally:
            records.close()

        def work(conn: Connection) -> None:
            statements.lock_channel(conn, ch.name)
            if not statements.is_new(conn, ch.name, self.content_hash, self.entry.path):
                raise _NotNew
            self._run_id = statements.insert_run(
                                  conn, channel=ch.name, file_name=self.entry.path, size=self.size,
                                  mtime=self.entry.mtime, content_hash=self.content_hash, state=statements.DONE,
                                  owner=self.run_owner, records_done=count, published=len(pubs))
        try:
            self.ctx.store_prepared(pubs, work)
        except _NotNew:
            return None
        self._done(count, len(pubs), 0, len(pubs), started)
        return DONE

    def _take_over(self, conn: Connection, run: RunInfo) -> tuple[RunInfo, Counter[str]] | None:
        taken = statements.take_over_run(conn, run.id, from_state=statements.RUNNING, from_owner=run.owner,
                                         owner=self.run_owner, file_name=self.entry.path, size=self.size,
                                         mtime=self.entry.mtime)
        if taken is None:
            return None
        return taken, statements.failed_digests(conn, self.ch.name, self.entry.path, taken.id)

    def _records(self) -> Iterator[parsers.Record]:
        """The file's records, streamed (the caller closes nothing: the generator does)."""
        ch = self.ch
        opened = io.BytesIO(self._content) if self._content is not None else self.ctx.source.open_read(self.claim_path)
        with opened as stream:
            yield from parsers.read_records(stream, ch.format, records=ch.record_mode, encoding=ch.encoding,
                                            csv_delimiter=ch.csv_delimiter,
                                            max_record_bytes=self.ctx.max_message_size,
                                            json_limits=self.ctx.json_limits)

    def _process(self, run: RunInfo, known: Counter[str], started: float) -> str:
        ch = self.ch
        self._run_id = run.id
        start = run.records_done
        progress = _Progress(records_done=start, published=run.published, invoked=run.invoked)
        digests = Counter(known)  # consumed as records match; `known` stays whole for the failure path
        per_file = bool(ch.service) and ch.invoke_per == 'file'
        per_record = bool(ch.service) and ch.invoke_per == 'record'
        collected: list[Any] = []
        collected_bytes = 0
        already = 0
        index = start  # records seen so far
        records = self._records()
        try:
            while True:
                try:
                    record = next(records)
                except StopIteration:
                    break
                except FileParseError as e:
                    raise _RecordFailed(e.record_index, e.line, e.reason) from None
                index = record.index + 1
                duplicate = False
                if digests:
                    d = parsers.digest(record)
                    if digests[d] > 0:
                        digests[d] -= 1
                        duplicate = True
                if per_file:
                    collected_bytes += len(record.raw)
                    if collected_bytes > self.ctx.max_message_size:
                        raise _RecordFailed(record.index, record.line,
                                            f'the records are too large for one invocation of {ch.service}: more '
                                            f'than {self.ctx.max_message_size} bytes (the largest message allowed)')
                    collected.append(record.data)
                if record.index < start:
                    continue  # committed before a crash or a failure
                if duplicate:
                    already += 1
                else:
                    self._act(record, progress, per_record)
                if index - progress.records_done >= ch.batch_size:
                    self._commit(run, progress, index)
                    if self.ctx.stopping():
                        _log.info('%s: stopping after %d record(s); resumed at a later poll', self._label, index)
                        self._put_back()
                        return STOPPED
                    if not self._renew_claim():
                        _log.warning('%s: the claim was taken over by another worker; stopped', self._label)
                        return LOST
                    if self.ctx.after_batch is not None:
                        self.ctx.after_batch(ch.name, self.entry.path, progress.batches)
            if per_file:
                data = collected[0] if ch.record_mode == 'file' and collected else collected
                if ch.record_mode == 'file' and not collected:
                    data = None
                self._invoke({'file_name': self.entry.name, 'path': self._full_path(), 'size': self.size,
                              'data': data}, None, None, {'file_name': self.entry.path})
                progress.invoked += 1
        except _RecordFailed as e:
            records.close()
            return self._fail(run, known, progress, e, index if e.index is None else e.index)
        finally:
            records.close()
        if already:
            _log.info('%s: %d record(s) already published by an earlier failed run of this file were skipped',
                      self._label, already)
        superseded = self.ctx.store_prepared(progress.pubs, lambda conn: statements.finish_run(
            conn, run.id, self.run_owner, channel=ch.name, file_name=self.entry.path, records_done=index,
            published=progress.published + len(progress.pubs), invoked=progress.invoked))
        if superseded:
            _log.debug('%s: %d earlier failed run(s) of the file superseded', self._label, superseded)
        self._done(index, progress.published + len(progress.pubs), progress.invoked, len(progress.pubs), started)
        return DONE

    def _done(self, records: int, published: int, invoked: int, just_published: int, started: float) -> None:
        """Count and log a file processed, then delete, move or leave it."""
        ch = self.ch
        self.ctx.count(ch.name, 'processed', 1)
        self.ctx.count(ch.name, 'published', just_published)
        _log.info('file channel %s: %s done: %d record(s), %d message(s) published%s in %.3f s', ch.name,
                  self.entry.path, records, published, f', {invoked} invocation(s)' if ch.service else '',
                  time.monotonic() - started)
        self._after()

    def _act(self, record: parsers.Record, progress: _Progress, per_record: bool) -> None:
        """Prepare a record's publications and invoke the service for it; _RecordFailed if it cannot be."""
        ch = self.ch
        pubs = []
        ext_client_id = self.entry.path[:MAX_EXT_CLIENT_ID_CHARS]
        for topic in ch.topics:
            try:
                pub = self.ctx.prepare(topic, record.data, publisher=f'file:{ch.name}', ext_client_id=ext_client_id)
            except _TRANSIENT:
                raise
            except (ConduitError, ValueError, TypeError) as e:
                raise _RecordFailed(record.index, record.line, f'not published to {topic}: {_reason(e)}') from None
            if pub is not None:
                pubs.append(pub)
        if per_record:
            self._invoke(record.data, record.index, record.line,
                         {'file_name': self.entry.path, 'record': record.index + 1, 'line': record.line})
            progress.invoked += 1
        progress.pubs.extend(pubs)

    def _invoke(self, data: Any, index: int | None, line: int | None, raw_request: dict[str, Any]) -> None:
        """Run the channel's service, retried; _RecordFailed once the retries are spent."""
        ch = self.ch
        attempts = ch.invoke_retries + 1
        for attempt in range(1, attempts + 1):
            try:
                self.ctx.run_service(ch.service, data, raw_request)
                return
            except gevent.GreenletExit:
                raise
            except Exception as e:
                if attempt == attempts:
                    raise _RecordFailed(index, line, f'service {ch.service} failed {attempts} time(s): '
                                                     f'{_reason(e)}') from None
                _log.info('%s: service %s failed (attempt %d of %d), retried in %g s: %s', self._label, ch.service,
                          attempt, attempts, ch.invoke_retry_wait_secs, _reason(e))
                gevent.sleep(ch.invoke_retry_wait_secs)

    def _commit(self, run: RunInfo, progress: _Progress, records_done: int) -> None:
        """Store the batch's publications with the run's progress, in one transaction."""
        published = progress.published + len(progress.pubs)
        self.ctx.store_prepared(progress.pubs, lambda conn: statements.advance_run(
            conn, run.id, self.run_owner, records_done, published, progress.invoked))
        self.ctx.count(self.ch.name, 'published', len(progress.pubs))
        progress.pubs = []
        progress.published = published
        progress.records_done = records_done
        progress.batches += 1

    def _renew_claim(self) -> bool:
        """Rename the claim to a fresh time once a third of the timeout has passed; False if it was lost."""
        now = time.time()
        if now - self.claim_at < self.ctx.claim_timeout_secs / 3:
            return True
        renewed = claim_path(self.entry.path, self.ctx.owner, now)
        if renewed == self.claim_path:
            return True
        if not self.ctx.source.rename(self.claim_path, renewed):
            return False
        self.claim_path, self.claim_at = renewed, now
        return True

    # Failure

    def _fail(self, run: RunInfo, known: Counter[str], progress: _Progress, failed: _RecordFailed,
              at_index: int) -> str:
        """Commit the good records before the bad one with the run failed; move the file to the error directory."""
        ch = self.ch
        published = progress.published + len(progress.pubs)
        digests = self._published_digests(known, at_index)
        self.ctx.store_prepared(progress.pubs, lambda conn: statements.fail_run(
            conn, run.id, self.run_owner, records_done=at_index, published=published, invoked=progress.invoked,
            error=failed.reason, digests=digests))
        self.ctx.count(ch.name, 'published', len(progress.pubs))
        self.ctx.count(ch.name, 'failed', 1)
        record = None if failed.index is None else failed.index + 1
        _log.warning('file channel %s: %s failed at record %s (line %s): %s', ch.name, self.entry.path,
                     record if record is not None else '-', failed.line if failed.line is not None else '-',
                     failed.reason)
        report = {'channel': ch.name, 'file_name': self.entry.path, 'size': self.size,
                  'content_hash': self.content_hash, 'failed_at': iso(time.time()), 'record': record,
                  'line': failed.line, 'reason': failed.reason, 'published_before_error': at_index}
        try:
            source, claimed, target = self._place(posixpath.join(ch.error_dir, self.entry.name))
            source.makedirs(posixpath.dirname(target))
            moved = self._move_free(source, claimed, target)
            if moved is None:
                return FAILED
            body = json.dumps(report, ensure_ascii=False, indent=2).encode('utf-8') + b'\n'
            source.write_atomic(f'{moved}{claims.ERROR_REPORT_SUFFIX}', [body])
            self._remove_marker()
        except (*_TRANSIENT, ValueError) as e:
            self._not_moved(f'moving the failed file to {ch.error_dir}', e, f'{failed.reason}; then ')
        return FAILED

    def _published_digests(self, known: Counter[str], at_index: int) -> Counter[str]:
        """Digests of the records before at_index that this run published (those in `known` were not: skipped)."""
        if at_index <= 0:
            return Counter()
        remaining = Counter(known)
        ours: Counter[str] = Counter()
        records = self._records()
        try:
            for record in records:
                d = parsers.digest(record)
                if remaining[d] > 0:
                    remaining[d] -= 1
                else:
                    ours[d] += 1
                if record.index + 1 >= at_index:
                    break  # before the reader reaches the bad record
        finally:
            records.close()
        return ours

    # After

    def _after(self) -> None:
        """Delete, move or leave the processed (or skipped) file."""
        ch = self.ch
        try:
            if ch.after == 'delete':
                self.ctx.source.remove(self.claim_path)
                self._remove_marker()
            elif ch.after == 'move':
                values = naming.inbound_values(self.entry.path, ch.name, time.time())
                rendered = naming.render(ch.move_to, values, f'file channel {ch.name!r} move_to')
                source, claimed, target = self._place(rendered)
                directory = posixpath.dirname(target)
                if directory:
                    source.makedirs(directory)
                if self._move_free(source, claimed, target) is not None:
                    self._remove_marker()
            else:
                moved = self._move_free(self.ctx.source, self.claim_path, self.entry.path)
                if moved is not None:
                    self.ctx.left(moved, self.size, self.entry.mtime)
        except (*_TRANSIENT, ValueError) as e:
            self._not_moved(f'processed, but the {ch.after} action', e)

    def _not_moved(self, doing: str, e: BaseException, before: str = '') -> None:
        """A refused move parks the file (one ERROR line, the run failed); trouble that passes leaves the claim."""
        if isinstance(e, (SourceUnavailable, StorageUnavailable)):
            _log.error('%s: %s failed (%s); the file stays claimed and is taken again at a later poll (the content '
                       'is then skipped)', self._label, doing, _reason(e))
            return
        parked = f'{self.entry.path}{claims.PARKED_MARK}{int(time.time())}'
        try:
            done = self.ctx.source.rename(self.claim_path, parked)
        except Exception as park_error:  # noqa: BLE001 - said in the one line below
            done, why = False, _reason(park_error)
        else:
            why = 'the claim vanished or the name is taken'
        if not done:
            _log.error('%s: %s failed (%s), and the file could not be parked (%s); it stays claimed and is taken '
                       'again at a later poll', self._label, doing, _reason(e), why)
            return
        error = (f'{before}{doing} failed: {_reason(e)}; the file is parked as {parked} and not taken again until '
                 f'it is renamed back to {self.entry.name}')
        recorded = ''
        if self._run_id is not None:
            try:
                self.ctx.store_prepared([], lambda conn: statements.park_run(
                    conn, self._run_id, error=error, records_done=self._skipped_records))
            except Exception as store_error:  # noqa: BLE001 - said in the one line below
                recorded = f' (its run could not be marked failed: {_reason(store_error)})'
        _log.error('%s: %s failed (%s); parked as %s, not taken again until an operator renames it back to %s%s',
                   self._label, doing, _reason(e), parked, self.entry.name, recorded)

    def _place(self, target: str) -> tuple[Source, str, str]:
        """(source, the claim's path there, target's path there) for a target relative to the directory or absolute."""
        if not target.startswith('/'):
            return self.ctx.source, self.claim_path, target
        directory = self.ch.directory.rstrip('/')
        if target.startswith(directory + '/'):
            return self.ctx.source, self.claim_path, target[len(directory) + 1:]
        if not directory.startswith('/') or self.ctx.wide_source is None:
            raise FileTransferError(f'{target} is outside the directory {self.ch.directory}, which is not absolute')
        return self.ctx.wide_source(), f'{directory}/{self.claim_path}'.lstrip('/'), target.lstrip('/')

    def _move_free(self, source: Source, claimed: str, target: str) -> str | None:
        """Rename the claim to target, or to target with a numeric suffix if taken; None if the claim vanished."""
        stem, suffix = posixpath.splitext(target)
        for n in range(MAX_NAME_TRIES):
            candidate = target if n == 0 else f'{stem}-{n}{suffix}'
            if source.rename(claimed, candidate):
                return candidate
            if not source.exists(claimed):
                _log.warning('%s: the claimed file vanished before it could be moved', self._label)
                return None
        raise FileTransferError(f'no free name for {target} after {MAX_NAME_TRIES} tries')

    def _remove_marker(self) -> None:
        """Remove the marker file that made the file complete (it would otherwise stay forever)."""
        if self.ch.complete_when == 'marker':
            self.ctx.source.remove(self.entry.path + self.ch.marker_suffix)

    def _put_back(self) -> None:
        """Rename the claim back to the file's name, so that a later poll takes it again."""
        try:
            if not self.ctx.source.rename(self.claim_path, self.entry.path):
                _log.warning('%s: could not be put back under its name (taken by a new file, or the claim '
                             'vanished); its claim stays until taken over', self._label)
        except Exception as e:
            _log.warning('%s: could not be put back under its name (%s); its claim stays until taken over',
                         self._label, _reason(e))

    def _full_path(self) -> str:
        return posixpath.join(self.ctx.source.root, self.entry.path)


def _reason(error: BaseException) -> str:
    """An error as a log line or a report names it: its message, else its class."""
    text = str(error)
    if isinstance(error, MessageTooLarge | ConduitError | FileTransferError):
        return text or type(error).__name__
    return f'{type(error).__name__}: {text}' if text else type(error).__name__
