"""The Spark jobs of one worker: submitting, tracking, killing, and announcing how they ended.

Reading and killing any job of the cluster (the admin API, the CLI, services) is
``runtime.spark.admin.SparkJobAdmin``; it tells this manager of a kill through ``kill_here``.

``submit`` validates the request, records the job as ``submitted`` and returns its id at once;
a greenlet of this worker runs it through the submitter (``SparkSubmitter``, or a test twin)
and records ``running`` and then ``succeeded``, ``failed`` or ``killed``. While it runs, the
worker writes a heartbeat to the job's row every ``heartbeat_secs``, and reads there any kill
request made through another worker. A job whose worker went silent for ``stale_job_secs``
(killed, host lost) is recorded as failed by whichever worker sweeps first.

When a job ends, its event — ``{job_id, pipeline, arguments, outcome, output_location, error,
result, ...}`` — is published to ``spark.job.completed`` (outcome ``succeeded``) or
``spark.job.failed`` (``failed``, ``killed``), and, if the job has a callback service, to that
service too (durably, as any publication to a service). Each ending is announced once: the
status change is a compare-and-set, and only its winner publishes.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent

from runtime.cluster.workers import new_worker_id
from runtime.db.blocking import run_transaction
from runtime.errors import ConduitError, ConfigError, InvalidSparkJob, PipelineNotFound, TopicNotFound
from runtime.spark import statements
from runtime.spark.submit import (
    ACTIVE_STATUSES,
    FAILED,
    KILLED,
    SUCCEEDED,
    JobOutcome,
    SparkSubmitter,
    Submission,
    parse_conf,
)
from runtime.util.spawn import killed

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from runtime.config import Settings
    from runtime.pubsub.archive import MessageArchive
    from runtime.pubsub.broker import Broker
    from runtime.pubsub.catalog import Catalog

_log = logging.getLogger(__name__)

TOPIC_COMPLETED = 'spark.job.completed'
TOPIC_FAILED = 'spark.job.failed'

#: The publisher named on job events.
PUBLISHER = 'conduit.spark'

#: What a pipeline (module) may be called.
PIPELINE_NAME = re.compile(r'^[A-Za-z][A-Za-z0-9_]{0,99}$')

#: How often wait() looks at a job run by another worker.
WAIT_POLL_SECS = 0.2

#: Reason recorded for jobs killed because their worker stops.
STOPPING = 'killed: the server stopped while the job ran'


def _argument(pipeline: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InvalidSparkJob(pipeline, 'args', f'items must be strings or numbers, not {value!r}')
    return str(value)


def to_argv(pipeline: str, args: Any) -> list[str]:
    """The argument strings main(args) receives: a list as it is, an object as --key value pairs.

    In an object, True gives a bare ``--key``, False and None leave the key out, and a list repeats it.
    """
    if args is None:
        return []
    if isinstance(args, (list, tuple)):
        return [_argument(pipeline, a) for a in args]
    if not isinstance(args, dict):
        raise InvalidSparkJob(pipeline, 'args', f'must be a list of strings or an object of options, '
                                                f'not {type(args).__name__}')
    argv: list[str] = []
    for key, value in args.items():
        if not isinstance(key, str) or not key or key.startswith('-') or any(c.isspace() for c in key):
            raise InvalidSparkJob(pipeline, 'args', f'option name {key!r} is invalid')
        if value is True:
            argv.append(f'--{key}')
        elif value is not None and value is not False:
            for item in value if isinstance(value, (list, tuple)) else [value]:
                argv += [f'--{key}', _argument(pipeline, item)]
    return argv


class SparkManager:
    """Submits and tracks this worker's Spark jobs; stops them when asked, announces how they ended."""

    def __init__(self, settings: Settings, engine: Engine, spawn: Callable[..., gevent.Greenlet], *,
                 has_service: Callable[[str], bool], broker: Broker, catalog: Catalog,
                 archive: MessageArchive | None, owner: str | None = None) -> None:
        """settings: the server's (paths resolve against it); archive: flushed before each job, None when off;
        owner: the worker's id, which its jobs name (a new one when not given)."""
        self._server_settings = settings
        self.settings = settings.spark
        self.engine = engine
        self._spawn = spawn
        self._has_service = has_service
        self._broker = broker
        self._catalog = catalog
        self._archive = archive
        #: Runs one job to its end; tests replace it with runtime.testing.FakeSparkSubmitter.
        self.submitter: Any = SparkSubmitter(self.settings.spark_submit, self.settings.kill_grace_secs)
        self.owner = owner or new_worker_id()
        self.pipelines_dir = settings.path(self.settings.pipelines_dir)
        try:
            self.default_conf = parse_conf(self.settings.conf)
        except ValueError as e:
            raise ConfigError('spark.conf', str(e)) from None
        #: This worker's jobs still running, by job id.
        self.running: dict[str, gevent.Greenlet] = {}
        self._kill_reasons: dict[str, str] = {}
        self._heartbeat: gevent.Greenlet | None = None

    # Lifecycle

    def start(self) -> None:
        """Make sure the event topics exist; start sweeping jobs of dead workers."""
        self.ensure_topics()
        self._spawn(self.sweep_forever, name='spark-sweeper')

    def stop(self) -> None:
        """Kill this worker's running jobs (recorded as killed, announced); never raises."""
        for job_id in list(self.running):
            self._kill_reasons[job_id] = STOPPING
        gevent.joinall(list(self.running.values()), timeout=self.settings.kill_grace_secs + 15.0)

    def ensure_topics(self) -> None:
        """Create spark.job.completed and spark.job.failed unless they exist (e.g. from config)."""
        for name in (TOPIC_COMPLETED, TOPIC_FAILED):
            if self._broker.registry.topic(name) is None:
                try:
                    self._catalog.create_topic(name, origin='spark')
                except ConfigError:
                    pass  # another worker created it at the same moment

    # Submitting

    def check_pipeline(self, name: Any) -> str:
        """The pipeline's name if its module exists; PipelineNotFound otherwise."""
        if not isinstance(name, str) or not PIPELINE_NAME.match(name):
            raise PipelineNotFound(str(name), 'a pipeline is named like a Python module: letters, digits, _')
        if not (self.pipelines_dir / f'{name}.py').is_file():
            raise PipelineNotFound(name, f'no {name}.py in {self.pipelines_dir}')
        return name

    def submit(self, pipeline: str, args: Any = None, *, master: str | None = None,
               conf: dict[str, Any] | None = None, timeout: float | None = None, callback: str = '',
               service: str = '', cid: str = '') -> str:
        """Submit a pipeline with its arguments; returns the job id at once.

        SparkUnavailable (503) before anything is recorded when Spark is not installed.
        """
        self.submitter.check()
        pipeline = self.check_pipeline(pipeline)
        argv = to_argv(pipeline, args)
        master = self.settings.master if master is None else master
        if not isinstance(master, str) or not master.strip() or any(c.isspace() for c in master):
            raise InvalidSparkJob(pipeline, 'master', f'must be a Spark master URL, not {master!r}')
        job_conf = self._check_conf(pipeline, conf)
        if timeout is None:
            timeout = self.settings.default_timeout_secs
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
            raise InvalidSparkJob(pipeline, 'timeout', f'must be a number of seconds (0: no limit), not {timeout!r}')
        if callback and (not isinstance(callback, str) or not self._has_service(callback)):
            raise InvalidSparkJob(pipeline, 'callback', f'names no deployed service: {callback!r}')
        job_id = os.urandom(6).hex()
        settings = self._server_settings
        sub = Submission(job_id=job_id, pipeline=pipeline, argv=argv, master=master,
                         conf={**self.default_conf, **job_conf}, pipelines_dir=self.pipelines_dir,
                         job_dir=settings.path(self.settings.jobs_dir) / job_id,
                         output_location=str(settings.path(self.settings.output_dir) / pipeline / job_id),
                         cwd=settings.base_dir)
        sub.env = {'CONDUIT_SPARK_JOB_ID': job_id, 'CONDUIT_SPARK_PIPELINE': pipeline,
                   'CONDUIT_SPARK_OUTPUT': sub.output_location,
                   'CONDUIT_ARCHIVE_DIR': str(settings.path(settings.archive.dir))}
        now = time.time()
        run_transaction(self.engine, lambda conn: statements.insert_job(
            conn, job_id=job_id, pipeline=pipeline, arguments=_json(argv), master=master,
            conf=_json(statements.masked_conf(job_conf)),  # a secret is passed to spark-submit, never stored
            submitted_at=now, heartbeat_at=now, timeout_secs=float(timeout), service=service, callback=callback,
            cid=cid, owner=self.owner, log_path=str(sub.log_path), output_location=sub.output_location))
        self.running[job_id] = self._spawn(self._run, sub, float(timeout), name=f'spark-job:{job_id}')
        if self._heartbeat is None or self._heartbeat.dead:
            self._heartbeat = self._spawn(self._beat, name='spark-heartbeat')
        _log.info('Spark job %s submitted: pipeline %s, master %s, args %s', job_id, pipeline, master, argv)
        return job_id

    @staticmethod
    def _check_conf(pipeline: str, conf: Any) -> dict[str, str]:
        if conf is None:
            return {}
        if not isinstance(conf, dict):
            raise InvalidSparkJob(pipeline, 'conf', f'must be an object of Spark settings, not {type(conf).__name__}')
        checked = {}
        for key, value in conf.items():
            if not isinstance(key, str) or not key or '=' in key or any(c.isspace() for c in key):
                raise InvalidSparkJob(pipeline, 'conf', f'setting name {key!r} is invalid')
            if not isinstance(value, (str, int, float, bool)):
                raise InvalidSparkJob(pipeline, 'conf', f'value of {key!r} must be a string or a number')
            checked[key] = str(value).lower() if isinstance(value, bool) else str(value)
        return checked

    # Running (in the job's greenlet)

    def _run(self, sub: Submission, timeout: float) -> None:
        job_id = sub.job_id
        deadline = time.monotonic() + timeout if timeout else None

        def should_stop() -> str | None:
            reason = self._kill_reasons.get(job_id)
            if reason:
                return reason
            if deadline is not None and time.monotonic() > deadline:
                return f'killed: timed out after {timeout:g} s (timeout)'
            return None

        def on_started(pid: int | None) -> None:
            if not run_transaction(self.engine, lambda conn: statements.mark_running(conn, job_id, pid, time.time())):
                _log.warning('Spark job %s ended before it started', job_id)

        try:
            if self._archive is not None:
                self._archive.flush()  # the pipeline sees everything this worker delivered until now
            outcome = self.submitter.run(sub, on_started, should_stop)
        except ConduitError as e:
            outcome = JobOutcome(FAILED, None, str(e))
        except Exception as e:
            _log.exception('Spark job %s (%s) could not be run', job_id, sub.pipeline)
            outcome = JobOutcome(FAILED, None, f'{type(e).__name__}: {e}')
        finally:
            self.running.pop(job_id, None)
            self._kill_reasons.pop(job_id, None)
        self._finish(sub, outcome)

    def _finish(self, sub: Submission, outcome: JobOutcome) -> None:
        output = sub.output_location
        if outcome.status == SUCCEEDED and isinstance(outcome.result, dict) \
                and isinstance(outcome.result.get('output'), str):
            output = outcome.result['output']  # the pipeline wrote somewhere else and said so
        try:
            won = run_transaction(self.engine, lambda conn: statements.finish(conn, sub.job_id, outcome, time.time(),
                                                                         output))
        except Exception:
            _log.exception('Spark job %s: cannot record its end (%s); the sweep will', sub.job_id, outcome.status)
            return
        log = _log.info if outcome.status == SUCCEEDED else _log.warning
        log('Spark job %s (%s) %s%s', sub.job_id, sub.pipeline, outcome.status,
            f': {outcome.error}' if outcome.error else '')
        if won:
            self._announce(self._job(sub.job_id))

    def _announce(self, job: dict[str, Any]) -> None:
        """Publish a job's end to its topic and, if it has one, to its callback service."""
        event = {k: job[k] for k in ('job_id', 'pipeline', 'arguments', 'output_location', 'error', 'result',
                                     'master', 'submitted_at', 'started_at', 'ended_at', 'duration_secs',
                                     'exit_code', 'service', 'cid')}
        event['outcome'] = job['status']
        topic = TOPIC_COMPLETED if job['status'] == SUCCEEDED else TOPIC_FAILED
        broker = self._broker
        for target in (topic, job['callback']):
            if not target:
                continue
            try:
                try:
                    broker.publish(target, event, publisher=PUBLISHER, correl_id=job['job_id'])
                except TopicNotFound:
                    self.ensure_topics()  # deleted by an operator since start
                    broker.publish(target, event, publisher=PUBLISHER, correl_id=job['job_id'])
            except Exception:
                _log.exception('Spark job %s: publishing its end to %s failed', job['job_id'], target)

    # Keeping track

    def _beat(self) -> None:
        """While this worker runs jobs: heartbeats, and kill requests made through other workers."""
        while self.running:
            gevent.sleep(self.settings.heartbeat_secs)
            ids = list(self.running)
            try:
                kills = run_transaction(self.engine, lambda conn, ids=ids: statements.heartbeat(conn, ids, time.time()))
            except Exception as e:
                _log.warning('Spark jobs: heartbeat failed: %s', e)
                continue
            for job_id, reason in kills.items():
                self._kill_reasons.setdefault(job_id, reason)

    def sweep_forever(self) -> None:
        """Sweep every stale_job_secs / 2 until killed (start runs it in a greenlet of its own)."""
        interval = max(1.0, self.settings.stale_job_secs / 2)
        while True:
            try:
                self.sweep()
            except Exception as e:
                if killed(e):
                    return  # stopping: the kill landed in a database call
                _log.exception('Spark jobs: sweep failed')
            gevent.sleep(interval)

    def sweep(self, now: float | None = None) -> list[str]:
        """End jobs whose worker went silent, and trim the history; returns the ids of jobs ended."""
        now = time.time() if now is None else now
        silent = self.settings.stale_job_secs
        rows = run_transaction(self.engine, lambda conn: statements.stale_jobs(conn, now - silent), write=False)
        ended = []
        for row in rows:
            if row.job_id in self.running:
                continue
            outcome = JobOutcome(KILLED, None, row.kill_requested) if row.kill_requested else \
                JobOutcome(FAILED, None, f'lost: no sign of life for {silent:g} s from worker {row.owner} '
                                         f'(it stopped or died while the job ran)')
            if run_transaction(self.engine, lambda conn, r=row, o=outcome: statements.end_stale(conn, r, o, now)):
                _log.warning('Spark job %s (%s) recorded as %s: %s', row.job_id, row.pipeline, outcome.status,
                             outcome.error)
                ended.append(row.job_id)
                self._announce(self._job(row.job_id))
        keep = self.settings.history_max_jobs
        cutoff = run_transaction(self.engine, lambda conn: statements.prune_cutoff(conn, keep), write=False)
        if cutoff is not None:
            logs = run_transaction(self.engine, lambda conn: statements.prune(conn, cutoff))
            gevent.get_hub().threadpool.apply(_remove_job_dirs, (logs,))
        return ended

    # Killing and waiting (the reads are SparkJobAdmin's)

    def kill_here(self, job_id: str, reason: str) -> None:
        """Stop a job at once if this worker runs it (SparkJobAdmin.kill has recorded the request)."""
        # A job run elsewhere is left to its worker, which reads the request at its next heartbeat.
        if job_id in self.running:
            self._kill_reasons.setdefault(job_id, reason)

    def wait(self, job_id: str, timeout: float = 60.0) -> dict[str, Any]:
        """The job once it ended, or as it is after timeout seconds."""
        deadline = time.monotonic() + timeout
        greenlet = self.running.get(job_id)
        if greenlet is not None:
            greenlet.join(timeout)
        while True:
            job = self._job(job_id)
            if job['status'] not in ACTIVE_STATUSES or time.monotonic() >= deadline:
                return job
            gevent.sleep(WAIT_POLL_SECS)

    def _job(self, job_id: str) -> dict[str, Any]:
        """One job as its row holds it, without its log (what events and wait answer)."""
        # Read here rather than through SparkJobAdmin.get: the admin is built after this manager (it is
        # given kill_here), and these reads never need the log tail that get adds.
        row = run_transaction(self.engine, lambda conn: statements.get_job(conn, job_id), write=False)
        return statements.job_dict(row)


def _json(value: Any) -> str:
    return json.dumps(value)


def _remove_job_dirs(log_paths: list[str]) -> None:
    for path in log_paths:
        if path:
            shutil.rmtree(Path(path).parent, ignore_errors=True)
