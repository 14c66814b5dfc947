"""The message archive: what the broker delivered, as files that Spark pipelines read.

A ``PubSubObserver`` that records, per subscription, every delivery attempt of a GD message
(outcome ``delivered`` or ``failed``, with the attempt number and the error) and every message
moved to a dead-letter queue (outcome ``dead_letter``, GD or not). Records are JSON Lines in
partitions by topic and UTC day of the event::

    var/archive/<topic-safe-name>/date=YYYY-MM-DD/part-<pid>-<n>.jsonl

Each line carries ``msg_id, topic, subscriber, sub_id, sub_kind, outcome, attempts, pub_time,
delivery_time`` (epoch seconds, and ``*_iso``), ``latency_ms`` (publication to the end of the
attempt), ``duration_ms`` (the handler's time), ``error``, ``reason`` (of a dead letter),
``priority, size, publisher, correl_id, mime_type`` and, unless ``include_data`` is off,
``data`` (the JSON value itself for JSON messages, else the text).

Directories are created 0700 and files 0600 (``runtime.util.datafiles``), whatever the umask.

Guarantees: at least once. A record is buffered in memory when the attempt ends and written
within ``flush_interval_secs`` (sooner past ``max_buffer``), on ``flush()`` and when the broker
stops, so a worker killed with -9 loses at most one interval of records, and a message delivered
again after a crash is recorded again (``msg_id`` and ``sub_id`` tell duplicates). Files are only
ever appended to, one complete line per record; a reader may see a half-written last line while a
flush is under way, which Spark's ``mode=DROPMALFORMED`` skips.

The hot path only appends a tuple to a list; serialising and writing run in gevent's thread
pool, so the hub never waits on the disk. JSON Lines rather than Parquet: it needs no extra
dependency in the server and is appendable; pipelines write their own results as Parquet or JSON.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from gevent.lock import Semaphore

from runtime.pubsub.observers import PubSubObserver
from runtime.pubsub.retry import REASON_UNRENDERABLE
from runtime.util import json_limits
from runtime.util.datafiles import open_private_append, private_dir
from runtime.util.timefmt import iso_millis

if TYPE_CHECKING:
    from runtime.config import ArchiveSection
    from runtime.pubsub.registry import SubInfo
    from runtime.pubsub.statements import Delivery

_log = logging.getLogger(__name__)

OUTCOME_DELIVERED = 'delivered'
OUTCOME_FAILED = 'failed'
OUTCOME_DEAD_LETTER = 'dead_letter'

#: Characters a topic keeps in its directory name; anything else becomes '_' plus a hash suffix.
_SAFE = re.compile(r'[^a-z0-9._-]')

#: Longest error text kept in a record.
MAX_ERROR_CHARS = 2000

_BASE64_SUFFIX = ';base64'

# One buffered record: (outcome, sub fields, delivery fields, event time, duration, error, reason).
_Record = tuple[Any, ...]


def safe_topic_name(topic: str) -> str:
    """The directory name of a topic: lower case, file-system safe, distinct for distinct topics.

    Topics compare case-insensitively, so case is folded. A name that had to be changed (a '/',
    a leading '.', any character outside ``[a-z0-9._-]``) gets a short hash of the topic so that,
    e.g., ``a/b`` and ``a_b`` never share a directory.
    """
    key = topic.lower()
    safe = _SAFE.sub('_', key).lstrip('.') or '_'
    if safe != key:
        safe = f'{safe}-{hashlib.sha1(key.encode()).hexdigest()[:8]}'
    return safe


def _data_json(data: str, mime_type: str) -> str:
    """The message's data as a JSON fragment, without decoding JSON data only to encode it again."""
    if mime_type == 'application/json':
        return data
    return json_limits.render(data).decode('utf-8', 'surrogatepass')


def encode_record(rec: _Record, include_data: bool) -> str:
    """One archive line (without the newline) from a buffered record."""
    (outcome, sub_id, sub_kind, subscriber, msg_id, topic, attempts, pub_time, priority, size, publisher,
     correl_id, mime_type, data, event_time, duration_secs, error, reason) = rec
    fields = {
        'msg_id': msg_id, 'topic': topic, 'subscriber': subscriber, 'sub_id': sub_id, 'sub_kind': sub_kind,
        'outcome': outcome, 'attempts': attempts,
        'pub_time': pub_time, 'pub_time_iso': iso_millis(pub_time),
        'delivery_time': event_time, 'delivery_time_iso': iso_millis(event_time),
        'latency_ms': round((event_time - pub_time) * 1000.0, 3),
        'duration_ms': None if duration_secs is None else round(duration_secs * 1000.0, 3),
        'error': error, 'reason': reason, 'priority': priority, 'size': size, 'publisher': publisher,
        'correl_id': correl_id, 'mime_type': mime_type,
    }
    line = json_limits.render(fields).decode('utf-8', 'surrogatepass')
    if not include_data:
        return line
    return f'{line[:-1]},"data":{_data_json(data, mime_type)}}}'


def _subscriber(sub: SubInfo) -> str:
    return sub.service or sub.security or sub.push_url or f'sub#{sub.id}'


class MessageArchive(PubSubObserver):
    """Buffers delivery records and appends them to partitioned JSON Lines files."""

    def __init__(self, settings: ArchiveSection, directory: Path,
                 spawn: Callable[..., gevent.Greenlet] | None = None) -> None:
        self.directory = directory
        self.include_data = settings.include_data
        self.flush_interval_secs = settings.flush_interval_secs
        self.max_buffer = settings.max_buffer
        self.max_file_bytes = settings.max_file_bytes
        self._spawn = spawn or gevent.spawn
        self._buffer: list[_Record] = []
        self._write_lock = Semaphore()
        self._flusher: gevent.Greenlet | None = None
        self._early_flush: gevent.Greenlet | None = None
        #: Per partition directory: (part number, bytes written) of this process's current file.
        self._parts: dict[Path, tuple[int, int]] = {}
        #: Records written since start, for tests and metrics.
        self.written = 0

    def __repr__(self) -> str:
        return f'MessageArchive({str(self.directory)!r})'

    # Observer methods (run in delivering greenlets: append and return)

    def on_start(self) -> None:
        """Start the periodic flusher."""
        if self._flusher is None or self._flusher.dead:
            self._flusher = self._spawn(self._flush_forever, name='archive-flusher')

    def on_stop(self) -> None:
        """Write everything still buffered."""
        self.flush()

    @property
    def buffered(self) -> int:
        """Records waiting for the next flush."""
        return len(self._buffer)

    def stop_flusher(self) -> None:
        """Stop the periodic flusher: records are then written only by flush(), a full buffer or the stop."""
        if self._flusher is not None:
            self._flusher.kill()

    def after_deliver(self, sub: SubInfo, delivery: Delivery, ok: bool, error: BaseException | None,
                      duration_secs: float) -> None:
        """Record one attempt at a GD message: delivered, or failed with its error."""
        if not delivery.has_gd:
            return
        text = None if ok else f'{type(error).__name__}: {error}'[:MAX_ERROR_CHARS]
        self._add(OUTCOME_DELIVERED if ok else OUTCOME_FAILED, sub, delivery, duration_secs, text, None)

    def after_dead_letter(self, sub: SubInfo, delivery: Delivery, reason: str, error: str) -> None:
        """Record a message moved to the dead-letter queue (GD or not)."""
        # Unrenderable JSON data is not JSON: it is archived as the string it is stored as, so that
        # the line stays valid JSON.
        self._add(OUTCOME_DEAD_LETTER, sub, delivery, None, (error or '')[:MAX_ERROR_CHARS], reason,
                  as_text=reason == REASON_UNRENDERABLE)

    def _add(self, outcome: str, sub: SubInfo, d: Delivery, duration_secs: float | None, error: str | None,
             reason: str | None, as_text: bool = False) -> None:
        mime = d.mime_type[:-len(_BASE64_SUFFIX)] if d.mime_type.endswith(_BASE64_SUFFIX) else d.mime_type
        data = None
        if self.include_data:
            data = json.dumps(d.data, ensure_ascii=False) if as_text and mime == 'application/json' else d.data
        self._buffer.append((outcome, sub.id, sub.kind, _subscriber(sub), d.msg_id, d.topic_name, d.delivery_count,
                             d.pub_time, d.priority, d.size, d.publisher, d.correl_id, mime,
                             data, time.time(), duration_secs, error, reason))
        if len(self._buffer) >= self.max_buffer and (self._early_flush is None or self._early_flush.dead):
            self._early_flush = self._spawn(self.flush, name='archive-flush')

    # Writing

    def flush(self) -> int:
        """Write every buffered record now (off the hub); returns how many were written."""
        with self._write_lock:
            records, self._buffer = self._buffer, []
            if not records:
                return 0
            try:
                gevent.get_hub().threadpool.spawn(self._write, records).get()
            except Exception:
                # Kept for the next flush: a full disk must not lose what was delivered.
                self._buffer[:0] = records
                _log.exception('archive: writing %d record(s) to %s failed; will retry', len(records),
                               self.directory)
                return 0
        self.written += len(records)
        return len(records)

    def _flush_forever(self) -> None:
        while True:
            gevent.sleep(self.flush_interval_secs)
            self.flush()

    def _write(self, records: list[_Record]) -> None:
        """Serialise and append records, grouped by partition (runs in a pool thread)."""
        by_partition: dict[Path, list[str]] = {}
        partitions: dict[tuple[str, int], Path] = {}
        for rec in records:
            key = (rec[5], int(rec[14] // 86400))
            partition = partitions.get(key)
            if partition is None:
                date = datetime.fromtimestamp(key[1] * 86400, UTC).strftime('%Y-%m-%d')
                partition = partitions[key] = self.directory / safe_topic_name(rec[5]) / f'date={date}'
            by_partition.setdefault(partition, []).append(encode_record(rec, self.include_data))
        for partition, lines in by_partition.items():
            self._append(partition, ('\n'.join(lines) + '\n').encode('utf-8'))

    def _append(self, partition: Path, data: bytes) -> None:
        number, size = self._parts.get(partition, (0, -1))
        if size < 0:
            private_dir(partition)  # records carry message data: owner-only, as every data file
            size = 0
        if size and size + len(data) > self.max_file_bytes:
            number, size = number + 1, 0
        path = partition / f'part-{os.getpid()}-{number}.jsonl'
        # One write of whole lines in append mode: readers never see records of two flushes interleaved.
        with open_private_append(path) as f:
            f.write(data)
        self._parts[partition] = (number, size + len(data))
