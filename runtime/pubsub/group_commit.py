"""Group commit: concurrent publishers share one transaction, and so one fsync.

A publisher hands its ``Publication`` to ``GroupCommitter.submit`` and waits. A single writer
greenlet takes everything queued so far (up to ``max_batch``), writes it in one transaction and
then wakes every publisher of that batch: with the result once the commit is durable, or with the
exception if it failed, in which case nothing of the batch was stored. One publisher alone pays
one commit per message, as before; a hundred concurrent ones pay about one commit in total.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

import gevent
from gevent.event import AsyncResult
from gevent.queue import Empty, Queue
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError

from runtime.db.blocking import run_transaction
from runtime.errors import StorageUnavailable
from runtime.pubsub.store import Publication, insert_publications

_log = logging.getLogger(__name__)


class GroupCommitter:
    """Batches publications from many greenlets into shared transactions."""

    def __init__(self, engine: Engine, max_batch: int, spawn: Callable[..., gevent.Greenlet],
                 on_committed: Callable[[list[Publication]], None]) -> None:
        self._engine = engine
        self._max_batch = max_batch
        self._queue: Queue = Queue()
        self._on_committed = on_committed
        self._writer = spawn(self._run, name='pubsub-group-commit')

    def submit(self, pub: Publication) -> None:
        """Store one publication durably; returns once committed, raises StorageUnavailable otherwise."""
        result: AsyncResult = AsyncResult()
        self._queue.put((pub, result))
        result.get()

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < self._max_batch:
                try:
                    batch.append(self._queue.get_nowait())
                except Empty:
                    break
            pubs = [p for p, _ in batch]
            try:
                run_transaction(self._engine, functools.partial(self._write, pubs=pubs))
            except gevent.GreenletExit:
                for _, result in batch:
                    result.set_exception(StorageUnavailable('the server is stopping; nothing was stored'))
                raise
            except (OperationalError, DBAPIError) as e:
                _log.error('storing %d publication(s) failed: %s', len(pubs), e.__class__.__name__)
                error = StorageUnavailable(f'storage unavailable, nothing was stored: {e.orig.__class__.__name__}')
                for _, result in batch:
                    result.set_exception(error)
                continue
            except Exception as e:
                _log.exception('storing %d publication(s) failed', len(pubs))
                for _, result in batch:
                    result.set_exception(e)
                continue
            for _, result in batch:
                result.set(None)
            try:
                self._on_committed(pubs)
            except Exception:
                _log.exception('waking subscribers after a commit failed')

    @staticmethod
    def _write(conn: Connection, pubs: list[Publication]) -> None:
        insert_publications(conn, pubs)
