"""``FileTransfer``: this worker's inbound file channels — one poller per active channel, kept current.

The channels live in ``conduit_file_channel`` (the admin API, the CLI and object files write them,
bumping the ``file_channels`` sync key); ``reload`` reads them all, starts a poller for each new
active channel, restarts the poller of a channel whose definition changed and stops those of
channels removed or deactivated. A stopping poller puts its files in progress back at their next
batch (or abandons them after a grace time: their claims are taken over later), so a reload never
loses nor duplicates a record.

It also deletes the run history older than ``[file_transfer] history_days`` (every worker does, now
and then: the deletion is idempotent). Runs of channels that leave files in place are kept: they
are what tells the pollers that a file was processed already.

Built by the composition root (``runtime.core``) with what it needs passed in: the broker's
``prepare`` and ``store_prepared``, a function running a service, and the limits of messages.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from sqlalchemy import Engine

from runtime.cluster.sync import one_reload_at_a_time
from runtime.config import FileTransferSection
from runtime.db.blocking import run_transaction
from runtime.errors import ConfigError
from runtime.files import statements
from runtime.files.definition import FileChannelDef
from runtime.files.poller import Poller
from runtime.files.processor import ChannelContext, Prepare, RunService, StorePrepared
from runtime.files.sftp_params import SftpParams
from runtime.files.sources import Source, open_source
from runtime.util.json_limits import JsonLimits

_log = logging.getLogger(__name__)

#: How often the run history is swept.
HISTORY_SWEEP_SECS = 3600.0
#: Seconds after start before the first sweep.
HISTORY_FIRST_SWEEP_SECS = 60.0

#: How long a stopping poller's files in progress may take to reach their next batch.
STOP_GRACE_SECS = 5.0

#: Counts for metrics: count(channel, what, n).
Count = Callable[[str, str, int], None]


class _Running:
    """A channel's poller, its greenlet and its sources."""

    def __init__(self, poller: Poller, greenlet: gevent.Greenlet, wide: list[Source]) -> None:
        self.poller = poller
        self.greenlet = greenlet
        self.wide = wide


class FileTransfer:
    """The inbound file channels of one worker."""

    def __init__(self, engine: Engine, settings: FileTransferSection, spawn: Callable[..., gevent.Greenlet], *,
                 prepare: Prepare, store_prepared: StorePrepared, run_service: RunService,
                 json_limits: JsonLimits, max_message_size: int, owner: str,
                 count: Count | None = None,
                 source_opener: Callable[[str, SftpParams | None], Source] = open_source) -> None:
        self._engine = engine
        self.settings = settings
        self._spawn = spawn
        self._prepare = prepare
        self._store_prepared = store_prepared
        self._run_service = run_service
        self._json_limits = json_limits
        self._max_message_size = max_message_size
        #: This worker's claim owner (``runtime.files.claims.owner_of`` of its identity's host and pid).
        self.owner = owner
        self._count = count or (lambda _channel, _what, _n: None)
        #: Opens a channel's directory: source_opener(directory, sftp) (tests may wrap the sources).
        self._open_source = source_opener
        self._defs: dict[str, FileChannelDef] = {}
        self._running: dict[str, _Running] = {}
        #: Files in progress in this worker per channel, by path: a restarted poller knows its predecessor's.
        self._busy: dict[str, dict[str, gevent.Greenlet]] = {}
        self._sweeper: gevent.Greenlet | None = None
        self._started = False
        #: Test hook: called after each committed batch, after_batch(channel, file_name, batches).
        self.after_batch: Callable[[str, str, int], None] | None = None

    # Lifecycle

    def start(self) -> None:
        """Load the channels and start polling the active ones (nothing polls when disabled)."""
        self._started = True
        self.reload()
        if self.settings.enabled:
            self._sweeper = self._spawn(self._sweep_forever, name='file-transfer-history')

    def stop(self, timeout: float = STOP_GRACE_SECS) -> None:
        """Stop every poller (files in progress put back or abandoned safely); never raises."""
        self._started = False
        if self._sweeper is not None:
            self._sweeper.kill(block=False)
            self._sweeper = None
        running, self._running = self._running, {}
        for item in running.values():
            item.poller.request_stop()  # all at once, then each is waited for
        for name, item in running.items():
            self._stop_one(name, item, timeout)

    @one_reload_at_a_time
    def reload(self) -> None:
        """Read the channels again; start, restart and stop pollers to match."""
        rows = run_transaction(self._engine, statements.load_channels, write=False)
        defs: dict[str, FileChannelDef] = {}
        for name, definition, is_active in rows:
            try:
                defs[name] = FileChannelDef.from_stored(name, definition, is_active)
            except ConfigError as e:
                _log.error('file channel %r is not run: its stored definition is invalid: %s', name, e)
        self._defs = defs
        if not self._started or not self.settings.enabled:
            return
        for name in list(self._running):
            wanted = defs.get(name)
            if wanted is None or not wanted.is_active or wanted != self._running[name].poller.channel:
                item = self._running.pop(name)
                # Stopped in the background: its files in progress may take a batch to be put back.
                self._spawn(self._stop_one, name, item, STOP_GRACE_SECS, name=f'file-channel-stop:{name}')
        for name, ch in defs.items():
            if ch.is_active and name not in self._running:
                self._start_one(ch)

    def channels(self) -> dict[str, FileChannelDef]:
        """Every channel as last loaded (active or not), by name."""
        return dict(self._defs)

    def pollers(self) -> dict[str, Poller]:
        """The pollers running in this worker, by channel name."""
        return {name: item.poller for name, item in self._running.items()}

    # Pollers

    def _start_one(self, ch: FileChannelDef) -> None:
        try:
            source = self._open_source(ch.directory, ch.sftp)
        except Exception as e:
            _log.error('file channel %s: its directory cannot be used: %s', ch.name, e)
            return
        wide: list[Source] = []

        def wide_source() -> Source:
            if not wide:
                wide.append(self._open_source('/', ch.sftp))
            return wide[0]
        ctx = ChannelContext(
            channel=ch, source=source, owner=self.owner, prepare=self._prepare, store_prepared=self._store_prepared,
            run_service=self._run_service, json_limits=self._json_limits, max_message_size=self._max_message_size,
            claim_timeout_secs=self.settings.claim_timeout_secs, count=self._count,
            after_batch=self._after_batch)
        poller = Poller(ch, source, ctx, self._spawn, self._read, wide_source=wide_source,
                        busy=self._busy.setdefault(ch.name, {}))
        greenlet = self._spawn(poller.run, name=f'file-channel:{ch.name}')
        self._running[ch.name] = _Running(poller, greenlet, wide)
        _log.info('file channel %s: polling %s every %g s', ch.name, source.label, ch.poll_interval_secs)

    def _stop_one(self, name: str, item: _Running, timeout: float) -> None:
        try:
            item.poller.stop(timeout)
            item.greenlet.kill(block=True, timeout=timeout)
        except Exception:
            _log.exception('file channel %s: stopping its poller failed', name)
        for source in (item.poller.source, *item.wide):
            try:
                source.close()
            except Exception as e:
                _log.warning('file channel %s: closing %s failed: %s', name, source.label, e)

    def _after_batch(self, channel: str, file_name: str, batches: int) -> None:
        if self.after_batch is not None:
            self.after_batch(channel, file_name, batches)

    def _read(self, work: Callable[[Any], Any]) -> Any:
        return run_transaction(self._engine, work, write=False)

    # History

    def sweep_history(self, now: float | None = None) -> int:
        """Delete runs finished more than history_days ago (kept for channels that leave files); returns how many."""
        before = (now if now is not None else time.time()) - self.settings.history_days * 86400
        keep = [name for name, ch in self._defs.items() if ch.after == 'leave']
        deleted = 0
        while True:
            count = run_transaction(self._engine, lambda conn: statements.delete_old_runs(conn, before, keep))
            deleted += count
            if count == 0:
                return deleted
            gevent.sleep(0)

    def _sweep_forever(self) -> None:
        # Not at once: a worker stopped right after it started would cut a sweep off mid-transaction.
        gevent.sleep(HISTORY_FIRST_SWEEP_SECS)
        while True:
            try:
                deleted = self.sweep_history()
                if deleted:
                    _log.info('file transfer: %d run(s) older than %g day(s) deleted', deleted,
                              self.settings.history_days)
            except gevent.GreenletExit:
                raise
            except Exception as e:
                # One line: a database error's text runs over several (and may quote the statement).
                reason = type(getattr(e, 'orig', None) or e).__name__
                _log.warning('file transfer: sweeping the run history failed (%s); tried again in %g s', reason,
                             HISTORY_SWEEP_SECS)
            gevent.sleep(HISTORY_SWEEP_SECS)
