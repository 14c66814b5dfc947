"""One channel's poll loop: list the directory, find complete files, claim them, process them.

Every worker of every server runs a poller for each active channel; the claim (an atomic rename,
``runtime.files.claims``) decides which one processes a file. Each poll:

- lists the directory (recursively if asked, never into the channel's own error and processed
  directories when they lie inside it);
- keeps the files whose name matches a pattern and that are not Conduit's own (claims, temporary
  files, ``.error.json`` reports), not dotfiles and not markers;
- asks ``Completion`` which of them are complete (stable over N polls, or their marker is there);
- claims each complete file and hands it to a ``FileProcessor`` in a greenlet of its own, at most
  ``max_parallel_files`` at once (the poll waits for a free slot before claiming the next file, so
  that a busy worker leaves files to the others);
- takes over stale claims (older than ``claim_timeout_secs``, or whose owner process is gone on
  this host): the claim is renamed to this worker's, and exactly one worker wins. A claim of this
  very worker that none of its processors holds is taken again at once: a file it could not put
  back (its SFTP server broke off and was back a moment later) would otherwise wait out the timeout.

With ``after = 'leave'`` a processed file stays where it was: the poller skips a file whose (path,
size, mtime) matches a done or skipped run of the channel (remembered in memory, asked of the
database once per file otherwise).

The loop never dies: a missing directory is logged once (WARNING) until it is back (INFO), an
unreachable server is logged with the reason and retried with a growing wait (up to 60 s), and any
other error is logged with its traceback and the next poll goes on.
"""

from __future__ import annotations

import fnmatch
import logging
import posixpath
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent.lock import BoundedSemaphore

from runtime.errors import SourceMissing, SourceUnavailable
from runtime.files import claims, statements
from runtime.files.completion import Completion
from runtime.files.definition import FileChannelDef
from runtime.files.processor import ChannelContext, FileProcessor, claim_path
from runtime.files.sources import Entry, Source

_log = logging.getLogger(__name__)

#: Longest wait between two polls of a source that cannot be reached.
MAX_BACKOFF_SECS = 60.0

#: How close two mtimes must be to be the same (SFTP gives whole seconds, local file systems nanoseconds).
MTIME_TOLERANCE_SECS = 0.001

#: How often a poll waiting for a free processing slot looks whether the poller is stopping.
SLOT_WAIT_SECS = 0.5

#: Reads from the database: read(work) runs work(conn) in a read-only transaction.
Read = Callable[[Callable[[Any], Any]], Any]


def skip_dirs(channel: FileChannelDef) -> tuple[str, ...]:
    """The channel's own directories inside its directory (errors, processed files): never listed."""
    found = []
    directory = channel.directory.rstrip('/')
    candidates = [channel.error_dir]
    if channel.after == 'move':
        # The fixed part of the template, up to its last '/' before the first field.
        fixed = channel.move_to.split('{', 1)[0]
        candidates.append(fixed.rpartition('/')[0] if '{' in channel.move_to else posixpath.dirname(fixed))
    for path in candidates:
        if not path:
            continue
        if path.startswith('/'):
            if not path.startswith(directory + '/'):
                continue
            path = path[len(directory) + 1:]
        path = posixpath.normpath(path)
        if path not in ('.', '') and not path.startswith('..'):
            found.append(path)
    return tuple(found)


class Poller:
    """Polls one channel's directory and processes its complete files (one per channel per worker)."""

    def __init__(self, channel: FileChannelDef, source: Source, ctx: ChannelContext, spawn: Callable[..., Any],
                 read: Read, *, wide_source: Callable[[], Source] | None = None,
                 busy: dict[str, gevent.Greenlet] | None = None) -> None:
        self.channel = channel
        self.source = source
        self._spawn = spawn
        self._read = read
        self.ctx = ctx
        ctx.stopping = lambda: self._stopping
        ctx.left = self._remember_left
        ctx.claim_alive = self.claim_alive
        ctx.wide_source = wide_source
        self.completion = Completion(channel.complete_when, channel.stable_polls, channel.marker_suffix)
        self._slots = BoundedSemaphore(channel.max_parallel_files)
        self._skip_dirs = skip_dirs(channel)
        #: Files being processed in this worker, by original path: shared with the channel's earlier poller
        #: (restarted on a change), whose files may still be in progress.
        self._busy: dict[str, gevent.Greenlet] = busy if busy is not None else {}
        #: The processings this poller started (its stop waits for them alone).
        self._mine: set[gevent.Greenlet] = set()
        #: Files left in place after processing: path -> (size, mtime).
        self._left: dict[str, tuple[int, float]] = {}
        #: Files that could not be claimed (logged once each, while they are there).
        self._unclaimable: set[str] = set()
        self._stopping = False
        self._missing = False
        self._unavailable = False
        self._backoff = 0.0
        self.polls = 0

    @property
    def label(self) -> str:
        """How logs name the channel and its directory."""
        return f'file channel {self.channel.name} ({self.source.label})'

    # Loop

    def run(self) -> None:
        """Poll until stopped (run in a greenlet); never raises but GreenletExit."""
        while not self._stopping:
            delay = self.poll_safely()
            if self._stopping:
                break
            gevent.sleep(delay)

    def poll_safely(self) -> float:
        """Poll once, logging what went wrong; returns how long to wait before the next poll."""
        interval = self.channel.poll_interval_secs
        try:
            self.poll_once()
        except SourceMissing:
            if not self._missing:
                self._missing = True
                _log.warning('%s: directory %s is missing; waiting for it', self.label, self.channel.directory)
            return interval
        except SourceUnavailable as e:
            self._unavailable = True
            self._backoff = min(MAX_BACKOFF_SECS, max(interval, self._backoff * 2))
            _log.warning('%s: unavailable (%s); trying again in %g s', self.label, e.reason, self._backoff)
            return self._backoff
        except gevent.GreenletExit:
            raise
        except Exception:
            _log.exception('%s: poll failed; trying again in %g s', self.label, interval)
            return interval
        if self._missing:
            self._missing = False
            _log.info('%s: directory %s is back', self.label, self.channel.directory)
        if self._unavailable:
            self._unavailable = False
            self._backoff = 0.0
            _log.info('%s: reachable again', self.label)
        return interval

    def poll_once(self) -> None:
        """List, take over stale claims, claim and start processing the complete files."""
        ch = self.channel
        entries = self.source.list(ch.recursive, self._skip_dirs)
        self.polls += 1
        now = time.time()
        candidates: list[Entry] = []
        markers: list[Entry] = []
        stale: list[tuple[Entry, claims.Claim]] = []
        for entry in entries:
            claim = claims.parse_claim(entry.name)
            if claim is not None:
                if claims.is_stale(claim, now, self.ctx.claim_timeout_secs) or self._orphaned(entry, claim):
                    stale.append((entry, claim))
                continue
            if claims.is_internal(entry.name) or entry.name.startswith('.'):
                continue
            if ch.complete_when == 'marker' and entry.name.endswith(ch.marker_suffix):
                markers.append(entry)
                continue
            if any(fnmatch.fnmatchcase(entry.name, p) for p in ch.patterns):
                candidates.append(entry)
        listed = {e.path for e in candidates}
        for path in [p for p in self._left if p not in listed]:
            del self._left[path]
        for entry, claim in stale:
            if self._stopping or not self._slots.acquire(blocking=False):
                break
            self._take_over(entry, claim)
        complete = self.completion.update(candidates + markers)
        complete = [e for e in complete if e.path not in self._busy]
        if ch.after == 'leave':
            complete = self._not_left(complete)
        for entry in complete:
            if not self._wait_for_slot():
                return
            try:
                self._claim(entry)
            except SourceUnavailable:
                raise
            except (OSError, ValueError) as e:
                # One file that cannot be claimed (a name too long for its claim name) must not stop the others.
                if entry.path not in self._unclaimable:
                    self._unclaimable.add(entry.path)
                    _log.warning('%s: %s cannot be claimed, left where it is: %s', self.label, entry.path, e)
        self._unclaimable &= listed

    def _wait_for_slot(self) -> bool:
        while not self._stopping:
            if self._slots.acquire(timeout=SLOT_WAIT_SECS):
                return True
        return False

    # Claims

    def _claim(self, entry: Entry) -> None:
        """Claim a file (its slot taken) and start processing it; another worker may win the rename."""
        now = time.time()
        claimed = claim_path(entry.path, self.ctx.owner, now)
        if not self._rename_in_slot(entry.path, claimed):
            return
        self.completion.forget(entry.path)
        self._start(entry, claimed, now)

    def _rename_in_slot(self, path: str, claimed: str) -> bool:
        """Rename path to its claim name with a slot taken; the slot is given back unless it was won."""
        try:
            won = self.source.rename(path, claimed)
        except BaseException:
            self._slots.release()
            raise
        if not won:
            self._slots.release()
        return won

    def _orphaned(self, entry: Entry, claim: claims.Claim) -> bool:
        """Whether a claim is this worker's own and none of its processors holds the file."""
        original = posixpath.join(posixpath.dirname(entry.path), claim.original)
        return claim.owner == self.ctx.owner and original not in self._busy

    def _take_over(self, entry: Entry, claim: claims.Claim) -> None:
        """Take over a stale claim (its slot taken): rename it to this worker's claim, then process the file."""
        original = posixpath.join(posixpath.dirname(entry.path), claim.original)
        if original in self._busy:
            self._slots.release()
            return
        now = time.time()
        claimed = claim_path(original, self.ctx.owner, now)
        if not self._rename_in_slot(entry.path, claimed):
            return
        if claim.owner == self.ctx.owner:
            _log.info('%s: took %s again: this worker claimed it at %s and could not put it back', self.label,
                      original, claim.at)
        else:
            _log.info('%s: took over %s, claimed by %s at %s (stale)', self.label, original, claim.owner, claim.at)
        self._start(Entry(original, claim.original, entry.size, entry.mtime), claimed, now)

    def _start(self, entry: Entry, claimed: str, now: float) -> None:
        processor = FileProcessor(self.ctx, entry, claimed, now)

        def process() -> None:
            try:
                processor.run()
            finally:
                if self._busy.get(entry.path) is greenlet:
                    del self._busy[entry.path]
                self._mine.discard(greenlet)
                self._slots.release()
        greenlet = self._spawn(process, name=f'file:{self.channel.name}:{entry.path}')
        self._busy[entry.path] = greenlet
        self._mine.add(greenlet)

    def claim_alive(self, file_name: str, owner: str, exclude: str) -> bool:
        """Whether owner holds a claim on file_name that is not stale (other than the claim at exclude).

        Listed twice when not found: a claim renamed (renewed) while the directory is read might be
        missed once.
        """
        directory, name = posixpath.split(file_name)
        for _ in range(2):
            now = time.time()
            for entry in self.source.list(self.channel.recursive, self._skip_dirs):
                if entry.path == exclude or posixpath.dirname(entry.path) != directory:
                    continue
                claim = claims.parse_claim(entry.name)
                if (claim is not None and claim.original == name and claim.owner == owner
                        and not claims.is_stale(claim, now, self.ctx.claim_timeout_secs)):
                    return True
        return False

    # Files left in place

    def _remember_left(self, path: str, size: int, mtime: float) -> None:
        self._left[path] = (size, mtime)

    def _is_left(self, entry: Entry) -> bool:
        known = self._left.get(entry.path)
        return known is not None and known[0] == entry.size and abs(known[1] - entry.mtime) < MTIME_TOLERANCE_SECS

    def _not_left(self, entries: list[Entry]) -> list[Entry]:
        """The entries that are not files this channel processed and left in place."""
        unknown = [e for e in entries if not self._is_left(e)]
        if unknown:
            name = self.channel.name
            finished = self._read(lambda conn: statements.finished_files(conn, name, [e.path for e in unknown]))
            for entry in unknown:
                for size, mtime in finished.get(entry.path, ()):
                    if size == entry.size and abs(mtime - entry.mtime) < MTIME_TOLERANCE_SECS:
                        self._left[entry.path] = (entry.size, entry.mtime)
                        break
        return [e for e in entries if not self._is_left(e)]

    # Stopping

    def request_stop(self) -> None:
        """Stop polling; files in progress are put back at their next batch."""
        self._stopping = True

    def stop(self, timeout: float) -> None:
        """Stop polling; files in progress are put back at their next batch, or abandoned after timeout.

        An abandoned file keeps its claim and its running run: the next claimer resumes it (at once
        after a restart of this process, else after the claim timeout).
        """
        self._stopping = True
        busy = list(self._mine)
        if busy:
            gevent.joinall(busy, timeout=timeout)
            for greenlet in busy:
                greenlet.kill(block=False)
