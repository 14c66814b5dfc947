"""Spark job tracking without Spark: runtime.spark with the FakeSparkSubmitter twin.

Submission returns a job id at once; the job goes submitted → running → succeeded, failed or
killed (timeout, a kill request through any worker, its worker going silent); each ending is
recorded once and published to spark.job.completed / spark.job.failed and the callback service.
Runs on both database backends; the real spark-submit is covered by tests/spark/test_spark.py.
"""

from __future__ import annotations

import base64
import importlib.util
import re
import time
from pathlib import Path

import falcon.testing
import pytest
from sqlalchemy import select, update

from runtime import Service
from runtime.db.blocking import run_transaction
from runtime.db.models import SparkJob
from runtime.errors import InvalidService, InvalidSparkJob, PipelineNotFound, SparkJobNotFound, SparkUnavailable
from runtime.spark import TOPIC_COMPLETED, TOPIC_FAILED, SparkService, SparkSubmitter
from runtime.testing import FakeSparkSubmitter, make_settings, wait_until
from tests.recorder import Recorder

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 30.0  # how long a condition may take under load; met conditions return at once

# The services below record, on the recorder _runtime binds them to, the events they get on
# 'events' as (kind, event), and what on_result got on 'results'.


class Report(SparkService):
    """Submits the analytics pipeline with default arguments; the callback is a separate service."""

    name = 'sj.report'
    pipeline = 'traffic_analytics'
    arguments = {'topic': ['orders.created', 'crm.sync'], 'since': '2026-01-01', 'verbose': True, 'skip': None}
    timeout = 30
    callback = 'sj.callback'


class SelfReacting(SparkService):
    """Is its own callback: on_result gets the event."""

    name = 'sj.self-reacting'
    pipeline = 'procurement_spend'

    def on_result(self, event):
        self.recorder.add('results', event)


class Completed(Service):
    name = 'sj.on-completed'

    def handle(self):
        self.recorder.add('events', ('completed', self.request.payload))


class Failed(Service):
    name = 'sj.on-failed'

    def handle(self):
        self.recorder.add('events', ('failed', self.request.payload))


class Callback(Service):
    name = 'sj.callback'

    def handle(self):
        self.recorder.add('events', ('callback', self.request.payload))


def _runtime(runtime_factory, recorder: Recorder, tmp_path: Path, db_url: str | None, name: str = 'rt',
             **submitter):
    (tmp_path / name).mkdir()
    settings = make_settings(tmp_path / name, db_url)
    settings.spark.pipelines_dir = str(REPO / 'spark_pipeline')
    settings.spark.heartbeat_secs = 0.05
    settings.pubsub.lease_renew_secs = 0.1  # new subscriptions (the events') are delivered at once
    rt = runtime_factory(*recorder.bind_all((Report, SelfReacting, Completed, Failed, Callback)), settings=settings)
    rt.spark.submitter = FakeSparkSubmitter(**submitter)
    return rt


def _subscribe_to_events(rt) -> None:
    rt.catalog.subscribe(TOPIC_COMPLETED, service='sj.on-completed')
    rt.catalog.subscribe(TOPIC_FAILED, service='sj.on-failed')


def _events(recorder: Recorder, kind: str) -> list[dict]:
    return [e for k, e in recorder['events'] if k == kind]


def test_a_job_is_submitted_at_once_tracked_and_announced(runtime_factory, tmp_path, db_url, recorder):
    rt = _runtime(runtime_factory, recorder, tmp_path, db_url, result={'output': '/data/out', 'rows': 3},
                  duration_secs=0.3)
    _subscribe_to_events(rt)
    started = time.monotonic()
    answer = rt.invoke('sj.report', {'args': {'topic': 'orders.created'}, 'timeout': 20})
    assert time.monotonic() - started < 0.25, 'submit waited for the job'
    job_id = answer['job_id']
    assert answer == {'job_id': job_id, 'pipeline': 'traffic_analytics', 'status': 'submitted'}
    assert rt.spark_admin.get(job_id)['status'] in ('submitted', 'running')
    wait_until(lambda: rt.spark_admin.get(job_id)['status'] == 'running', TIMEOUT, message='running')

    job = rt.spark.wait(job_id, TIMEOUT)
    assert job['status'] == 'succeeded', job
    assert job['arguments'] == ['--topic', 'orders.created']
    assert job['timeout_secs'] == 20 and job['service'] == 'sj.report' and job['callback'] == 'sj.callback'
    assert job['output_location'] == '/data/out' and job['result'] == {'output': '/data/out', 'rows': 3}
    assert job['started_at'] and job['ended_at'] and job['duration_secs'] >= 0.25
    assert job['error'] == '' and job['master'] == 'local[*]'
    sub = rt.spark.submitter.submissions[0]
    assert sub.env['CONDUIT_SPARK_JOB_ID'] == job_id and sub.output_location.endswith(f'traffic_analytics/{job_id}')

    wait_until(lambda: _events(recorder, 'completed') and _events(recorder, 'callback'), TIMEOUT,
               message='event and callback')
    for event in (_events(recorder, 'completed')[0], _events(recorder, 'callback')[0]):
        assert event['job_id'] == job_id and event['outcome'] == 'succeeded'
        assert event['pipeline'] == 'traffic_analytics' and event['arguments'] == ['--topic', 'orders.created']
        assert event['output_location'] == '/data/out' and event['error'] == '' and event['result']['rows'] == 3
    assert not _events(recorder, 'failed')
    assert [j['job_id'] for j in rt.spark_admin.list(status='succeeded')] == [job_id]
    assert rt.spark_admin.list(pipeline='procurement_spend') == []


def test_class_arguments_are_the_default_and_a_service_can_be_its_own_callback(runtime_factory, tmp_path, recorder):
    rt = _runtime(runtime_factory, recorder, tmp_path, None, result={'invoices': 2})
    job_id = rt.invoke('sj.report')['job_id']
    assert rt.spark.wait(job_id, TIMEOUT)['arguments'] == [
        '--topic', 'orders.created', '--topic', 'crm.sync', '--since', '2026-01-01', '--verbose']
    job_id = rt.invoke('sj.self-reacting')['job_id']
    assert rt.spark_admin.get(job_id)['callback'] == 'sj.self-reacting'
    results = recorder.wait_for('results', timeout=TIMEOUT)
    assert results[0]['job_id'] == job_id and results[0]['outcome'] == 'succeeded'
    assert results[0]['result'] == {'invoices': 2}


def test_failures_timeouts_and_kills_are_recorded_and_announced(runtime_factory, tmp_path, db_url, recorder):
    rt = _runtime(runtime_factory, recorder, tmp_path, db_url, duration_secs=30,
                  outcomes={'procurement_spend': ('failed', None, 'ValueError: invoice 7 has no amount')})
    _subscribe_to_events(rt)
    rt.spark.submitter.duration_secs = 0
    failed = rt.spark.submit('procurement_spend', ['--since', '2026-01-01'])
    assert rt.spark.wait(failed, TIMEOUT)['status'] == 'failed'
    rt.spark.submitter.duration_secs = 30
    timed_out = rt.spark.submit('traffic_analytics', timeout=0.2)
    killed = rt.spark.submit('traffic_analytics', timeout=0)
    wait_until(lambda: rt.spark_admin.get(killed)['status'] == 'running', TIMEOUT)
    assert rt.spark_admin.kill(killed)['kill_requested'] == 'killed on request'

    jobs = {j: rt.spark.wait(j, TIMEOUT) for j in (failed, timed_out, killed)}
    assert jobs[failed]['error'] == 'ValueError: invoice 7 has no amount' and jobs[failed]['exit_code'] == 1
    assert jobs[timed_out]['status'] == 'killed'
    assert jobs[timed_out]['error'] == 'killed: timed out after 0.2 s (timeout)'
    assert jobs[killed]['status'] == 'killed' and jobs[killed]['error'] == 'killed on request'
    wait_until(lambda: len(_events(recorder, 'failed')) == 3, TIMEOUT, message='three failure events')
    announced = {e['job_id']: e for e in _events(recorder, 'failed')}
    assert announced[failed]['outcome'] == 'failed'
    assert announced[failed]['error'] == 'ValueError: invoice 7 has no amount'
    assert announced[timed_out]['outcome'] == 'killed' and 'timed out' in announced[timed_out]['error']
    assert announced[killed]['outcome'] == 'killed'
    assert not _events(recorder, 'completed')
    assert rt.spark_admin.kill(failed)['status'] == 'failed'  # a kill after the end changes nothing


def test_a_kill_through_another_worker_and_a_job_whose_worker_died(runtime_factory, tmp_path, db_url, recorder):
    other = _runtime(runtime_factory, recorder, tmp_path, db_url, 'other')
    _subscribe_to_events(other)  # first: the runner (no sync poller in tests) loads it at start
    runner = _runtime(runtime_factory, recorder, tmp_path, db_url, 'runner', duration_secs=30)
    job_id = runner.spark.submit('traffic_analytics')
    wait_until(lambda: other.spark_admin.get(job_id)['status'] == 'running', TIMEOUT)
    other.spark_admin.kill(job_id, 'killed by the operator')
    job = other.spark.wait(job_id, TIMEOUT)
    assert job['status'] == 'killed' and job['error'] == 'killed by the operator'

    # A job whose worker stopped heartbeating: the sweep of any other worker ends it, once.
    lost = runner.spark.submit('traffic_analytics')
    wait_until(lambda: runner.spark_admin.get(lost)['status'] == 'running', TIMEOUT)
    runner.spark.running[lost].kill()  # the worker "dies" without recording anything
    # ... and so does its heartbeat: one that had read the job's id before the kill could write
    # heartbeat_at after the update below, and the sweep then rightly found the job alive.
    runner.spark._heartbeat.kill()  # type: ignore[union-attr]
    long_ago = time.time() - 3600
    run_transaction(other.engine, lambda c: c.execute(update(SparkJob).where(SparkJob.job_id == lost)
                                                     .values(status='running', heartbeat_at=long_ago,
                                                             ended_at=None, error='')))
    assert other.spark.sweep() == [lost]
    assert other.spark.sweep() == []
    job = other.spark_admin.get(lost)
    assert job['status'] == 'failed' and job['error'].startswith('lost: no sign of life for 30 s from worker')
    wait_until(lambda: len(_events(recorder, 'failed')) == 2, TIMEOUT, message='two failure events')


def test_bad_submissions_name_the_pipeline_and_the_field(runtime_factory, tmp_path, recorder):
    rt = _runtime(runtime_factory, recorder, tmp_path, None)
    with pytest.raises(PipelineNotFound, match="'no_such_pipeline'.*no no_such_pipeline.py in"):
        rt.spark.submit('no_such_pipeline')
    with pytest.raises(PipelineNotFound, match="'../etc/passwd'"):
        rt.spark.submit('../etc/passwd')
    with pytest.raises(PipelineNotFound):
        rt.spark.submit('_archive')  # a helper module, not a pipeline
    cases = [({'args': 'x'}, 'args'), ({'args': [{'a': 1}]}, 'args'), ({'args': {'bad key': 1}}, 'args'),
             ({'timeout': -1}, 'timeout'), ({'timeout': 'soon'}, 'timeout'), ({'master': 'local [2]'}, 'master'),
             ({'conf': {'spark.x y': 1}}, 'conf'), ({'conf': ['a']}, 'conf'), ({'callback': 'nobody'}, 'callback')]
    for kwargs, field in cases:
        with pytest.raises(InvalidSparkJob) as e:
            rt.spark.submit('traffic_analytics', **kwargs)
        assert e.value.field == field and e.value.pipeline == 'traffic_analytics', kwargs
    with pytest.raises(SparkJobNotFound, match="'nope'"):
        rt.spark_admin.get('nope')
    with pytest.raises(InvalidSparkJob, match='status'):
        rt.spark_admin.list(status='done')
    assert rt.spark_admin.list() == []
    assert rt.spark_admin.pipelines() == ['procurement_spend', 'traffic_analytics']

    class NoPipeline(SparkService):
        name = 'sj.no-pipeline'
    rt.deploy(NoPipeline)
    with pytest.raises(InvalidService, match='no pipeline to submit'):
        rt.invoke('sj.no-pipeline')

    class BadPipeline(SparkService):
        name = 'sj.bad-pipeline'
        pipeline = 'a-b'
    with pytest.raises(InvalidService, match="not 'a-b'"):
        rt.deploy(BadPipeline)


def test_admin_api(runtime_factory, tmp_path, recorder):
    rt = _runtime(runtime_factory, recorder, tmp_path, None, duration_secs=30)
    client = falcon.testing.TestClient(rt.make_app())
    auth = {'Authorization': 'Basic ' + base64.b64encode(b'admin:test-admin-password').decode()}
    conf = {'spark.sql.shuffle.partitions': 2, 'spark.hadoop.fs.s3a.secret.key': 's3-secret-7'}
    r = client.simulate_post('/admin/spark/jobs', json={'pipeline': 'traffic_analytics', 'args': ['--topic', 'x'],
                                                        'conf': conf}, headers=auth)
    assert r.status_code == 201, r.text
    job_id = r.json['job_id']
    assert r.json['job']['service'] == 'admin'
    assert r.json['job']['conf'] == {'spark.sql.shuffle.partitions': '2', 'spark.hadoop.fs.s3a.secret.key': '***'}
    assert rt.spark.submitter.submissions[0].conf['spark.sql.shuffle.partitions'] == '2'
    assert rt.spark.submitter.submissions[0].conf['spark.hadoop.fs.s3a.secret.key'] == 's3-secret-7'
    with rt.engine.connect() as conn:  # the secret reached spark-submit but was never stored
        assert 's3-secret-7' not in conn.execute(select(SparkJob.conf)).scalar_one()
    assert rt.spark.submitter.submissions[0].conf['spark.ui.showConsoleProgress'] == 'false'  # server default
    r = client.simulate_get('/admin/spark/jobs', headers=auth)
    assert [j['job_id'] for j in r.json['jobs']] == [job_id]
    log = Path(rt.spark_admin.get(job_id)['log_path'])
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(''.join(f'line {n}\n' for n in range(100)))
    # The job's greenlet records that it runs in a transaction of its own: let it (under load it may lag).
    wait_until(lambda: rt.spark_admin.get(job_id)['status'] == 'running', TIMEOUT, message='running')
    r = client.simulate_get(f'/admin/spark/jobs/{job_id}', params={'lines': 3}, headers=auth)
    assert r.json['job']['log_tail'] == ['line 97', 'line 98', 'line 99']
    r = client.simulate_get(f'/admin/spark/jobs/{job_id}/log', params={'lines': 2}, headers=auth)
    assert r.json['lines'] == ['line 98', 'line 99'] and r.json['status'] == 'running'
    assert client.simulate_post(f'/admin/spark/jobs/{job_id}/kill', headers=auth).status_code == 200
    r = client.simulate_post(f'/admin/spark/jobs/{job_id}/wait', params={'timeout': 10}, headers=auth)
    assert r.json['job']['status'] == 'killed'
    r = client.simulate_get('/admin/spark/pipelines', headers=auth)
    assert r.json['pipelines'] == ['procurement_spend', 'traffic_analytics']
    for body, status, text in (({'pipeline': 'nope'}, 404, "'nope'"), ({'pipeline': 'traffic_analytics',
                                'timeout': -1}, 400, "'timeout'"), ({'pipeline': 'x', 'bogus': 1}, 400, 'bogus'),
                               ([], 400, 'JSON object')):
        r = client.simulate_post('/admin/spark/jobs', json=body, headers=auth)
        assert r.status_code == status and text in r.json['details'], (body, r.text)
    assert client.simulate_get('/admin/spark/jobs/nope', headers=auth).status_code == 404
    assert client.simulate_get('/admin/spark/jobs').status_code == 401


def test_without_pyspark_a_submission_is_refused_naming_the_extra(runtime_factory, tmp_path, monkeypatch, recorder):
    rt = _runtime(runtime_factory, recorder, tmp_path, None)
    rt.spark.submitter = SparkSubmitter()  # the real one, looking for the pyspark package
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *args: None if name == 'pyspark' else find_spec(name, *args))
    message = "Spark support is not installed: pip install 'conduit[spark]'"
    with pytest.raises(SparkUnavailable, match=re.escape(message)):
        rt.spark.submit('traffic_analytics')
    with pytest.raises(SparkUnavailable, match=re.escape(message)):
        rt.invoke('sj.report')
    client = falcon.testing.TestClient(rt.make_app())
    auth = {'Authorization': 'Basic ' + base64.b64encode(b'admin:test-admin-password').decode()}
    r = client.simulate_post('/admin/spark/jobs', json={'pipeline': 'traffic_analytics'}, headers=auth)
    assert r.status_code == 503 and message in r.json['details'], r.text
    assert rt.spark_admin.list() == []  # refused before anything was recorded
    assert client.simulate_get('/admin/spark/pipelines', headers=auth).status_code == 200


def test_history_keeps_the_newest_finished_jobs_and_removes_their_files(runtime_factory, tmp_path, recorder):
    rt = _runtime(runtime_factory, recorder, tmp_path, None)
    rt.spark.settings.history_max_jobs = 2
    jobs = [rt.spark.submit('traffic_analytics') for _ in range(4)]
    for job_id in jobs:
        rt.spark.wait(job_id, TIMEOUT)
        log = Path(rt.spark_admin.get(job_id, log_lines=0)['log_path'])
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text('driver output\n')
    rt.spark.sweep()
    assert [j['job_id'] for j in rt.spark_admin.list()] == jobs[:1:-1]
    jobs_dir = Path(rt.spark_admin.get(jobs[3], log_lines=0)['log_path']).parent.parent
    assert sorted(p.name for p in jobs_dir.iterdir()) == sorted(jobs[2:])
    assert rt.spark_admin.get(jobs[3], log_lines=1)['log_tail'] == ['driver output']


def test_a_sweeper_killed_inside_a_database_call_stops_quietly(
        runtime_factory, tmp_path, caplog, monkeypatch, recorder):
    # A kill lands in the sweep's database call, and the library's cleanup raises its own error in
    # place of the GreenletExit (as SQLAlchemy does on PostgreSQL): the sweeper must end, not log a
    # traceback and carry on.
    import gevent

    rt = _runtime(runtime_factory, recorder, tmp_path, None)
    entered = []

    def sweep_in_a_database_call(now=None):  # type: ignore[no-untyped-def]
        entered.append(1)
        try:
            gevent.sleep(30)
        except gevent.GreenletExit as e:
            raise RuntimeError("can't change 'autocommit' now: connection in transaction status ACTIVE") from e
        return []

    monkeypatch.setattr(rt.spark, 'sweep', sweep_in_a_database_call)
    sweeper = gevent.spawn(rt.spark.sweep_forever)
    wait_until(lambda: entered, message='sweep entered')
    sweeper.kill(timeout=5)
    assert sweeper.dead
    assert not [r for r in caplog.records if r.levelno >= 30], [r.getMessage() for r in caplog.records]
