"""Administration of scheduler jobs: list, read, create, change, pause and resume, delete, and their runs.

What the admin API does with jobs, without HTTP. Each change is one transaction that also bumps
the ``scheduler`` sync key (``runtime.scheduler.statements``), so every worker's scheduler looks at
the jobs again within ``sync.interval_secs``, and this worker's at once (``changed``). A job's
services (``service``, ``on_success``, ``on_error``) must be deployed when it is stored. Running
jobs, on schedule or now, stays with ``runtime.scheduler.runner.Scheduler``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine

from runtime.db.blocking import run_transaction
from runtime.errors import InvalidJob
from runtime.scheduler import statements
from runtime.scheduler.jobs import JobDefinition


class JobAdmin:
    """Reads and changes the scheduler's jobs in the database; changed wakes this worker's scheduler after a change.

    timezone: the one a job's dates are in unless it names its own (``[scheduler] timezone``);
    has_service: whether a service is deployed.
    """

    def __init__(self, engine: Engine, timezone: str, has_service: Callable[[str], bool],
                 changed: Callable[[], None]) -> None:
        self._engine = engine
        self._timezone = timezone
        self._has_service = has_service
        self._changed = changed

    def list(self) -> list[dict[str, Any]]:
        """Every job with its state and last run, by name."""
        with self._engine.connect() as conn:
            last = statements.last_runs(conn)
            return [statements.job_dict(r, last.get(r.id)) for r in statements.list_jobs(conn)]

    def page(self, search: str = '', limit: int | None = None, offset: int = 0) -> tuple[int, list[dict[str, Any]]]:
        """(how many jobs match, a page of them with their last runs by name); search: part of the name or service."""
        with self._engine.connect() as conn:
            rows = statements.list_jobs(conn, search or None, limit, offset)
            last = statements.last_runs(conn, [r.id for r in rows])
            total = statements.count_jobs(conn, search or None)
        return total, [statements.job_dict(r, last.get(r.id)) for r in rows]

    def get(self, name: str) -> dict[str, Any]:
        """One job with its state and last run; ObjectNotFound if there is none."""
        with self._engine.connect() as conn:
            row = statements.get_job(conn, name)
            runs = statements.list_runs(conn, name, 1)
        return statements.job_dict(row, runs[0] if runs else None)

    def create(self, data: dict[str, Any]) -> dict[str, Any]:
        """Create a job (origin api) from its attributes; the job. InvalidJob or JobExists naming what is wrong."""
        job = JobDefinition.from_dict(data, self._timezone)
        self._check_services(job)
        self._write(lambda conn: statements.save_job(conn, job, 'api', time.time(), create=True))
        return self.get(job.name)

    def update(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change the attributes of a job given in changes (renaming it if they hold a new name); the job."""
        with self._engine.connect() as conn:
            current = statements.definition(statements.get_job(conn, name)).to_dict()
        job = JobDefinition.from_dict({**current, **changes}, self._timezone)
        self._check_services(job)
        # An edit keeps who manages the job (api, or an object file), read in the writing transaction.
        self._write(lambda conn: statements.save_job(conn, job, statements.get_job(conn, name).origin, time.time(),
                                                create=False, old_name=name))
        return self.get(job.name)

    def set_active(self, name: str, active: bool) -> dict[str, Any]:
        """Pause (False) or resume (True) a job; resuming does not make up firings missed while paused."""
        return self.update(name, {'is_active': active})

    def delete(self, name: str) -> None:
        """Delete a job and its run history; ObjectNotFound if there is none."""
        self._write(lambda conn: statements.delete_job(conn, name))

    def runs(self, name: str, limit: int = 50) -> list[dict[str, Any]]:
        """A job's latest runs, newest first."""
        with self._engine.connect() as conn:
            return [statements.run_dict(r) for r in statements.list_runs(conn, name, limit)]

    def run(self, run_id: int) -> dict[str, Any] | None:
        """One run; None if there is none."""
        with self._engine.connect() as conn:
            row = statements.get_run(conn, run_id)
        return statements.run_dict(row) if row is not None else None

    def _write(self, work: Callable[[Connection], Any]) -> None:
        run_transaction(self._engine, work)
        self._changed()  # other workers see the sync key move; this one is told at once

    def _check_services(self, job: JobDefinition) -> None:
        # Services deploy to every worker, so this worker's answer holds for all of them.
        for field in ('service', 'on_success', 'on_error'):
            name = getattr(job, field)
            if name and not self._has_service(name):
                raise InvalidJob(job.name, field, f'names service {name!r}, which is not deployed')
