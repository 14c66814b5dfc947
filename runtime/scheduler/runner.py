"""The scheduler loop of one worker: it fires due jobs, each firing exactly once across all workers.

Why not APScheduler's own ``GeventScheduler``: its job stores assume one scheduler per store
(APScheduler 3 has no cross-process locking), so every worker and server would run every job.
Instead one greenlet per worker drives APScheduler's triggers itself, from job rows in the
database. Every worker looks at the due jobs; to run a firing it must first claim it with a
compare-and-set on the job row (``runtime.scheduler.statements.claim``), which also advances the
row's ``next_run_time`` and inserts the run row, in one transaction. Exactly one worker wins
each firing, with no leader, no lease to expire and no takeover delay: when a worker dies,
the others simply keep claiming. The price is at-most-once: a run whose worker dies midway is
not repeated; other workers find its heartbeats stopped and record it as lost.

Restarts: the next firing is stored, so a restarted cluster continues where it stopped. Firings
missed meanwhile are coalesced (``jobs.plan_firing``): no burst of runs, unless a job asks for
``catch_up``.

The loop sleeps until the earliest next firing, at most ``poll_interval_secs``; a change made in
this worker, or announced by another through the sync key, wakes it at once.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
from gevent.event import Event

from runtime.cluster.workers import new_worker_id
from runtime.db.blocking import run_transaction
from runtime.scheduler import statements
from runtime.scheduler.jobs import JobDefinition, iso, plan_firing
from runtime.scheduler.statements import ERROR, OK, TIMEOUT
from runtime.service.invoke import new_cid

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from runtime.config import SchedulerSection
    from runtime.service.invoke import Invoker
    from runtime.service.store import ServiceStore

_log = logging.getLogger(__name__)

#: The channel a job's service sees in self.channel (the invoker calls before_job/after_job for it).
CHANNEL_SCHEDULER = 'scheduler'

#: How long stop() lets runs in progress finish before it interrupts them.
STOP_WAIT_SECS = 2.0


class Scheduler:
    """Fires this worker's share of due jobs; also runs jobs on demand (run now).

    Reading and changing the jobs is ``runtime.scheduler.admin.JobAdmin``'s; it wakes this loop after a change.
    """

    def __init__(self, engine: Engine, settings: SchedulerSection, spawn: Callable[..., gevent.Greenlet],
                 store: ServiceStore, invoker: Invoker, owner: str | None = None) -> None:
        """owner: the worker's id, which its firings name (a new one when not given)."""
        self.engine = engine
        self.settings = settings
        self._spawn_greenlet = spawn
        self._store = store
        self._invoker = invoker
        self.owner = owner or new_worker_id()
        #: Runs in progress in this worker, by run id.
        self.running: dict[int, gevent.Greenlet] = {}
        self._wake = Event()
        self._loop: gevent.Greenlet | None = None
        self._heartbeat: gevent.Greenlet | None = None
        self._last_sweep = time.time()

    # Lifecycle

    def start(self) -> None:
        """Start the loop, unless this server is configured not to fire jobs."""
        if self.settings.enabled:
            self._loop = self._spawn_greenlet(self._run, name='scheduler')

    def stop(self, wait: float = STOP_WAIT_SECS) -> None:
        """Stop firing; let runs in progress finish for up to wait seconds, then interrupt them."""
        if self._loop is not None:
            self._loop.kill(block=True, timeout=1)
            self._loop = None
        runs = list(self.running.values())
        if runs:
            gevent.joinall(runs, timeout=wait)
            for g in runs:
                g.kill(block=True, timeout=1)  # each records itself as interrupted

    def wake(self) -> None:
        """Look at the jobs again now (they changed)."""
        self._wake.set()

    def join(self, timeout: float = 10.0) -> bool:
        """Wait until this worker's runs in progress ended; whether they did."""
        deadline = time.monotonic() + timeout
        while self.running and time.monotonic() < deadline:
            gevent.joinall(list(self.running.values()), timeout=max(0.0, deadline - time.monotonic()))
        return not self.running

    def _run(self) -> None:
        while True:
            self._wake.clear()
            try:
                delay = self.tick()
            except gevent.GreenletExit:
                raise
            except Exception as e:
                _log.warning('scheduler tick failed: %s: %s', type(e).__name__, e)
                delay = self.settings.poll_interval_secs
            self._wake.wait(delay)

    # Firing

    def tick(self, now: float | None = None) -> float:
        """Fire what is due at now (default: the current time); returns the seconds until the next look."""
        now = time.time() if now is None else now
        poll = self.settings.poll_interval_secs
        with self.engine.connect() as conn:
            rows = statements.upcoming(conn, now + poll)
        for row in rows:
            if row.next_run_time <= now:
                try:
                    self._fire(row, now)
                except Exception as e:
                    _log.warning('job %s: firing failed, will retry: %s: %s', row.name, type(e).__name__, e)
        self._housekeeping()
        soon = [r.next_run_time for r in rows if r.next_run_time > now]
        return max(0.0, min(min(soon) - time.time(), poll)) if soon else poll

    def _fire(self, row: Any, now: float) -> None:
        job = statements.definition(row)
        plan = plan_firing(job, row.created_at, row.next_run_time, now, self.settings.misfire_grace_secs)
        delay = random.uniform(0, job.jitter) if job.jitter else 0.0
        real_now = time.time()
        claimed = run_transaction(self.engine, lambda conn: statements.claim(
            conn, row, plan, self.owner, now, real_now + delay, real_now - self.settings.stale_run_secs))
        if claimed is None:
            return  # another worker took this firing, or the job was edited meanwhile
        if plan.missed is not None:
            _log.warning('job %s: %d firing(s) missed since %s were skipped', job.name, plan.missed_count,
                         iso(plan.missed[0]))
        if claimed.run_id is None:
            if claimed.fire_time is not None:
                _log.info('job %s: firing %s skipped, the previous run is still going', job.name,
                          iso(claimed.fire_time))
            return
        self._spawn(job, claimed.run_id, claimed.fire_time, statements.KIND_SCHEDULE, delay)

    def run_now(self, name: str) -> tuple[int, gevent.Greenlet]:
        """Run a job at once in this worker, outside its schedule; returns the run id and its greenlet."""
        now = time.time()
        row, run_id = run_transaction(self.engine,
                                      lambda conn: statements.start_manual_run(conn, name, self.owner, now))
        return run_id, self._spawn(statements.definition(row), run_id, now, statements.KIND_MANUAL, 0.0)

    def _spawn(self, job: JobDefinition, run_id: int, fire_time: float, kind: str,
               delay: float) -> gevent.Greenlet:
        g = self._spawn_greenlet(self._execute, job, run_id, fire_time, kind, delay, name=f'job:{job.name}')
        self.running[run_id] = g
        if self._heartbeat is None or self._heartbeat.dead:
            self._heartbeat = self._spawn_greenlet(self._beat, name='scheduler-heartbeat')
        return g

    # Running

    def _execute(self, job: JobDefinition, run_id: int, fire_time: float, kind: str, delay: float) -> None:
        try:
            self._run_once(job, run_id, fire_time, kind, delay)
        finally:
            self.running.pop(run_id, None)

    def _run_once(self, job: JobDefinition, run_id: int, fire_time: float, kind: str, delay: float) -> None:
        cid = new_cid()
        outcome, error, response = ERROR, 'interrupted: the server stopped while the job was running', None
        started = time.time() + delay
        try:
            if delay:
                gevent.sleep(delay)  # jitter
            started = time.time()
            outcome, error, response = self._invoke(job, run_id, fire_time, kind, cid)
        finally:
            ended = time.time()
            try:
                run_transaction(self.engine, lambda conn: statements.mark_done(conn, run_id, outcome, error, ended,
                                                                          started, cid))
            except Exception as e:
                # The run stays 'running' without heartbeats; a sweep records it as lost.
                _log.error('job %s: cannot record run %d (%s): %s', job.name, run_id, outcome, e)
        self._callback(job, {'job_name': job.name, 'run_id': run_id, 'kind': kind, 'fire_time': iso(fire_time),
                             'started_at': iso(started), 'ended_at': iso(ended), 'outcome': outcome,
                             'error': error, 'response': response, 'cid': cid})

    def _invoke(self, job: JobDefinition, run_id: int, fire_time: float, kind: str,
                cid: str) -> tuple[str, str, Any]:
        raw = {'job_name': job.name, 'run_id': run_id, 'kind': kind, 'fire_time': iso(fire_time),
               'extra': job.extra}
        limit = gevent.Timeout(job.max_execution_time) if job.max_execution_time else None
        try:
            cls = self._store.get(job.service)
            if limit is not None:
                limit.start()
            svc = self._invoker.run(cls, job.extra, channel=CHANNEL_SCHEDULER, cid=cid, raw_request=raw)
            return OK, '', svc.response.payload
        except gevent.Timeout as e:
            if e is not limit:
                raise
            _log.warning('job %s run %d: service %s overran max_execution_time of %g s; stopped', job.name,
                         run_id, job.service, job.max_execution_time)
            return TIMEOUT, f'service {job.service!r} did not finish within {job.max_execution_time:g} s ' \
                            f'(max_execution_time) and was stopped', None
        except Exception as e:
            _log.warning('job %s run %d: service %s raised %s: %s', job.name, run_id, job.service,
                         type(e).__name__, e, exc_info=True)
            return ERROR, f'{type(e).__name__}: {e}', None
        finally:
            if limit is not None:
                limit.close()

    def _callback(self, job: JobDefinition, result: dict[str, Any]) -> None:
        target = job.on_success if result['outcome'] == OK else job.on_error
        if not target:
            return
        try:
            self._invoker.invoke(target, result)
        except Exception:
            _log.exception('job %s: %s service %s failed', job.name,
                           'on_success' if result['outcome'] == OK else 'on_error', target)

    # Housekeeping

    def _beat(self) -> None:
        # Lives while this worker runs jobs, so that others can tell a long run from a dead worker.
        while self.running:
            gevent.sleep(self.settings.heartbeat_secs)
            ids = list(self.running)
            if not ids:
                return
            now = time.time()
            try:
                run_transaction(self.engine, lambda conn, ids=ids, now=now: statements.heartbeat(conn, ids, now))
            except Exception as e:
                _log.warning('job run heartbeat failed: %s: %s', type(e).__name__, e)

    def _housekeeping(self) -> None:
        now = time.time()
        if now - self._last_sweep >= self.settings.sweep_interval_secs:
            self._last_sweep = now
            self.sweep(now)

    def sweep(self, now: float | None = None) -> None:
        """Record runs whose worker died as lost, and trim run histories to history_per_job."""
        now = time.time() if now is None else now
        keep = self.settings.history_per_job
        with self.engine.connect() as conn:  # read first: most sweeps find nothing and write nothing
            stale = statements.stale_runs(conn, now - self.settings.stale_run_secs)
            full = statements.overfull_histories(conn, keep)
        if not stale and not full:
            return

        def work(conn: Any) -> None:
            if stale:
                statements.mark_lost(conn, stale, now)
            for job_id in full:
                statements.prune_history(conn, job_id, keep)

        run_transaction(self.engine, work)
        if stale:
            _log.warning('%d job run(s) lost with their worker: %s', len(stale), stale)
