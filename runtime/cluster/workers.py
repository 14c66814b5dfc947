"""The worker registry: each running worker keeps a row in ``conduit_worker`` with its heartbeat.

A worker (one runtime instance, a gunicorn worker) inserts its row at start, renews
``heartbeat_at`` every ``interval_secs`` and deletes the row when it stops cleanly. A worker that
died without stopping leaves its row behind: readers call it *stale* once its heartbeat is older
than ``STALE_FACTOR`` intervals, and any worker deletes such rows once they are older than
``purge_after_secs``. The row's id is the worker's lease-owner id, so the leases a worker holds
are the ``conduit_lease`` rows it owns. The server id groups the workers of one server: the host
and the gunicorn arbiter's pid (every worker of a server has the same parent).

Nothing here is needed for correctness (leases are): the registry is what the dashboard shows.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import time
from dataclasses import dataclass
from typing import Any

import gevent
from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import Lease, WorkerRow
from runtime.util.spawn import killed

_log = logging.getLogger(__name__)

#: Seconds between two heartbeats of a worker.
HEARTBEAT_INTERVAL_SECS = 5.0

#: A worker whose heartbeat is older than this many intervals is shown as stale.
STALE_FACTOR = 3

#: A stale worker's row is deleted once its heartbeat is this old.
PURGE_AFTER_SECS = 600.0

#: Lease names listed per worker (the count is always exact).
LEASES_SHOWN = 20

#: Most workers one listing returns.
MAX_WORKERS = 500


def server_id(host: str | None = None, parent_pid: int | None = None) -> str:
    """The id shared by a server's workers: the host and the gunicorn arbiter's pid (the workers' parent)."""
    return f'{host or socket.gethostname()}:{parent_pid if parent_pid is not None else os.getppid()}'


@dataclass(frozen=True)
class WorkerIdentity:
    """Who a worker is: its lease-owner id, its server, host, pid and where the server listens."""

    id: str
    server: str
    host: str
    pid: int
    bind: str = ''

    @classmethod
    def this_process(cls, worker_id: str, bind: str = '') -> WorkerIdentity:
        """The identity of the calling process, for the lease owner id worker_id."""
        host = socket.gethostname()
        return cls(worker_id[:200], server_id(host)[:200], host[:200], os.getpid(), bind[:200])

    @classmethod
    def new(cls, bind: str = '') -> WorkerIdentity:
        """A new identity of the calling process: the one every part of a runtime is given."""
        return cls.this_process(new_worker_id(), bind)


def new_worker_id() -> str:
    """A worker id: host, pid and a random part (pids are reused, and a test process runs several runtimes)."""
    return f'{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}'


class WorkerRegistry:
    """Keeps this worker's row and heartbeat, and purges the rows of long-dead workers."""

    def __init__(self, engine: Engine, identity: WorkerIdentity, interval_secs: float = HEARTBEAT_INTERVAL_SECS,
                 purge_after_secs: float = PURGE_AFTER_SECS) -> None:
        self._engine = engine
        self.identity = identity
        self.interval_secs = interval_secs
        self.purge_after_secs = purge_after_secs
        self._started_at = time.time()

    def beat(self, now: float | None = None) -> None:
        """Insert or renew this worker's row (and delete rows dead for longer than purge_after_secs)."""
        now = time.time() if now is None else now
        run_transaction(self._engine, lambda conn: self._beat(conn, now))

    def _beat(self, conn: Connection, now: float) -> None:
        me = self.identity
        renewed = conn.execute(update(WorkerRow).where(WorkerRow.id == me.id).values(heartbeat_at=now)).rowcount
        if not renewed:
            conn.execute(insert(WorkerRow).values(id=me.id, server=me.server, host=me.host, pid=me.pid, bind=me.bind,
                                                  started_at=self._started_at, heartbeat_at=now))
        conn.execute(delete(WorkerRow).where(WorkerRow.heartbeat_at < now - self.purge_after_secs))

    def run(self) -> None:
        """Beat every interval until killed; a failed beat is logged and tried again at the next one."""
        while True:
            try:
                self.beat()
            except Exception as e:
                if killed(e):
                    return
                _log.warning('worker heartbeat not written (%s: %s)', type(e).__name__, e)
            gevent.sleep(self.interval_secs)

    def stop(self) -> None:
        """Delete this worker's row (a clean stop); never raises."""
        try:
            run_transaction(self._engine, lambda conn: conn.execute(
                delete(WorkerRow).where(WorkerRow.id == self.identity.id)))
        except Exception as e:
            _log.warning('worker row not deleted (%s: %s)', type(e).__name__, e)


def list_workers(conn: Connection, now: float, interval_secs: float = HEARTBEAT_INTERVAL_SECS) -> list[dict[str, Any]]:
    """Every registered worker with its heartbeat age, whether it is stale, and the leases it holds.

    Per worker: ``leases`` (how many lease rows it owns) and ``lease_names`` (the first LEASES_SHOWN,
    by name).
    """
    rows = conn.execute(select(WorkerRow).order_by(WorkerRow.server, WorkerRow.id).limit(MAX_WORKERS)).all()
    ids = [r.id for r in rows]
    counts: dict[str, int] = {}
    if ids:
        counts = dict(conn.execute(select(Lease.owner, func.count()).where(Lease.owner.in_(ids))
                                   .group_by(Lease.owner)).all())
    workers = []
    for r in rows:
        names = []
        if counts.get(r.id):
            names = list(conn.execute(select(Lease.name).where(Lease.owner == r.id).order_by(Lease.name)
                                      .limit(LEASES_SHOWN)).scalars())
        age = max(0.0, now - r.heartbeat_at)
        workers.append({'id': r.id, 'server': r.server, 'host': r.host, 'pid': r.pid, 'bind': r.bind,
                        'started_at': r.started_at, 'heartbeat_at': r.heartbeat_at,
                        'heartbeat_age_secs': round(age, 3), 'stale': age > STALE_FACTOR * interval_secs,
                        'leases': counts.get(r.id, 0), 'lease_names': names})
    return workers
