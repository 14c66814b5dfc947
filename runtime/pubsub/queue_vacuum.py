"""Vacuuming the queue table on PostgreSQL as soon as its dead rows cost, not at autovacuum's pace.

Every delivered message leaves a dead row in ``conduit_queue`` (its entry, deleted by the ack), and
until the table is vacuumed every take of a queue's head passes over the dead entries at its front.
Autovacuum looks at a database once a minute at most (``autovacuum_naptime``, a server-wide setting)
and by default waits for a fifth of the table to be dead; under load that is hundreds of thousands
of dead entries. Measured with 32 busy subscriptions on one worker (``bench/workers.py``): the
database's CPU per message went from 130 µs to 710 µs over five rounds of 20,000 messages, and the
rate from 3,900 to 1,200 msg/s; vacuumed every second, both stayed flat.

So a greenlet of each worker looks every ``queue_vacuum_secs`` at the table's dead rows as the
server counts them (``pg_stat_user_tables.n_dead_tup``, for all workers and servers), and past
``queue_vacuum_dead_rows`` runs ``VACUUM conduit_queue``. One vacuum runs at a time in the whole
cluster: the worker that gets a transaction-less advisory lock runs it, the others skip their turn.
VACUUM (without FULL) locks out no reader or writer; it skips the pages the visibility map marks
clean, so a large backlog of live entries is not read again each time. Nothing on SQLite, whose
deleted rows go to its free list as they are deleted.
"""

from __future__ import annotations

import logging
import time

import gevent
from sqlalchemy import Engine, text

from runtime.db.engine import is_sqlite
from runtime.pubsub.queue_sql import QUEUE

_log = logging.getLogger(__name__)

#: The advisory lock key of the queue vacuum (any fixed 64-bit number, the same in every worker).
LOCK_KEY = 0x636F6E64756974  # 'conduit'

_DEAD_ROWS = text('SELECT coalesce((SELECT n_dead_tup FROM pg_stat_user_tables '
                  'WHERE relid = CAST(:table AS regclass)), 0)')
_TRY_LOCK = text('SELECT pg_try_advisory_lock(:key)')
_UNLOCK = text('SELECT pg_advisory_unlock(:key)')


class QueueVacuum:
    """Vacuums the queue table once enough of it is dead (PostgreSQL only; see the module's docstring)."""

    def __init__(self, engine: Engine, interval_secs: float, dead_rows: int) -> None:
        self._engine = engine
        self.interval_secs = interval_secs
        self.dead_rows = dead_rows
        #: Vacuums this worker ran (for tests and the logs).
        self.runs = 0

    @property
    def enabled(self) -> bool:
        """Whether there is anything to do: PostgreSQL, and an interval set."""
        return self.interval_secs > 0 and not is_sqlite(self._engine)

    def run(self) -> None:
        """Look every interval until killed; a failed look is logged and tried again at the next."""
        while True:
            gevent.sleep(self.interval_secs)
            try:
                self.once()
            except Exception as e:  # the database may be down: autovacuum still does it, later
                _log.warning('vacuuming %s failed (%s: %s)', QUEUE, type(e).__name__, e)

    def once(self) -> bool:
        """Vacuum the queue table if enough of it is dead and no other worker is at it; True if it ran."""
        with self._engine.connect() as conn:
            conn = conn.execution_options(isolation_level='AUTOCOMMIT')  # VACUUM runs in no transaction
            dead = conn.execute(_DEAD_ROWS, {'table': QUEUE}).scalar_one()
            if dead < self.dead_rows or not conn.execute(_TRY_LOCK, {'key': LOCK_KEY}).scalar_one():
                return False
            try:
                started = time.monotonic()
                conn.exec_driver_sql(f'VACUUM {QUEUE}')
                self.runs += 1
                _log.debug('vacuumed %s (%d dead rows) in %.3f s', QUEUE, dead, time.monotonic() - started)
            finally:
                conn.execute(_UNLOCK, {'key': LOCK_KEY})
        return True
