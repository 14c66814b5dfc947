"""The scheduler: jobs stored in the database, each firing run exactly once across all workers.

See ``runner`` for how firings are claimed, ``admin`` for reading and changing jobs and their runs,
``jobs`` for job types and fire times, ``statements`` for the SQL, and ``objects`` for the
``scheduler`` section of the object files.
"""

from runtime.scheduler.admin import JobAdmin
from runtime.scheduler.jobs import CRON_STYLE, INTERVAL_BASED, JOB_TYPES, ONE_TIME, JobDefinition
from runtime.scheduler.runner import CHANNEL_SCHEDULER, Scheduler
from runtime.scheduler.statements import SYNC_KEY

__all__ = [
    # Jobs
    'JobDefinition',
    'JOB_TYPES',
    'ONE_TIME',
    'INTERVAL_BASED',
    'CRON_STYLE',
    # Running
    'Scheduler',
    'CHANNEL_SCHEDULER',
    'SYNC_KEY',
    # Administration
    'JobAdmin',
]
