"""Spark jobs in the database (table ``conduit_spark_job``): plain functions over a connection.

Every change of status is a compare-and-set on the current status, so a job ends exactly once
even when its worker, a kill request and the sweep of stale jobs race: whoever moves it out of
``submitted``/``running`` first wins, and only the winner publishes the job's event.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy import Connection, Row, delete, func, insert, select, update

from runtime.db.models import SparkJob
from runtime.errors import SparkJobNotFound
from runtime.spark.submit import ACTIVE_STATUSES, RUNNING, SUBMITTED, JobOutcome
from runtime.util.timefmt import iso_or_none

#: Spark setting names whose values are secrets (e.g. spark.hadoop.fs.s3a.secret.key).
_SECRET_KEY = re.compile(r'secret|password|passwd|token|credential|access\.key|\.key$', re.IGNORECASE)


def masked_conf(conf: dict[str, str]) -> dict[str, str]:
    """Spark settings fit to show: values of keys that name a secret (password, token, ...) as ***."""
    return {k: '***' if _SECRET_KEY.search(k) else v for k, v in conf.items()}


def job_dict(row: Any) -> dict[str, Any]:
    """A job as the admin API, the CLI and events show it."""
    end = row.ended_at
    return {'job_id': row.job_id, 'pipeline': row.pipeline, 'arguments': json.loads(row.arguments),
            'status': row.status, 'master': row.master, 'conf': masked_conf(json.loads(row.conf)),
            'submitted_at': iso_or_none(row.submitted_at), 'started_at': iso_or_none(row.started_at),
            'ended_at': iso_or_none(end),
            'duration_secs': round(end - row.started_at, 3) if end is not None and row.started_at else None,
            'timeout_secs': row.timeout_secs or None, 'service': row.service, 'callback': row.callback,
            'cid': row.cid, 'owner': row.owner, 'pid': row.pid, 'exit_code': row.exit_code,
            'log_path': row.log_path, 'output_location': row.output_location, 'result': json.loads(row.result),
            'error': row.error, 'kill_requested': row.kill_requested or None}


def insert_job(conn: Connection, **values: Any) -> None:
    """Record a job as submitted."""
    conn.execute(insert(SparkJob).values(status=SUBMITTED, **values))


def get_job(conn: Connection, job_id: str) -> Row[Any]:
    """One job's row; SparkJobNotFound if there is none."""
    row = conn.execute(select(SparkJob).where(SparkJob.job_id == job_id)).first()
    if row is None:
        raise SparkJobNotFound(job_id)
    return row


def list_jobs(conn: Connection, status: str | None = None, pipeline: str | None = None,
              limit: int = 50, offset: int = 0) -> list[Row[Any]]:
    """Jobs, newest first, optionally of one status or pipeline; offset skips that many."""
    query = select(SparkJob).order_by(SparkJob.id.desc()).limit(limit).offset(offset)
    if status:
        query = query.where(SparkJob.status == status)
    if pipeline:
        query = query.where(SparkJob.pipeline == pipeline)
    return list(conn.execute(query).all())


def mark_running(conn: Connection, job_id: str, pid: int | None, now: float) -> bool:
    """submitted → running; False if the job already ended (killed before it started)."""
    return conn.execute(update(SparkJob).where(SparkJob.job_id == job_id, SparkJob.status == SUBMITTED)
                        .values(status=RUNNING, pid=pid, started_at=now, heartbeat_at=now)).rowcount == 1


def finish(conn: Connection, job_id: str, outcome: JobOutcome, now: float, output_location: str) -> bool:
    """Record how a job ended; False if something else (a sweep) ended it first."""
    return conn.execute(
        update(SparkJob).where(SparkJob.job_id == job_id, SparkJob.status.in_(ACTIVE_STATUSES))
        .values(status=outcome.status, ended_at=now, exit_code=outcome.exit_code, error=outcome.error,
                result=json.dumps(outcome.result, default=str), output_location=output_location,
                started_at=func.coalesce(SparkJob.started_at, now))).rowcount == 1


def heartbeat(conn: Connection, job_ids: list[str], now: float) -> dict[str, str]:
    """Mark this worker's jobs alive; returns the kill reasons requested for any of them."""
    if not job_ids:
        return {}
    conn.execute(update(SparkJob).where(SparkJob.job_id.in_(job_ids), SparkJob.status.in_(ACTIVE_STATUSES))
                 .values(heartbeat_at=now))
    rows = conn.execute(select(SparkJob.job_id, SparkJob.kill_requested)
                        .where(SparkJob.job_id.in_(job_ids), SparkJob.kill_requested != '')).all()
    return {r.job_id: r.kill_requested for r in rows}


def request_kill(conn: Connection, job_id: str, reason: str) -> Row[Any]:
    """Ask the worker running a job to kill it; returns the job's row."""
    row = get_job(conn, job_id)
    if row.status in ACTIVE_STATUSES:
        conn.execute(update(SparkJob).where(SparkJob.job_id == job_id).values(kill_requested=reason[:200]))
    return row


def stale_jobs(conn: Connection, silent_since: float) -> list[Row[Any]]:
    """Active jobs whose worker has not been heard of since silent_since."""
    alive_at = func.coalesce(SparkJob.heartbeat_at, SparkJob.submitted_at)
    return list(conn.execute(select(SparkJob).where(SparkJob.status.in_(ACTIVE_STATUSES),
                                                    alive_at < silent_since)).all())


def end_stale(conn: Connection, row: Any, outcome: JobOutcome, now: float) -> bool:
    """End a stale job, unless its worker spoke up (or ended it) since it was read."""
    heard = SparkJob.heartbeat_at == row.heartbeat_at if row.heartbeat_at is not None \
        else SparkJob.heartbeat_at.is_(None)
    return conn.execute(
        update(SparkJob).where(SparkJob.job_id == row.job_id, SparkJob.status == row.status, heard)
        .values(status=outcome.status, ended_at=now, error=outcome.error)).rowcount == 1


def prune_cutoff(conn: Connection, keep: int) -> int | None:
    """The row id at and below which finished jobs are beyond the newest keep; None if none are."""
    return conn.execute(select(SparkJob.id).where(SparkJob.status.not_in(ACTIVE_STATUSES))
                        .order_by(SparkJob.id.desc()).offset(keep).limit(1)).scalar()


def prune(conn: Connection, cutoff: int) -> list[str]:
    """Delete finished jobs with ids up to cutoff; returns their log paths."""
    old = (SparkJob.id <= cutoff) & SparkJob.status.not_in(ACTIVE_STATUSES)
    logs = list(conn.execute(select(SparkJob.log_path).where(old)).scalars())
    conn.execute(delete(SparkJob).where(old))
    return logs
