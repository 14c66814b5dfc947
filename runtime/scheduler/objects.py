"""The ``scheduler`` section of the object files: jobs, in the keys of Zato's enmasse files.

``name, service, job_type, start_date, weeks, days, hours, minutes, seconds, repeats,
cron_definition, extra, is_active`` as in Zato, plus ``timezone, jitter, max_execution_time,
on_success, on_error, skip_if_running, catch_up``. Jobs are matched by name. Re-applying a file
leaves the schedule of an unchanged job alone; jobs the files no longer declare are removed if
those files made them (``runtime.objects.applier``: each job belongs to the file that declared it). A job
naming a service that does not exist is refused.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, delete, select, update

from runtime.config import SchedulerSection
from runtime.db.models import Job, JobRun
from runtime.errors import ConfigError, InvalidJob
from runtime.objects.applier import CREATE, DELETE, UPDATE, Scope, SectionHandler
from runtime.objects.checks import check_service
from runtime.scheduler import statements
from runtime.scheduler.jobs import JobDefinition

#: The section's name in the object files.
SECTION = 'scheduler'


def make_apply_jobs(settings: SchedulerSection):  # type: ignore[no-untyped-def]
    """The handler of section scheduler (new jobs without a timezone get the server's default)."""

    def apply_jobs(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
        now = time.time()
        jobs: list[tuple[JobDefinition, str]] = []
        for item in items:
            where = f'{item["_file"]} [{SECTION}] {item.get("name", "?")!r}'
            try:
                job = JobDefinition.from_dict({k: v for k, v in item.items() if k != '_file'}, settings.timezone)
            except InvalidJob as e:
                raise ConfigError(where, f'{e.field!r} {e.reason}') from None
            if any(j.name == job.name for j, _ in jobs):
                raise ConfigError(where, 'job declared twice')
            for service in (job.service, job.on_success, job.on_error):
                check_service(scope.service_exists, service, where)
            jobs.append((job, item['_file']))
        declared = {j.name for j, _ in jobs}
        for row in scope.stale(conn, Job):
            if row.name not in declared:
                conn.execute(delete(JobRun).where(JobRun.job_id == row.id))
                conn.execute(delete(Job).where(Job.id == row.id))
                scope.record(DELETE, 'job', row.name, row.owner)
        for job, file in jobs:
            row = conn.execute(select(Job.origin, Job.owner).where(Job.name == job.name)).first()
            if row is not None and not scope.may_take('job', job.name, row.origin, row.owner, file):
                continue
            changed = statements.save_job(conn, job, 'config', now)
            if row is None:
                scope.record(CREATE, 'job', job.name, file)
            elif changed or row.owner != file:
                scope.record(UPDATE, 'job', job.name, file)
            if row is None or row.owner != file:
                conn.execute(update(Job).where(Job.name == job.name).values(owner=file))

    return apply_jobs


def section_handler(settings: SchedulerSection) -> SectionHandler:
    """The handler to register with the ObjectsApplier."""
    return SectionHandler(SECTION, make_apply_jobs(settings), (statements.SYNC_KEY,))
