"""Administration of Spark jobs: list, read, read the driver's log, kill; the pipelines there are.

What the admin API, the CLI and services do with the jobs of the whole cluster, without HTTP. A
job is read from its row (``conduit_spark_job``), so any worker answers for any job. Submitting
is not here: it starts a greenlet and a spark-submit, which only the running part
(``runtime.spark.manager.SparkManager``) does; nor is ``wait``, which joins that greenlet.

A kill is a request written to the job's row: the worker running the job reads it at its next
heartbeat and stops the job. When that worker is this one, ``kill_here`` tells it at once, so
the job stops without waiting for the heartbeat.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent

from runtime.db.blocking import run_transaction
from runtime.errors import InvalidSparkJob
from runtime.spark import statements
from runtime.spark.manager import PIPELINE_NAME
from runtime.spark.submit import STATUSES, tail_lines

if TYPE_CHECKING:
    from pathlib import Path

    from sqlalchemy import Engine

    from runtime.config import SparkSection


class SparkJobAdmin:
    """Reads and kills the Spark jobs of the cluster; lists the pipelines that can be submitted."""

    def __init__(self, engine: Engine, settings: SparkSection, pipelines_dir: Path,
                 kill_here: Callable[[str, str], None]) -> None:
        """settings: the [spark] section (log_tail_lines, master); pipelines_dir: resolved against the server's
        base directory; kill_here(job_id, reason): stops the job at once if this worker runs it."""
        self.engine = engine
        self.settings = settings
        self.pipelines_dir = pipelines_dir
        self._kill_here = kill_here

    def list(self, status: str | None = None, pipeline: str | None = None, limit: int = 50,
             offset: int = 0) -> list[dict[str, Any]]:
        """Jobs, newest first (offset skips that many)."""
        if status is not None and status not in STATUSES:
            raise InvalidSparkJob(pipeline or '*', 'status', f'must be one of {", ".join(STATUSES)}, not {status!r}')
        rows = run_transaction(self.engine, lambda conn: statements.list_jobs(conn, status, pipeline, limit, offset),
                               write=False)
        return [statements.job_dict(r) for r in rows]

    def get(self, job_id: str, log_lines: int | None = None) -> dict[str, Any]:
        """One job; with log_lines (default: [spark] log_tail_lines), the tail of its driver's log."""
        row = run_transaction(self.engine, lambda conn: statements.get_job(conn, job_id), write=False)
        job = statements.job_dict(row)
        lines = self.settings.log_tail_lines if log_lines is None else log_lines
        if lines:
            job['log_tail'] = self.log(job_id, lines, job['log_path'])
        return job

    def log(self, job_id: str, lines: int = 200, log_path: str | None = None) -> list[str]:
        """The last lines of a job's driver log (read off the hub)."""
        if log_path is None:
            log_path = self.get(job_id, log_lines=0)['log_path']
        return gevent.get_hub().threadpool.apply(tail_lines, (log_path, lines))

    def kill(self, job_id: str, reason: str = 'killed on request') -> dict[str, Any]:
        """Kill a job, wherever it runs; returns the job (still running until its worker acts)."""
        run_transaction(self.engine, lambda conn: statements.request_kill(conn, job_id, reason))
        self._kill_here(job_id, reason)
        return self.get(job_id, log_lines=0)

    def pipelines(self) -> list[str]:
        """Names of the pipelines in the pipelines directory."""
        if not self.pipelines_dir.is_dir():
            return []
        return sorted(p.stem for p in self.pipelines_dir.glob('*.py') if PIPELINE_NAME.match(p.stem))
