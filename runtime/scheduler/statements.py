"""The scheduler's SQL: job definitions with their schedule state, claims, and run history.

Every function takes a connection inside the caller's transaction. Write transactions go
through ``runtime.db.blocking.run_transaction`` (off the hub on SQLite); the caller decides.

A firing is claimed with a compare-and-set on the job row's ``version``: the worker whose
``UPDATE ... WHERE version = :seen`` changes a row owns that firing and inserts its run row in
the same transaction. A unique index on (job_id, fire_time) backs this up: a firing can never
have two run rows.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Row, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from runtime.cluster.sync import bump
from runtime.db.models import Job, JobRun
from runtime.errors import JobExists, ObjectNotFound
from runtime.scheduler.jobs import INTERVAL_FIELDS, FiringPlan, JobDefinition, first_fire, iso

#: Sync key bumped whenever jobs change, so that every worker's scheduler looks again at once.
SYNC_KEY = 'scheduler'

KIND_SCHEDULE = 'schedule'
KIND_MANUAL = 'manual'

RUNNING, OK, ERROR, TIMEOUT, SKIPPED = 'running', 'ok', 'error', 'timeout', 'skipped'

#: Longest error text kept in a run row.
MAX_ERROR_CHARS = 4000


def definition(row: Any) -> JobDefinition:
    """The definition stored in a job row."""
    return JobDefinition(
        name=row.name, service=row.service, job_type=row.job_type, start_date=row.start_date,
        weeks=row.weeks, days=row.days, hours=row.hours, minutes=row.minutes, seconds=row.seconds,
        repeats=row.repeats, cron_definition=row.cron_definition, timezone=row.timezone,
        extra=json.loads(row.extra), is_active=row.is_active, jitter=row.jitter_secs,
        max_execution_time=row.max_execution_time_secs or None, on_success=row.on_success,
        on_error=row.on_error, skip_if_running=row.skip_if_running, catch_up=row.catch_up)


def _columns(job: JobDefinition) -> dict[str, Any]:
    values = {f: getattr(job, f) for f in INTERVAL_FIELDS}
    values.update(name=job.name, service=job.service, job_type=job.job_type, is_active=job.is_active,
                  start_date=job.start_date, repeats=job.repeats, cron_definition=job.cron_definition,
                  timezone=job.timezone, extra=json.dumps(job.extra), jitter_secs=job.jitter,
                  max_execution_time_secs=job.max_execution_time or 0.0, on_success=job.on_success,
                  on_error=job.on_error, skip_if_running=job.skip_if_running, catch_up=job.catch_up)
    return values


def job_dict(row: Any, last_run: Any = None) -> dict[str, Any]:
    """A job as the admin API shows it: its definition, then where its schedule stands."""
    out = definition(row).to_dict()
    out.update(origin=row.origin, created_at=iso(row.created_at), next_run_time=iso(row.next_run_time),
               run_count=row.run_count, last_fire_time=iso(row.last_fire_time),
               schedule=definition(row).describe())
    if last_run is not None:
        out['last_run'] = run_dict(last_run)
    return out


def run_dict(row: Any) -> dict[str, Any]:
    """A run as the admin API shows it."""
    duration = row.ended_at - row.started_at if row.ended_at is not None and row.started_at is not None else None
    return {'id': row.id, 'kind': row.kind, 'fire_time': iso(row.fire_time), 'started_at': iso(row.started_at),
            'ended_at': iso(row.ended_at), 'duration_secs': round(duration, 6) if duration is not None else None,
            'outcome': row.outcome, 'error': row.error, 'owner': row.owner, 'cid': row.cid}


# Definitions


def get_job(conn: Connection, name: str, for_update: bool = False) -> Row[Any]:
    """One job row; ObjectNotFound naming it if there is none."""
    query = select(Job).where(Job.name == name)
    row = conn.execute(query.with_for_update() if for_update else query).first()
    if row is None:
        raise ObjectNotFound('job', name)
    return row


def _matching(query: Any, search: str | None) -> Any:
    """Jobs whose name or service contains search, case-insensitively (LIKE wildcards taken literally)."""
    if not search:
        return query
    pattern = '%' + search.lower().replace('\\', '\\\\').replace('%', '\\%').replace('_', '\\_') + '%'
    return query.where(func.lower(Job.name).like(pattern, escape='\\')
                       | func.lower(Job.service).like(pattern, escape='\\'))


def list_jobs(conn: Connection, search: str | None = None, limit: int | None = None,
              offset: int = 0) -> list[Row[Any]]:
    """Jobs by name: every one, or a page of those matching search."""
    query = _matching(select(Job), search).order_by(Job.name)
    if limit is not None:
        query = query.limit(limit).offset(offset)
    return list(conn.execute(query).all())


def count_jobs(conn: Connection, search: str | None = None) -> int:
    """How many jobs match search (all without one)."""
    return conn.execute(_matching(select(func.count()).select_from(Job), search)).scalar_one()


def last_runs(conn: Connection, job_ids: list[int] | None = None) -> dict[int, Row[Any]]:
    """The latest run of each job that has one (of the jobs given, or of all)."""
    latest = select(func.max(JobRun.id)).group_by(JobRun.job_id)
    if job_ids is not None:
        if not job_ids:
            return {}
        latest = latest.where(JobRun.job_id.in_(job_ids))
    return {r.job_id: r for r in conn.execute(select(JobRun).where(JobRun.id.in_(latest.scalar_subquery()))).all()}


def save_job(conn: Connection, job: JobDefinition, origin: str, now: float, create: bool | None = None,
             old_name: str | None = None) -> bool:
    """Create or update a job by name (create=True: must be new; False: must exist); True if anything changed.

    The schedule restarts when a schedule field changed (the run count and history stay: repeats
    counts every run so far); resuming recomputes the next firing from now (firings due while
    paused are not made up); other edits leave the schedule alone.
    """
    key = old_name or job.name
    row = conn.execute(select(Job).where(Job.name == key).with_for_update()).first()
    if row is None and create is False:
        raise ObjectNotFound('job', key)
    if row is not None and create:
        raise JobExists(job.name)
    if key != job.name and conn.execute(select(Job.id).where(Job.name == job.name)).first():
        raise JobExists(job.name)
    if row is None:
        nxt = first_fire(job, now, now) if job.is_active else None
        conn.execute(insert(Job).values(origin=origin, created_at=now, next_run_time=nxt, run_count=0,
                                        last_fire_time=None, version=1, **_columns(job)))
        bump(conn, SYNC_KEY)
        return True
    old = definition(row)
    if old == job and row.origin == origin:
        return False
    state: dict[str, Any] = {}
    if job.changed_schedule(old):
        state = {'last_fire_time': None,
                 'next_run_time': first_fire(job, row.created_at, now, row.run_count) if job.is_active else None}
    elif job.is_active and not old.is_active:
        state = {'next_run_time': first_fire(job, row.created_at, now, row.run_count, row.last_fire_time)}
    elif not job.is_active:
        state = {'next_run_time': None}
    conn.execute(update(Job).where(Job.id == row.id).values(origin=origin, version=Job.version + 1,
                                                            **_columns(job), **state))
    bump(conn, SYNC_KEY)
    return True


def delete_job(conn: Connection, name: str) -> None:
    """Delete a job and its run history."""
    row = get_job(conn, name, for_update=True)
    conn.execute(delete(JobRun).where(JobRun.job_id == row.id))
    conn.execute(delete(Job).where(Job.id == row.id))
    bump(conn, SYNC_KEY)


# Firing


def upcoming(conn: Connection, until: float) -> list[Row[Any]]:
    """Active jobs whose next firing is at or before until, earliest first."""
    return list(conn.execute(select(Job).where(Job.is_active.is_(True), Job.next_run_time.is_not(None),
                                               Job.next_run_time <= until).order_by(Job.next_run_time)).all())


@dataclass(frozen=True)
class Claim:
    """A firing this worker won: the run to start (None when it was recorded as skipped)."""

    run_id: int | None
    fire_time: float | None


def claim(conn: Connection, row: Any, plan: FiringPlan, owner: str, now: float, started_at: float,
          stale_before: float) -> Claim | None:
    """Take the firing planned for a due job row; None if another worker (or an edit) got there first."""
    running = None
    if plan.run is not None and row.skip_if_running:
        running = conn.execute(select(JobRun.id, JobRun.started_at).where(
            JobRun.job_id == row.id, JobRun.outcome == RUNNING, JobRun.heartbeat_at >= stale_before)
            .order_by(JobRun.id.desc()).limit(1)).first()
    runs = row.run_count + (plan.run is not None and running is None)
    done = row.repeats is not None and runs >= row.repeats
    taken = conn.execute(update(Job).where(Job.id == row.id, Job.version == row.version).values(
        next_run_time=None if done else plan.next_run_time, run_count=runs, last_fire_time=plan.last_fire,
        version=Job.version + 1)).rowcount
    if not taken:
        return None
    if plan.missed is not None:
        first, last = plan.missed
        count = f'{plan.missed_count}{"+" if plan.missed_capped else ""}'
        _insert_run(conn, row.id, first, owner, SKIPPED, now,
                    f'{count} firing(s) missed between {iso(first)} and {iso(last)} (no server was running the '
                    f'scheduler, or it fell behind); not run because catch_up is off')
    if plan.run is None:
        return Claim(None, None)
    if running is not None:
        _insert_run(conn, row.id, plan.run, owner, SKIPPED, now,
                    f'previous run {running.id} (started {iso(running.started_at)}) is still running '
                    f'and skip_if_running is on')
        return Claim(None, plan.run)
    run_id = _insert_run(conn, row.id, plan.run, owner, RUNNING, None, '', started_at=started_at, heartbeat_at=now)
    return Claim(run_id, plan.run)


def _insert_run(conn: Connection, job_id: int, fire_time: float, owner: str, outcome: str, ended_at: float | None,
                error: str, kind: str = KIND_SCHEDULE, started_at: float | None = None,
                heartbeat_at: float | None = None) -> int | None:
    values = {'job_id': job_id, 'kind': kind, 'owner': owner, 'outcome': outcome, 'ended_at': ended_at,
              'error': error[:MAX_ERROR_CHARS], 'started_at': started_at, 'heartbeat_at': heartbeat_at, 'cid': ''}
    nested = conn.begin_nested()
    try:
        run_id = conn.execute(insert(JobRun).values(fire_time=fire_time, **values).returning(JobRun.id)).scalar()
        nested.commit()
        return run_id
    except IntegrityError:
        # Only reachable if a firing were claimed twice: the unique index refuses the second run row.
        nested.rollback()
        return None


def start_manual_run(conn: Connection, name: str, owner: str, now: float) -> tuple[Row[Any], int]:
    """Record a run-now of a job as running; returns the job row and the run id."""
    row = get_job(conn, name)
    fire_time = now
    while True:
        run_id = _insert_run(conn, row.id, fire_time, owner, RUNNING, None, '', kind=KIND_MANUAL, started_at=now,
                             heartbeat_at=now)
        if run_id is not None:
            return row, run_id
        fire_time += 1e-6  # two run-nows within the same microsecond


def mark_done(conn: Connection, run_id: int, outcome: str, error: str, ended_at: float, started_at: float,
              cid: str) -> None:
    """Record how a run ended."""
    conn.execute(update(JobRun).where(JobRun.id == run_id).values(
        outcome=outcome, error=error[:MAX_ERROR_CHARS], ended_at=ended_at, started_at=started_at, cid=cid))


def heartbeat(conn: Connection, run_ids: list[int], now: float) -> None:
    """Tell other workers that these runs are still going."""
    conn.execute(update(JobRun).where(JobRun.id.in_(run_ids), JobRun.outcome == RUNNING).values(heartbeat_at=now))


def get_run(conn: Connection, run_id: int) -> Row[Any] | None:
    """One run row."""
    return conn.execute(select(JobRun).where(JobRun.id == run_id)).first()


def list_runs(conn: Connection, name: str, limit: int) -> list[Row[Any]]:
    """The latest runs of a job, newest first."""
    row = get_job(conn, name)
    return list(conn.execute(select(JobRun).where(JobRun.job_id == row.id).order_by(JobRun.id.desc())
                             .limit(limit)).all())


# Housekeeping


def stale_runs(conn: Connection, stale_before: float) -> list[int]:
    """Runs still marked running whose worker stopped sending heartbeats."""
    return list(conn.execute(select(JobRun.id).where(JobRun.outcome == RUNNING,
                                                     JobRun.heartbeat_at < stale_before)).scalars())


def mark_lost(conn: Connection, run_ids: list[int], now: float) -> None:
    """Record runs whose worker died as errors."""
    conn.execute(update(JobRun).where(JobRun.id.in_(run_ids), JobRun.outcome == RUNNING).values(
        outcome=ERROR, ended_at=now, error='lost: the worker running it stopped sending heartbeats '
                                           '(it crashed or was killed); the outcome is unknown'))


def overfull_histories(conn: Connection, keep: int) -> list[int]:
    """Jobs with more than keep runs recorded."""
    return list(conn.execute(select(JobRun.job_id).group_by(JobRun.job_id)
                             .having(func.count(JobRun.id) > keep)).scalars())


def prune_history(conn: Connection, job_id: int, keep: int) -> None:
    """Delete all but the latest keep runs of a job (never one still running)."""
    threshold = conn.execute(select(JobRun.id).where(JobRun.job_id == job_id).order_by(JobRun.id.desc())
                             .offset(keep).limit(1)).scalar()
    if threshold is not None:
        conn.execute(delete(JobRun).where(JobRun.job_id == job_id, JobRun.id <= threshold,
                                          JobRun.outcome != RUNNING))
