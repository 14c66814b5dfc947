"""Spark pipelines: submit PySpark jobs with spark-submit, track them, react to results.

- ``SparkService`` (``service.py``): the service class that submits a pipeline and gets its result.
- ``SparkManager`` (``manager.py``): one worker's jobs — submit, track, stop, wait, announce the end.
- ``SparkJobAdmin`` (``admin.py``): any job of the cluster — list, get, log, kill; the pipelines there are.
- ``SparkSubmitter`` (``submit.py``): runs one job with spark-submit, off the gevent hub.
- ``statements.py``: the ``conduit_spark_job`` table; ``launcher.py``: the driver-side script.

A package rather than ``spark.py``: together these are over 600 lines, and each part has one job.
"""

from runtime.spark.manager import TOPIC_COMPLETED, TOPIC_FAILED, SparkManager
from runtime.spark.service import SparkService
from runtime.spark.submit import (
    FAILED,
    KILLED,
    RUNNING,
    SUBMITTED,
    SUCCEEDED,
    JobOutcome,
    SparkSubmitter,
    Submission,
)

__all__ = [
    # Services
    'SparkService',
    # Jobs
    'SparkManager',
    'SparkSubmitter',
    'Submission',
    'JobOutcome',
    # Statuses and event topics
    'SUBMITTED',
    'RUNNING',
    'SUCCEEDED',
    'FAILED',
    'KILLED',
    'TOPIC_COMPLETED',
    'TOPIC_FAILED',
]
