"""The ``scheduler`` section of the object files: jobs, in the keys of Zato's enmasse files.

``name, service, job_type, start_date, weeks, days, hours, minutes, seconds, repeats,
cron_definition, extra, is_active`` as in Zato, plus ``timezone, jitter, max_execution_time,
on_success, on_error, skip_if_running, catch_up``. Jobs are matched by name. Re-applying a file
leaves the schedule of an unchanged job alone; jobs the files no longer declare are removed if
the files made them.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection

from runtime.config import SchedulerSection
from runtime.errors import ConfigError, InvalidJob
from runtime.objects import SectionHandler
from runtime.scheduler import store
from runtime.scheduler.jobs import JobDefinition

#: The section's name in the object files.
SECTION = 'scheduler'


def make_apply_jobs(settings: SchedulerSection):  # type: ignore[no-untyped-def]
    """The handler of section scheduler (new jobs without a timezone get the server's default)."""

    def apply_jobs(conn: Connection, items: list[dict[str, Any]]) -> None:
        now = time.time()
        jobs: list[JobDefinition] = []
        for item in items:
            where = f'{item["_file"]} [{SECTION}] {item.get("name", "?")!r}'
            try:
                job = JobDefinition.from_dict({k: v for k, v in item.items() if k != '_file'}, settings.timezone)
            except InvalidJob as e:
                raise ConfigError(where, f'{e.field!r} {e.reason}') from None
            if any(j.name == job.name for j in jobs):
                raise ConfigError(where, 'job declared twice')
            jobs.append(job)
        for job in jobs:
            store.save_job(conn, job, 'config', now)
        store.delete_config_jobs_except(conn, {j.name for j in jobs})

    return apply_jobs


def section_handler(settings: SchedulerSection) -> SectionHandler:
    """The handler to register with the ObjectsApplier."""
    return SectionHandler(SECTION, make_apply_jobs(settings), (store.SYNC_KEY,))
