"""Spark pipelines for real: spark-submit from the installed pyspark package, no mocks.

- Traffic through the broker is archived; a SparkService runs the analytics pipeline on
  local[2]; spark.job.completed reaches a subscriber service, whose figures match the counts the
  handlers kept and the latency percentiles of the archived records — while the hub stays free.
- The same pipeline on a standalone cluster on loopback (master and worker started here with the
  package's spark-class) gives the same figures.
- A pipeline that raises ends as failed with its error in spark.job.failed; one that overruns its
  timeout is killed (with its whole process group) and recorded as killed.
- A real server keeps answering REST calls while a job runs; the admin API shows the job and its
  log, the CLI lists, shows and prints it, and the demo's subscriber reads the result.

Every Spark run costs 10-25 s of JVM start-up and planning on two cores, so there are four, on
SQLite only: the archive and the job tracking are database-agnostic, and test_spark_jobs.py runs
them on both backends.
"""

from __future__ import annotations

import glob
import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import gevent
import pytest

from runtime import Service
from runtime.spark import TOPIC_COMPLETED, TOPIC_FAILED, SparkService
from runtime.spark.submit import find_spark_submit
from runtime.testing import TestRuntime, make_settings, wait_until
from tests.live_server import poll
from tests.recorder import Recorder

REPO = Path(__file__).resolve().parents[2]

#: Short jobs start faster with these on a 2-core machine; and Spark stays on the loopback interface.
FAST_CONF = ('spark.ui.enabled=false; spark.driver.host=127.0.0.1; spark.driver.bindAddress=127.0.0.1; '
             'spark.sql.codegen.wholeStage=false; spark.sql.adaptive.enabled=false; '
             'spark.driver.extraJavaOptions=-XX:TieredStopAtLevel=1; spark.ui.showConsoleProgress=false')

#: Longest any one Spark job of this module may take.
SPARK_TIMEOUT = 240.0

TOPICS = ('orders.created', 'crm.customer.sync')

# The services below record on the recorder they are bound to: (topic, service) of every handled
# message on 'succeeded' and of every failed attempt on 'failed', and the events they read on
# 'reports' and 'failures'.


class TrafficOk(Service):
    name = 'traffic.ok'

    def handle(self):
        self.recorder.add('succeeded', (self.request.raw_request['topic_name'], self.name))


class TrafficFlaky(Service):
    """Fails the first attempt at every fourth message."""

    name = 'traffic.flaky'

    def handle(self):
        topic = self.request.raw_request['topic_name']
        if self.request.payload['n'] % 4 == 0 and self.request.raw_request['delivery_count'] == 1:
            self.recorder.add('failed', (topic, self.name))
            raise ValueError('first attempt fails')
        self.recorder.add('succeeded', (topic, self.name))


class TrafficPoison(Service):
    """Fails every attempt: each of its messages ends in the dead-letter queue."""

    name = 'traffic.poison'

    def handle(self):
        self.recorder.add('failed', (self.request.raw_request['topic_name'], self.name))
        raise RuntimeError('poison')


class TrafficReport(SparkService):
    name = 'traffic.report'
    pipeline = 'traffic_analytics'
    arguments = {'topic': list(TOPICS)}
    timeout = SPARK_TIMEOUT


class ReportReader(Service):
    """Subscriber of spark.job.completed: reads the analytics output the event points to."""

    name = 'traffic.report-reader'

    def handle(self):
        event = self.request.payload
        self.recorder.add('reports', {**event, 'rows': _rows(event['output_location'], 'by_subscriber'),
                        'topics': _rows(event['output_location'], 'by_topic')})


class FailureReader(Service):
    name = 'traffic.failure-reader'

    def handle(self):
        self.recorder.add('failures', self.request.payload)


def _rows(output: str, name: str) -> list[dict]:
    return [json.loads(line) for path in sorted(glob.glob(f'{output}/{name}/*.json'))
            for line in Path(path).read_text(encoding='utf-8').splitlines() if line.strip()]


def _percentile(values: list[float], p: float) -> float:
    """What percentile_approx gives on a small group: the smallest value with at least p of all at or below it."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p * len(ordered)) - 1)]


def _settings(base: Path, pipelines: Path = REPO / 'spark_pipeline'):
    settings = make_settings(base)
    settings.spark.pipelines_dir = str(pipelines)
    settings.spark.master = 'local[2]'
    settings.spark.conf = FAST_CONF
    settings.spark.kill_grace_secs = 3.0
    settings.pubsub.wait_non_sock_err = 0.01
    settings.pubsub.max_wait_secs = 0.05
    settings.pubsub.err_should_block = False
    settings.pubsub.lease_renew_secs = 0.1
    return settings


@pytest.fixture(scope='module')
def traffic(tmp_path_factory):
    """A runtime after real traffic, the figures the analytics must find (per topic and subscriber), its recorder."""
    base = tmp_path_factory.mktemp('traffic')
    recorder = Recorder()  # the module's tests share this runtime, and so what its services recorded
    rt = TestRuntime(_settings(base))
    rt.start(watch=False)
    try:
        rt.deploy(*recorder.bind_all((TrafficOk, TrafficFlaky, TrafficPoison, TrafficReport, ReportReader)))
        for topic in TOPICS:
            rt.catalog.create_topic(topic)
        subs = [rt.catalog.subscribe('orders.created', service='traffic.ok'),
                rt.catalog.subscribe('orders.created', service='traffic.flaky'),
                rt.catalog.subscribe('crm.customer.sync', service='traffic.ok')]
        poison = rt.catalog.subscribe('crm.customer.sync', service='traffic.poison', options={'max_attempts': 2})
        rt.catalog.subscribe(TOPIC_COMPLETED, service='traffic.report-reader')
        for n in range(40):
            rt.broker.publish('orders.created', {'n': n})
        for n in range(10):
            rt.broker.publish('crm.customer.sync', {'n': n})
        wait_until(lambda: all(rt.catalog.queue_depth(s.sub_key) == 0 for s in subs + [poison]), 30,
                   message='every queue drained')
        dead = len(rt.catalog.dead_letters(poison.sub_key))
        assert dead == 10
        rt.archive.flush()
        succeeded, failed = Counter(recorder['succeeded']), Counter(recorder['failed'])
        records = [json.loads(line) for path in (base / 'var' / 'archive').rglob('*.jsonl')
                   for line in path.read_text(encoding='utf-8').splitlines()]
        expected = {}
        for key in set(succeeded) | set(failed) | {('crm.customer.sync', 'traffic.poison')}:
            latencies = [r['latency_ms'] for r in records if (r['topic'], r['subscriber']) == key
                         and r['outcome'] == 'delivered']
            expected[key] = {'delivered': succeeded[key], 'failed_attempts': failed[key],
                             'dead_letters': dead if key[1] == 'traffic.poison' else 0,
                             'latency_p50_ms': _percentile(latencies, 0.5) if latencies else None,
                             'latency_p99_ms': _percentile(latencies, 0.99) if latencies else None,
                             'latency_max_ms': max(latencies) if latencies else None}
        assert expected[('orders.created', 'traffic.flaky')]['failed_attempts'] == 10
        assert expected[('crm.customer.sync', 'traffic.poison')]['failed_attempts'] == 20
        yield rt, expected, recorder
    finally:
        rt.stop()


def _check_figures(rows: list[dict], expected: dict) -> None:
    by_key = {(r['topic'], r['subscriber']): r for r in rows}
    assert set(by_key) == set(expected)
    for key, figures in expected.items():
        got = by_key[key]
        for name, value in figures.items():
            if value is None:
                assert got[name] is None, (key, name)
            elif isinstance(value, float):
                assert got[name] == pytest.approx(value, abs=0.002), (key, name, got)
            else:
                assert got[name] == value, (key, name, got)


def test_traffic_through_the_broker_is_analysed_on_local_spark(traffic):
    rt, expected, recorder = traffic
    lags: list[float] = []

    def ticker():
        while True:
            before = time.perf_counter()
            gevent.sleep(0.05)
            lags.append(time.perf_counter() - before - 0.05)

    watch = gevent.spawn(ticker)
    started = time.monotonic()
    answer = rt.invoke('traffic.report')
    assert time.monotonic() - started < 1.0, 'submitting waited for Spark'
    job_id = answer['job_id']
    wait_until(lambda: recorder['reports'], SPARK_TIMEOUT, interval=0.2, message='spark.job.completed delivered')
    watch.kill()

    event = recorder['reports'][0]
    job = rt.spark_admin.get(job_id)
    assert event['job_id'] == job_id and event['outcome'] == 'succeeded', (event, job['log_tail'])
    assert event['pipeline'] == 'traffic_analytics' and event['service'] == 'traffic.report'
    assert event['arguments'] == ['--topic', 'orders.created', '--topic', 'crm.customer.sync']
    assert job['master'] == 'local[2]' and job['exit_code'] == 0 and job['status'] == 'succeeded'
    assert event['output_location'] == job['output_location'] == str(rt.settings.path('var/spark/output')
                                                                     / 'traffic_analytics' / job_id)
    _check_figures(event['rows'], expected)
    topics = {r['topic']: r for r in event['topics']}
    assert topics['orders.created']['delivered'] == 80 and topics['orders.created']['subscribers'] == 2
    assert topics['crm.customer.sync']['dead_letters'] == 10
    assert event['result']['topics']['orders.created']['failed_attempts'] == 10
    assert any('conduit: pipeline traffic_analytics succeeded' in line for line in job['log_tail'])
    # The job ran for seconds in a subprocess; this process's hub never stalled meanwhile.
    assert len(lags) > 20 and max(lags) < 0.5, f'hub stalled up to {max(lags):.3f} s'


@pytest.fixture(scope='module')
def standalone_cluster(tmp_path_factory):
    """A Spark standalone master and one worker (2 cores) on loopback, started with spark-class."""
    base = tmp_path_factory.mktemp('cluster')
    spark_class = str(Path(find_spark_submit()).with_name('spark-class'))
    ports = [_free_port() for _ in range(3)]
    url = f'spark://127.0.0.1:{ports[0]}'
    env = {**os.environ, 'SPARK_LOCAL_IP': '127.0.0.1', 'SPARK_NO_DAEMONIZE': '1',
           'SPARK_MASTER_OPTS': '-XX:TieredStopAtLevel=1', 'SPARK_WORKER_OPTS': '-XX:TieredStopAtLevel=1'}
    commands = {
        'master': [spark_class, 'org.apache.spark.deploy.master.Master', '--host', '127.0.0.1',
                   '--port', str(ports[0]), '--webui-port', str(ports[1])],
        'worker': [spark_class, 'org.apache.spark.deploy.worker.Worker', '--host', '127.0.0.1',
                   '--webui-port', str(ports[2]), '--cores', '2', '--memory', '2g',
                   '--work-dir', str(base / 'work'), url],
    }
    procs = {}
    for name, cmd in commands.items():
        with open(base / f'{name}.log', 'wb') as log:
            procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True)
    try:
        poll(lambda: 'Registering worker' in (base / 'master.log').read_text(errors='replace'), 90, 0.2,
             message='the worker registered with the master')
        yield url, base / 'master.log'
    finally:
        for proc in procs.values():
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group is alive (zombies waiting for their reaper do not count)."""
    ps = subprocess.run(['ps', '-o', 'stat=', '-g', str(pgid)], capture_output=True, text=True)
    return any(not stat.startswith('Z') for stat in ps.stdout.split())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def test_the_same_pipeline_on_a_standalone_cluster_gives_the_same_figures(traffic, standalone_cluster):
    rt, expected, _ = traffic
    url, master_log = standalone_cluster
    job_id = rt.spark.submit('traffic_analytics', {'topic': list(TOPICS)}, master=url,
                             conf={'spark.executor.memory': '1g', 'spark.cores.max': 2,
                                   'spark.executor.extraJavaOptions': '-XX:TieredStopAtLevel=1'},
                             timeout=SPARK_TIMEOUT)
    job = rt.spark.wait(job_id, SPARK_TIMEOUT)
    assert job['status'] == 'succeeded', rt.spark_admin.log(job_id, 80)
    assert job['master'] == url
    _check_figures(_rows(job['output_location'], 'by_subscriber'), expected)
    # It really ran on the cluster: the master registered the application and gave it an executor.
    log = master_log.read_text(errors='replace')
    assert f'Registering app conduit:traffic_analytics:{job_id}' in log
    assert 'Launching executor' in log


def test_a_failing_pipeline_and_a_timed_out_one(runtime_factory, tmp_path, recorder):
    pipelines = tmp_path / 'pipelines'
    pipelines.mkdir()
    (pipelines / 'invoice_check.py').write_text(
        'from pyspark.sql import SparkSession\n\n\n'
        'def main(args):\n'
        '    spark = SparkSession.builder.getOrCreate()\n'
        '    rows = spark.range(3).count()\n'
        "    raise ValueError(f'invoice batch {args[0]} is malformed ({rows} rows read)')\n")
    (pipelines / 'endless.py').write_text('import time\n\n\ndef main(args):\n    time.sleep(600)\n')
    (tmp_path / 'rt').mkdir()
    rt = runtime_factory(recorder.bind(FailureReader), settings=_settings(tmp_path / 'rt', pipelines))
    rt.catalog.subscribe(TOPIC_FAILED, service='traffic.failure-reader')
    bad = rt.spark.submit('invoice_check', ['42'], timeout=SPARK_TIMEOUT)
    endless = rt.spark.submit('endless', timeout=8)
    wait_until(lambda: rt.spark_admin.get(endless, log_lines=0)['pid'], 30, message='endless started')
    pid = rt.spark_admin.get(endless, log_lines=0)['pid']

    job = rt.spark.wait(endless, 60)
    assert job['status'] == 'killed' and job['error'] == 'killed: timed out after 8 s (timeout)', job
    poll(lambda: not _group_alive(pid), 10, message="spark-submit's whole process group gone")
    job = rt.spark.wait(bad, SPARK_TIMEOUT)
    assert job['status'] == 'failed' and job['exit_code'] == 1, rt.spark_admin.log(bad, 60)
    assert job['error'] == 'ValueError: invoice batch 42 is malformed (3 rows read)'
    assert any('Traceback' in line for line in rt.spark_admin.log(bad, 400))

    wait_until(lambda: recorder.count('failures') == 2, 30, message='two spark.job.failed events')
    events = {e['job_id']: e for e in recorder['failures']}
    assert events[bad]['outcome'] == 'failed' and events[bad]['pipeline'] == 'invoice_check'
    assert events[bad]['error'] == 'ValueError: invoice batch 42 is malformed (3 rows read)'
    assert events[bad]['arguments'] == ['42']
    assert events[endless]['outcome'] == 'killed' and 'timed out' in events[endless]['error']


INVOICES = [('IT', 'Dell', 1200.50), ('IT', 'Dell', 99.99), ('IT', 'Lyreco', 15.25), ('HR', 'Staples', 40.00),
            ('HR', 'Staples', 12.10), ('Finance', 'AWS', 310.00), ('Finance', 'Dell', 5.05), ('IT', 'AWS', 77.70)]

PROCUREMENT_OBJECTS = '''
pubsub_topic:
  - name: invoice.received
pubsub_subscription:
  - name: book
    push_service: procurement.invoice.book
    topic_list: [invoice.received]
  - name: spend-read
    push_service: procurement.spend.read
    topic_list: [spark.job.completed]
'''


@pytest.mark.parametrize('db_backend', ['sqlite'])  # one Spark run is enough; tracking runs on both elsewhere
def test_server_answers_while_a_job_runs_and_admin_api_and_cli_show_it(server_factory, db_backend):
    server = server_factory(demo=True, extra_config=f'''
[spark]
master = "local[2]"
pipelines_dir = "{REPO / 'spark_pipeline'}"
conf = "{FAST_CONF}"
heartbeat_secs = 0.5
[archive]
flush_interval_secs = 0.1
[pubsub]
lease_renew_secs = 0.3
''')
    server.write_objects('procurement.yaml', PROCUREMENT_OBJECTS)
    server.start()
    for n, (department, supplier, amount) in enumerate(INVOICES):
        server.invoke('procurement.invoice.receive', {'invoice_id': f'INV-{n}', 'department': department,
                                                      'supplier': supplier, 'amount': amount})
    archive = server.base / 'var' / 'archive'

    def archived() -> int:
        return sum(1 for p in archive.rglob('*.jsonl') for line in p.read_text().splitlines()
                   if '"outcome":"delivered"' in line and '"topic":"invoice.received"' in line)
    poll(lambda: archived() == len(INVOICES), 15, message='every invoice archived')

    started = time.monotonic()
    r = server.request('POST', '/admin/spark/jobs', json={'pipeline': 'procurement_spend'}, auth=server.admin)
    assert r.status_code == 201, r.text
    assert time.monotonic() - started < 2.0
    job_id = r.json()['job_id']

    slowest, answered, status = 0.0, 0, 'submitted'
    deadline = time.monotonic() + SPARK_TIMEOUT
    while status in ('submitted', 'running') and time.monotonic() < deadline:
        before = time.monotonic()
        assert server.request('GET', '/health').status_code == 200
        assert server.invoke('conduit.ping')['pong'] is True
        status = server.request('GET', f'/admin/spark/jobs/{job_id}?lines=0', auth=server.admin).json()['job']['status']
        slowest = max(slowest, time.monotonic() - before)
        answered += 1
        time.sleep(0.1)
    assert status == 'succeeded', server.request('GET', f'/admin/spark/jobs/{job_id}/log', auth=server.admin).text
    assert answered >= 20 and slowest < 1.0, f'{answered} rounds, slowest {slowest:.3f} s'

    job = server.request('GET', f'/admin/spark/jobs/{job_id}', params={'lines': 5}, auth=server.admin).json()['job']
    assert job['service'] == 'admin' and job['result']['invoices'] == len(INVOICES)
    assert any('conduit: pipeline procurement_spend succeeded' in line for line in job['log_tail'])

    expected: dict[str, float] = {}
    for department, _supplier, amount in INVOICES:
        expected[department] = round(expected.get(department, 0) + amount, 2)
    spend = poll(lambda: server.invoke('procurement.spend.get').get('job_id') == job_id
                 and server.invoke('procurement.spend.get'), 15, message='the demo reader got the result')
    assert {r['department']: r['total'] for r in spend['by_department']} == expected
    assert {(r['department'], r['supplier']): r['invoices'] for r in spend['by_department_supplier']} == dict(
        Counter((d, s) for d, s, _ in INVOICES))

    env = {**os.environ, 'CONDUIT_CONFIG': str(server.base / 'config' / 'server.toml')}

    def cli(*args: str) -> str:
        done = subprocess.run([sys.executable, '-m', 'runtime.cli', 'spark', *args], cwd=server.base, env=env,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout
    listed = cli('list')
    assert job_id in listed and 'procurement_spend' in listed and 'succeeded' in listed
    shown = cli('show', job_id, '--lines', '3')
    assert job['output_location'] in shown and '--- last 3 line(s)' in shown
    assert 'conduit: pipeline procurement_spend succeeded' in cli('log', job_id, '--lines', '3')
    assert 'already ended: succeeded' in cli('kill', job_id)
    assert 'traffic_analytics' in cli('pipelines')
