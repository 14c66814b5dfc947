"""``SparkService``: a service that submits a Spark pipeline and may react to its result.

::

    from runtime.spark import SparkService

    class SpendReport(SparkService):
        name = 'procurement.spend.report'
        pipeline = 'procurement_spend'              # spark_pipeline/procurement_spend.py
        arguments = {'topic': 'invoice.received'}   # or a list of strings
        timeout = 600                               # seconds; default [spark] default_timeout_secs

        def on_result(self, event):                 # optional: called when the job ended
            self.logger.info('spend report %s: %s', event['outcome'], event['output_location'])

Invoked on any channel (REST, invoke, scheduler), ``handle()`` submits the pipeline and answers
``{job_id, pipeline, status: 'submitted'}`` at once; the request's ``args``, ``timeout``,
``master``, ``conf`` and ``callback`` (when the payload is an object) override the class's.
``self.submit(...)`` does the same from a subclass's own ``handle()``. A class that overrides
``on_result`` is its own callback: the job's event is published to it, and its ``handle()``
passes the event to ``on_result`` — durably, so a result survives a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from runtime.errors import ConfigError, InvalidService
from runtime.service.base import Service
from runtime.spark.manager import PIPELINE_NAME, PUBLISHER

if TYPE_CHECKING:
    from runtime.spark.admin import SparkJobAdmin
    from runtime.spark.manager import SparkManager

class SparkJobs:
    """What a Spark service uses of the jobs: the cluster's (``SparkJobAdmin``), this worker's submit and wait."""

    def __init__(self, admin: SparkJobAdmin, manager: SparkManager) -> None:
        self._admin = admin
        self._manager = manager

    def get(self, job_id: str, log_lines: int | None = None) -> dict[str, Any]:
        """One job, with the tail of its driver's log (see ``SparkJobAdmin.get``)."""
        return self._admin.get(job_id, log_lines)

    def jobs(self, status: str | None = None, pipeline: str | None = None, limit: int = 50,
             offset: int = 0) -> list[dict[str, Any]]:
        """Jobs, newest first."""
        return self._admin.list(status, pipeline, limit, offset)

    def log(self, job_id: str, lines: int = 200) -> list[str]:
        """The last lines of a job's driver log."""
        return self._admin.log(job_id, lines)

    def kill(self, job_id: str, reason: str = 'killed on request') -> dict[str, Any]:
        """Kill a job, wherever it runs."""
        return self._admin.kill(job_id, reason)

    def wait(self, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """The job once it ended, or as it is after timeout seconds."""
        return self._manager.wait(job_id, timeout)

    def submit(self, pipeline: str, args: Any = None, **options: Any) -> str:
        """Submit a pipeline from this worker (see ``SparkManager.submit``); the job id."""
        return self._manager.submit(pipeline, args, **options)


#: Keys of a request payload that override the class's submission settings.
_OVERRIDES = ('args', 'timeout', 'master', 'conf', 'callback')


class SparkService(Service):
    """Base class of services that submit a Spark pipeline."""

    __abstract__ = True

    #: The pipeline: a module of the pipelines directory (spark_pipeline/), without '.py'.
    pipeline: ClassVar[str] = ''
    #: Arguments of the pipeline's main(args): a list of strings, or an object given as --key value.
    arguments: ClassVar[Any] = None
    #: Seconds before the job is killed; None: [spark] default_timeout_secs; 0: no limit.
    timeout: ClassVar[float | None] = None
    #: A Spark master URL; None: [spark] master.
    master: ClassVar[str | None] = None
    #: Extra --conf settings of this pipeline's jobs.
    conf: ClassVar[dict[str, Any] | None] = None
    #: A service the job's event is published to (besides spark.job.completed / spark.job.failed).
    callback: ClassVar[str] = ''

    @classmethod
    def _prepare(cls, module_name: str) -> None:
        super()._prepare(module_name)
        if cls.pipeline and not PIPELINE_NAME.match(cls.pipeline):
            raise InvalidService(f'{cls.__module__}.{cls.__qualname__}',
                                 f'pipeline must be a module name (letters, digits, _), not {cls.pipeline!r}')

    @property
    def spark(self) -> SparkJobs:
        """The runtime's Spark jobs: get(job_id), jobs(), log(job_id), kill(job_id), wait(job_id), submit(...)."""
        spark, spark_admin = self._context.spark, self._context.spark_admin
        if spark is None or spark_admin is None:
            raise ConfigError('spark', f'service {self.name!r} runs where no Spark jobs are managed')
        return SparkJobs(spark_admin(), spark())

    def submit(self, pipeline: str | None = None, args: Any = None, *, master: str | None = None,
               conf: dict[str, Any] | None = None, timeout: float | None = None,
               callback: str | None = None) -> str:
        """Submit a pipeline (default: the class's) and return the job id at once."""
        cls = type(self)
        pipeline = pipeline or cls.pipeline
        if not pipeline:
            raise InvalidService(cls.name, 'no pipeline to submit: set the class attribute pipeline')
        if callback is None:
            callback = cls.callback or (cls.name if cls._has_own_on_result() else '')
        return self.spark.submit(pipeline, cls.arguments if args is None else args,
                                 master=cls.master if master is None else master,
                                 conf=cls.conf if conf is None else conf,
                                 timeout=cls.timeout if timeout is None else timeout,
                                 callback=callback, service=cls.name, cid=self.cid)

    def handle(self) -> None:
        """Submit the pipeline; or, given a job's event as this service's callback, call on_result."""
        payload = self.request.payload
        if self.channel == 'pubsub' and _is_job_event(self.request.raw_request):
            self.on_result(payload)
            return
        given = payload if isinstance(payload, dict) else {}
        job_id = self.submit(**{k: given[k] for k in _OVERRIDES if given.get(k) is not None})
        self.response.payload = {'job_id': job_id, 'pipeline': type(self).pipeline, 'status': 'submitted'}

    def on_result(self, event: dict[str, Any]) -> None:
        """Called with a job's event (outcome, output_location, error, result, ...) once it ended."""

    @classmethod
    def _has_own_on_result(cls) -> bool:
        return cls.on_result is not SparkService.on_result


def _is_job_event(raw: Any) -> bool:
    return isinstance(raw, dict) and raw.get('publisher') == PUBLISHER and isinstance(raw.get('data'), dict) \
        and 'job_id' in raw['data'] and 'outcome' in raw['data']
