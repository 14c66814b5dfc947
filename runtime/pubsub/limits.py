"""Depth limits of subscription queues, and the overflow log of publications past a limit.

A topic's ``max_depth_gd`` / ``max_depth_non_gd`` bound the messages waiting in the topic for a
subscriber (``TopicDepths``, read every ``depth_check_freq`` publications and counted in between) and
each subscription queue the topic feeds each subscription queue the topic feeds: a GD
publication is checked against ``max_depth_gd``, a non-GD one against ``max_depth_non_gd``, and a
queue's depth counts every message it holds (stored, or in the memory of the worker delivering it).
A publication that would go into a queue at the limit is refused whole with ``on_max_depth =
reject`` (``QueueFull``, 503: nothing is stored for anybody); with ``overflow`` that queue's copy is
appended to the overflow log and the other queues get the message as usual.

Cost on the publishing path: ``QueueDepths`` caches each queue's depth. It reads the depths from
the database (one query for all the queues due) once every ``depth_check_freq`` checks of a queue,
and in between counts this worker's own publications — when they are reserved, before their
commit, so that concurrent publishers of one worker never pass a limit together. A single worker
therefore enforces a limit exactly; with several, each one sees the others' publications at its next
read. Deliveries only lower a queue's real depth, and the count does not see them: a queue that looks
full is read again before a publication is turned away if this worker counted publications into it
since the last read (they may have been delivered meanwhile), and otherwise at most every
``FULL_RECHECK_SECS``, so that a drained queue takes publications again soon while a flood against a
full queue costs one query per second.

``OverflowLog``: one JSON Lines file per topic, created 0600 in a 0700 directory, never re-read; a
line that would take a file past ``pubsub.max_overflow_bytes`` is refused (``OverflowLogFull``, 503),
so that publishers cannot fill the disk through it.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from runtime.errors import OverflowLogFull, QueueFull
from runtime.util.datafiles import open_private_append, private_dir

if TYPE_CHECKING:
    from runtime.pubsub.message import Publication
    from runtime.pubsub.registry import SubInfo, TopicInfo

_log = logging.getLogger(__name__)

#: Least time between two reads of the depth of a queue that looks full.
FULL_RECHECK_SECS = 1.0

#: Reads the current depths of some queues: sub_id -> messages (a queue left out holds none).
ReadDepths = Callable[[list[int]], dict[int, int]]


class QueueDepths:
    """Cached depths of subscription queues, read every so many checks and counted in between."""

    def __init__(self, read: ReadDepths, clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self._clock = clock
        self._depths: dict[int, int] = {}
        #: Checks of a queue since its depth was last read.
        self._since_read: dict[int, int] = {}
        self._read_at: dict[int, float] = {}
        #: Publications reserved and not yet stored or given up (they may or may not be in a read).
        self._pending: dict[int, int] = {}
        #: Publications ever reserved, to tell which were reserved while a read was under way.
        self._reserved: dict[int, int] = {}
        #: The value of _reserved when the depth was last read: more since then means counted, not read.
        self._reserved_at_read: dict[int, int] = {}

    def full(self, subs: Sequence[SubInfo], limit: int, check_freq: int) -> list[tuple[SubInfo, int]]:
        """The queues among subs that hold limit messages or more, with their depths."""
        due = []
        for sub in subs:
            count = self._since_read.get(sub.id, check_freq)
            if count >= check_freq or sub.id not in self._depths:
                due.append(sub.id)
                count = 0  # concurrent publishers use the cached depth while this read is under way
            self._since_read[sub.id] = count + 1
        if due:
            self._refresh(due)
        now = self._clock()
        # .get: a subscription deleted while a read was under way is no longer cached.
        stale = [s.id for s in subs if self._depths.get(s.id, 0) >= limit and self._worth_reading(s.id, now)]
        if stale:
            self._refresh(stale)
        return [(s, self._depths.get(s.id, 0)) for s in subs if self._depths.get(s.id, 0) >= limit]

    def reserve(self, sub_ids: Collection[int]) -> None:
        """Count a publication into these queues before it is stored."""
        for sub_id in sub_ids:
            self._depths[sub_id] = self._depths.get(sub_id, 0) + 1
            self._pending[sub_id] = self._pending.get(sub_id, 0) + 1
            self._reserved[sub_id] = self._reserved.get(sub_id, 0) + 1

    def release(self, sub_ids: Collection[int], failed: Collection[int] = ()) -> None:
        """A reserved publication is stored, except in the queues of failed (not counted any more)."""
        for sub_id in sub_ids:
            self._pending[sub_id] = self._pending.get(sub_id, 1) - 1
        for sub_id in failed:
            if sub_id in self._depths:
                self._depths[sub_id] = max(0, self._depths[sub_id] - 1)

    def invalidate(self, keep: Collection[int]) -> None:
        """Read every queue again at its next check; forget queues not in keep (deleted subscriptions)."""
        self._since_read.clear()
        for cache in (self._depths, self._read_at, self._reserved_at_read):
            for sub_id in [i for i in cache if i not in keep]:
                del cache[sub_id]
        for sub_id in [i for i in self._reserved if i not in keep and not self._pending.get(i)]:
            self._reserved.pop(sub_id, None)
            self._pending.pop(sub_id, None)

    def _worth_reading(self, sub_id: int, now: float) -> bool:
        """Whether a queue that looks full may not be: counted publications may have been delivered."""
        return (self._reserved.get(sub_id, 0) > self._reserved_at_read.get(sub_id, 0)
                or now - self._read_at.get(sub_id, 0.0) >= FULL_RECHECK_SECS)

    def _refresh(self, sub_ids: list[int]) -> None:
        # A publication reserved before the read and stored during it may be counted twice: the
        # depth errs high, never low, until the next read.
        before = {i: (self._pending.get(i, 0), self._reserved.get(i, 0)) for i in sub_ids}
        stored = self._read(sub_ids)
        now = self._clock()
        for sub_id in sub_ids:
            pending, reserved = before[sub_id]
            self._depths[sub_id] = stored.get(sub_id, 0) + pending + self._reserved.get(sub_id, 0) - reserved
            self._read_at[sub_id] = now
            self._reserved_at_read[sub_id] = reserved


def within_queue_limits(depths: QueueDepths, overflow_log: OverflowLog, topic: TopicInfo, pub: Publication,
                        subs: list[SubInfo], limited: list[SubInfo], gd: bool) -> list[SubInfo]:
    """The subscriptions whose queues may take the publication; overflowed copies are logged.

    QueueFull (reject) or OverflowLogFull (overflow, log at its cap) refuse the whole publication.
    """
    limit = topic.max_depth_gd if gd else topic.max_depth_non_gd
    full = depths.full(limited, limit, topic.depth_check_freq)
    if not full:
        return subs
    if topic.on_max_depth == 'reject':
        sub, depth = full[0]
        # Named by id only: the publisher may not learn who else subscribes (label: security
        # definition, service, push host).
        raise QueueFull(topic.name, depth, f'sub#{sub.id}')
    overflowed = {sub.id for sub, _depth in full}
    overflow_log.overflow(pub, sorted(overflowed))
    return [s for s in subs if s.id not in overflowed]


class TopicDepths:
    """Messages waiting in topics for a subscriber: read every depth_check_freq checks, counted in between."""

    def __init__(self, read: Callable[[int, bool], int]) -> None:
        #: Reads a topic's depth: read(topic_id, has_gd) -> messages.
        self._read = read
        self._depths: dict[int, int] = {}
        self._since_read: dict[int, int] = {}

    def full(self, topic: TopicInfo, gd: bool) -> bool:
        """Whether the topic holds its max depth of such (GD or not) messages."""
        limit = topic.max_depth_gd if gd else topic.max_depth_non_gd
        count = self._since_read.get(topic.id, topic.depth_check_freq)
        if topic.id not in self._depths or count >= topic.depth_check_freq:
            self._depths[topic.id] = self._read(topic.id, gd)
            count = 0
        self._since_read[topic.id] = count + 1
        return self._depths[topic.id] >= limit

    def depth(self, topic_id: int) -> int:
        """The topic's depth as last read and counted."""
        return self._depths.get(topic_id, 0)

    def added(self, topic_id: int) -> None:
        """Count a publication kept in the topic."""
        self._depths[topic_id] = self._depths.get(topic_id, 0) + 1

    def clear(self) -> None:
        """Read every depth again (a new subscription may have taken a topic's backlog)."""
        self._depths.clear()


class OverflowLog:
    """Per-topic JSON Lines files of publications past a max depth, each capped in size."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        self.directory = directory
        self.max_bytes = max_bytes

    def path(self, topic_name: str) -> Path:
        """The overflow file of a topic."""
        safe = ''.join(c if c.isalnum() or c in '._-' else '_' for c in topic_name.strip('/')) or 'topic'
        return self.directory / f'{safe}.jsonl'

    def append(self, pub: Publication, sub_ids: Sequence[int] | None = None) -> Path:
        """Append a publication durably; sub_ids names the queues it overflowed (None: the topic itself).

        OverflowLogFull when the line would take the file past max_bytes (nothing is written).
        """
        record = {'msg_id': pub.msg_id, 'topic_name': pub.topic_name, 'data': pub.data, 'mime_type': pub.mime_type,
                  'priority': pub.priority, 'pub_time': pub.pub_time, 'expiration_time': pub.expiration_time,
                  'correl_id': pub.correl_id, 'in_reply_to': pub.in_reply_to, 'ext_client_id': pub.ext_client_id,
                  'publisher': pub.publisher}
        if pub.ext_pub_time:
            record['ext_pub_time'] = pub.ext_pub_time
        if sub_ids is not None:
            record['sub_ids'] = list(sub_ids)
        line = (json.dumps(record, ensure_ascii=False) + '\n').encode('utf-8')
        path = self.path(pub.topic_name)
        private_dir(self.directory)
        with open_private_append(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size + len(line) > self.max_bytes:
                raise OverflowLogFull(pub.topic_name, size, self.max_bytes)
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
        return path

    def overflow(self, pub: Publication, sub_ids: Sequence[int] | None = None) -> None:
        """Append a publication past a max depth (the topic's, or these queues') and log where it went.

        Written before the publication's commit: OverflowLogFull (the log at its cap) must refuse it
        before anything is stored.
        """
        path = self.append(pub, sub_ids)
        if sub_ids is None:
            _log.warning('topic %s is at its max depth: message %s written to %s', pub.topic_name, pub.msg_id, path)
        else:
            _log.warning('topic %s: the queues of %s are at the max depth: their copies of message %s written to %s',
                         pub.topic_name, ', '.join(f'sub#{i}' for i in sub_ids), pub.msg_id, path)
