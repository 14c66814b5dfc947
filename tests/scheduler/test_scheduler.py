"""The scheduler in-process: fire times, claims, outcomes and the scheduler section, on both backends.

Most tests turn the scheduler loop off and drive ``Scheduler.tick(now=...)`` with chosen times,
so they are exact and fast; one lets the real loop run for a few seconds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import gevent
import pytest
from sqlalchemy import select, update

from runtime import Service
from runtime.config import SchedulerSection
from runtime.db.models import Job, JobRun
from runtime.errors import ConfigError, InvalidJob, JobExists, ObjectNotFound
from runtime.objects.applier import ObjectsApplier
from runtime.scheduler.jobs import JobDefinition, first_fire, make_trigger, next_fire_after, plan_firing
from runtime.scheduler.objects import section_handler
from runtime.testing import make_settings, wait_until
from tests.recorder import Recorder

REPO = Path(__file__).resolve().parents[2]

# The services below record every invocation, (service name, payload, raw_request), on 'calls' of
# the recorder make_rt binds them to.


class Record(Service):
    """Records its invocation; sleeps payload['sleep'] seconds if asked."""

    name = 'test.record'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('calls', (self.name, self.request.payload, self.request.raw_request))
        if isinstance(self.request.payload, dict) and self.request.payload.get('sleep'):
            gevent.sleep(self.request.payload['sleep'])
        self.response.payload = {'done': True}


class Fail(Service):
    """Always raises."""

    name = 'test.fail'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('calls', (self.name, self.request.payload, self.request.raw_request))
        raise RuntimeError('ledger unavailable')


class OnError(Service):
    """An on_error / on_success callback: records what it was told."""

    name = 'test.callback'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('calls', (self.name, self.request.payload, None))


SERVICES = (Record, Fail, OnError)
T0 = datetime(2030, 1, 7, 9, 0, tzinfo=UTC).timestamp()  # a Monday, in the future, so nothing fires by itself


@pytest.fixture
def make_rt(runtime_factory, tmp_path, db_url, recorder):  # type: ignore[no-untyped-def]
    """Runtimes on the test database; the scheduler loop is off unless enabled=True."""
    made = []

    def make(enabled: bool = False, **scheduler: Any):  # type: ignore[no-untyped-def]
        base = tmp_path / f'base{len(made)}'
        base.mkdir()
        settings = make_settings(base, db_url)
        settings.scheduler.enabled = enabled
        settings.scheduler.poll_interval_secs = 0.05
        for key, value in scheduler.items():
            setattr(settings.scheduler, key, value)
        rt = runtime_factory(*recorder.bind_all(SERVICES), settings=settings)
        made.append(rt)
        return rt
    return make


def calls(recorder: Recorder, name: str = 'test.record') -> list[tuple[str, Any, Any]]:
    """Invocations of one service."""
    return [c for c in recorder['calls'] if c[0] == name]


def job(**values: Any) -> dict[str, Any]:
    """An interval job every 10 s from T0 unless values say otherwise."""
    return {'name': 'j', 'service': 'test.record', 'job_type': 'interval_based', 'seconds': 10,
            'start_date': datetime.fromtimestamp(T0, UTC).isoformat(), **values}


def tick(rt, now: float) -> None:  # type: ignore[no-untyped-def]
    """One scheduler tick at a chosen time, then wait for the runs it started."""
    rt.scheduler.tick(now=now)
    assert rt.scheduler.join(10)


def utc(text: str) -> float:
    """An ISO time (UTC unless it has an offset) as epoch seconds."""
    dt = datetime.fromisoformat(text)
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


# Fire times (pure)


@pytest.mark.parametrize('line, tz, now, expected', [
    # Weekdays at 09:00 in Warsaw: CEST (+02:00) in June, CET (+01:00) in January; now is a Saturday.
    ('0 9 * * 1-5', 'Europe/Warsaw', '2025-06-14T12:00', '2025-06-16T07:00'),
    ('0 9 * * 1-5', 'Europe/Warsaw', '2025-01-11T12:00', '2025-01-13T08:00'),
    # Across the spring DST change: noon on 30 March 2025 in Warsaw is already +02:00.
    ('0 12 * * *', 'Europe/Warsaw', '2025-03-29T12:00', '2025-03-30T10:00'),
    ('30 2 * * *', 'America/New_York', '2025-01-10T12:00', '2025-01-11T07:30'),
    ('*/15 * * * *', 'UTC', '2025-01-10T12:07:30', '2025-01-10T12:15'),
    ('@daily', 'Asia/Tokyo', '2025-01-10T16:00', '2025-01-11T15:00'),
    # Crontab numbering: 0 and 7 are Sunday (APScheduler 3 alone would take 0 for Monday).
    ('0 0 * * 0', 'UTC', '2025-06-10T12:00', '2025-06-15T00:00'),
    ('0 0 * * 7', 'UTC', '2025-06-10T12:00', '2025-06-15T00:00'),
    ('0 0 * * */2', 'UTC', '2025-06-10T12:00', '2025-06-12T00:00'),  # Sun, Tue, Thu, Sat
    ('0 0 * * sun-tue', 'UTC', '2025-06-12T12:00', '2025-06-15T00:00'),
    # Day-of-month and day-of-week both restricted: either fires (the 10th, or a Monday), as in cron.
    ('0 0 10 * 1', 'UTC', '2025-06-03T00:00', '2025-06-09T00:00'),
    ('0 0 10 * 1', 'UTC', '2025-06-09T01:00', '2025-06-10T00:00'),
])
def test_cron_job_computes_next_run_in_its_timezone(line, tz, now, expected):
    definition = JobDefinition.from_dict({'name': 'c', 'service': 's', 'job_type': 'cron_style',
                                          'cron_definition': line, 'timezone': tz})
    assert first_fire(definition, 0, utc(now)) == utc(expected)
    # The firing after that one comes strictly later.
    assert next_fire_after(make_trigger(definition, 0), utc(expected)) > utc(expected)


def test_start_date_without_offset_is_in_the_job_timezone():
    definition = JobDefinition.from_dict({'name': 'o', 'service': 's', 'job_type': 'one_time',
                                          'start_date': '2030-07-01 09:00:00', 'timezone': 'Europe/Warsaw'})
    assert definition.start_date == utc('2030-07-01T07:00')
    assert definition.to_dict()['start_date'] == '2030-07-01T09:00:00+02:00'


@pytest.mark.parametrize('values, field, words', [
    ({'job_type': 'hourly'}, 'job_type', 'must be one of one_time, interval_based, cron_style'),
    ({'seconds': 0}, 'seconds', 'must be above 0'),
    ({'seconds': 'ten'}, 'seconds', "not 'ten'"),
    ({'seconds': -1}, 'seconds', 'must be a number >= 0'),
    ({'repeats': 1.5}, 'repeats', 'whole number'),
    ({'job_type': 'cron_style', 'cron_definition': '61 * * * *'}, 'cron_definition', 'is not a valid crontab line'),
    ({'job_type': 'cron_style', 'cron_definition': '0 0 * *'}, 'cron_definition', 'expected 5 fields'),
    ({'job_type': 'cron_style'}, 'cron_definition', 'is required'),
    ({'job_type': 'one_time', 'start_date': None}, 'start_date', 'is required for a one_time job'),
    ({'start_date': 'tomorrow'}, 'start_date', 'ISO 8601'),
    ({'timezone': 'Mars/Olympus'}, 'timezone', 'not a known IANA time zone'),
    ({'service': ''}, 'service', 'is required'),
    ({'is_active': 'yes'}, 'is_active', 'true or false'),
    ({'sekonds': 5}, 'sekonds', 'is not a job attribute'),
    ({'extra': {1, 2}}, 'extra', 'must be JSON data'),
])
def test_invalid_definition_names_job_and_field(values, field, words):
    with pytest.raises(InvalidJob) as e:
        JobDefinition.from_dict(job(name='payroll', **values))
    assert (e.value.job, e.value.field) == ('payroll', field)
    assert words in str(e.value) and "job 'payroll'" in str(e.value)


def test_missed_firings_are_coalesced_unless_catch_up():
    definition = JobDefinition.from_dict(job())
    # Down from T0 to T0 + 35 s: firings at T0, +10, +20, +30 are due; only +30 runs (within the grace).
    plan = plan_firing(definition, 0, T0, T0 + 35, grace_secs=30)
    assert (plan.run, plan.missed, plan.missed_count, plan.next_run_time) == (T0 + 30, (T0, T0 + 20), 3, T0 + 40)
    # Even the latest missed firing is later than the grace: nothing runs, the next one still to come is next.
    plan = plan_firing(definition, 0, T0, T0 + 95, grace_secs=3)
    assert (plan.run, plan.missed_count, plan.next_run_time) == (None, 10, T0 + 100)
    # Down for a very long time: the scan stops, the job resumes on its grid.
    plan = plan_firing(definition, 0, T0, T0 + 10 * 86400 + 5, grace_secs=30)
    assert plan.run is None and plan.missed_capped and plan.next_run_time == T0 + 10 * 86400 + 10
    # catch_up: each missed firing runs, one after the other.
    plan = plan_firing(JobDefinition.from_dict(job(catch_up=True)), 0, T0, T0 + 95, grace_secs=30)
    assert (plan.run, plan.missed, plan.next_run_time) == (T0, None, T0 + 10)


# Firing through the database (both backends)


def test_interval_job_fires_the_expected_number_of_times(make_rt, recorder):
    rt = make_rt(enabled=True)
    rt.job_admin.create({'name': 'often', 'service': 'test.record', 'job_type': 'interval_based', 'seconds': 0.5})
    gevent.sleep(3.2)  # firings at +0.5 ... +3.0: six
    assert 4 <= len(calls(recorder)) <= 7, f'{len(calls(recorder))} runs in 3.2 s of a 0.5 s interval job'
    assert {c[2]['kind'] for c in calls(recorder)} == {'schedule'}
    assert len({c[2]['fire_time'] for c in calls(recorder)}) == len(calls(recorder))


def test_repeats_stop_an_interval_job(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(repeats=3, extra={'n': 1}))
    for k in range(6):
        tick(rt, T0 + 10 * k)
    assert [c[1] for c in calls(recorder)] == [{'n': 1}] * 3
    state = rt.job_admin.get('j')
    assert (state['run_count'], state['next_run_time']) == (3, None)


def test_editing_the_schedule_keeps_the_run_count_and_history(make_rt):
    rt = make_rt()
    rt.job_admin.create(job(repeats=4))
    for k in range(2):
        tick(rt, T0 + 10 * k)
    assert rt.job_admin.get('j')['run_count'] == 2
    edited = rt.job_admin.update('j', {'seconds': 20})
    assert edited['run_count'] == 2
    assert len(rt.job_admin.runs('j')) == 2
    # repeats counts every run so far: two more, then the job is done.
    for k in range(6):
        tick(rt, T0 + 100 + 20 * k)
    state = rt.job_admin.get('j')
    assert (state['run_count'], state['next_run_time']) == (4, None)


def test_one_time_job_fires_once(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(job_type='one_time'))
    tick(rt, T0 - 1)
    assert calls(recorder) == []
    for k in range(3):
        tick(rt, T0 + k)
    assert len(calls(recorder)) == 1
    assert rt.job_admin.get('j')['next_run_time'] is None


def test_one_time_job_runs_however_late(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(job_type='one_time'))
    tick(rt, T0 + 3600)  # the server was down at its time
    assert len(calls(recorder)) == 1


def test_two_schedulers_claim_each_firing_once(make_rt, recorder):
    """Two runtimes on one database, eight concurrent ticks each per firing: one run per firing."""
    a, b = make_rt(), make_rt()
    a.job_admin.create(job(seconds=1))
    for k in range(5):
        now = T0 + k
        gevent.joinall([gevent.spawn(rt.scheduler.tick, now) for _ in range(8) for rt in (a, b)], raise_error=True)
        assert a.scheduler.join(10) and b.scheduler.join(10)
    fire_times = [c[2]['fire_time'] for c in calls(recorder)]
    assert len(fire_times) == 5 and len(set(fire_times)) == 5
    with a.engine.connect() as conn:
        outcomes = conn.execute(select(JobRun.outcome, JobRun.owner)).all()
    assert [o for o, _ in outcomes] == ['ok'] * 5


def test_failing_service_records_the_error_and_calls_on_error(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(service='test.fail', on_error='test.callback', on_success='test.record',
                            extra={'period': '2030-01'}))
    tick(rt, T0)
    [run] = rt.job_admin.runs('j')
    assert run['outcome'] == 'error' and run['error'] == 'RuntimeError: ledger unavailable'
    assert run['started_at'] and run['ended_at']
    [(_, told, _)] = calls(recorder, 'test.callback')
    assert (told['job_name'], told['outcome'], told['error'], told['run_id']) == \
        ('j', 'error', 'RuntimeError: ledger unavailable', run['id'])
    assert calls(recorder, 'test.record') == []  # on_success is not called


def test_success_calls_on_success(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(on_success='test.callback', on_error='test.fail'))
    tick(rt, T0)
    [(_, told, _)] = calls(recorder, 'test.callback')
    assert (told['outcome'], told['response']) == ('ok', {'done': True})


def test_overrun_is_recorded_as_timeout(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(extra={'sleep': 5}, max_execution_time=0.3, on_error='test.callback'))
    started = time.monotonic()
    tick(rt, T0)
    assert time.monotonic() - started < 3
    [run] = rt.job_admin.runs('j')
    assert run['outcome'] == 'timeout' and 'did not finish within 0.3 s' in run['error']
    assert calls(recorder, 'test.callback')[0][1]['outcome'] == 'timeout'


def test_skip_if_running_skips_a_firing_while_the_last_run_goes_on(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(extra={'sleep': 1.0}, skip_if_running=True, repeats=2))
    rt.scheduler.tick(now=T0)
    gevent.sleep(0.1)
    rt.scheduler.tick(now=T0 + 10)  # the first run is still sleeping
    assert rt.scheduler.join(10)
    runs = rt.job_admin.runs('j')
    assert [r['outcome'] for r in runs] == ['skipped', 'ok']
    assert 'still running' in runs[0]['error']
    assert rt.job_admin.get('j')['run_count'] == 1  # a skipped firing does not count towards repeats
    tick(rt, T0 + 20)
    assert len(calls(recorder)) == 2 and rt.job_admin.get('j')['next_run_time'] is None


def test_restart_continues_without_a_burst(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job())
    tick(rt, T0)
    tick(rt, T0 + 10)
    rt.stop()
    # A new runtime (a restart) on the same database, 45 s later: one run, the missed ones skipped.
    rt2 = make_rt(misfire_grace_secs=30)
    tick(rt2, T0 + 55)
    assert len(calls(recorder)) == 3
    runs = rt2.job_admin.runs('j')
    assert [r['outcome'] for r in runs] == ['ok', 'skipped', 'ok', 'ok']
    assert runs[1]['error'].startswith('3 firing(s) missed')
    assert rt2.job_admin.get('j')['next_run_time'] == datetime.fromtimestamp(T0 + 60, UTC).isoformat(
        timespec='milliseconds')


def test_catch_up_runs_each_missed_firing(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job(catch_up=True))
    for _ in range(5):
        tick(rt, T0 + 35)
    assert len(calls(recorder)) == 4  # T0, +10, +20, +30


def test_pause_resume_edit_and_run_now(make_rt, recorder):
    rt = make_rt()
    rt.job_admin.create(job())
    rt.job_admin.set_active('j', False)
    tick(rt, T0)
    assert calls(recorder) == [] and rt.job_admin.get('j')['next_run_time'] is None
    run_id, greenlet = rt.scheduler.run_now('j')  # works on a paused job
    greenlet.join(5)
    assert rt.job_admin.run(run_id)['kind'] == 'manual' and rt.job_admin.run(run_id)['outcome'] == 'ok'
    resumed = rt.job_admin.set_active('j', True)
    assert resumed['is_active'] and resumed['next_run_time'] is not None
    edited = rt.job_admin.update('j', {'extra': {'v': 2}})
    assert edited['next_run_time'] == resumed['next_run_time']  # not a schedule change
    rt.job_admin.update('j', {'name': 'k'})
    with pytest.raises(ObjectNotFound):
        rt.job_admin.get('j')
    with pytest.raises(JobExists):
        rt.job_admin.create(job(name='k'))
    with pytest.raises(InvalidJob, match="names service 'no.such.service'"):
        rt.job_admin.update('k', {'on_error': 'no.such.service'})
    rt.job_admin.delete('k')
    assert rt.job_admin.list() == []


def test_lost_runs_are_recorded_and_history_is_trimmed(make_rt):
    rt = make_rt(history_per_job=3, stale_run_secs=5)
    rt.job_admin.create(job())
    for k in range(5):
        tick(rt, T0 + 10 * k)
    with rt.engine.begin() as conn:  # a run whose worker died: still 'running', no heartbeat for a minute
        conn.execute(update(JobRun).where(JobRun.id == 5).values(outcome='running', heartbeat_at=time.time() - 60))
    rt.scheduler.sweep()
    runs = rt.job_admin.runs('j')
    assert [r['id'] for r in runs] == [5, 4, 3]
    assert runs[0]['outcome'] == 'error' and runs[0]['error'].startswith('lost')


# The scheduler section of the object files


def _apply(rt, tmp_path: Path, text: str) -> ObjectsApplier:  # type: ignore[no-untyped-def]
    d = tmp_path / 'objects'
    d.mkdir(exist_ok=True)
    (d / 'jobs.yaml').write_text(text)
    applier = ObjectsApplier(rt.engine, [d])
    applier.add_handler(section_handler(SchedulerSection(timezone='Europe/Warsaw')))
    applier.apply()
    return applier


ZATO_JOBS = '''
scheduler:
  - name: payroll.nightly
    cluster_id: 1
    service: test.record
    job_type: cron_style
    cron_definition: "0 2 * * *"
    extra: '{"period": "yesterday"}'
    is_active: true
  - name: ping.every.minute
    service: test.record
    job_type: interval_based
    start_date: 2030-01-07 10:00:00
    minutes: 1
    repeats: ''
    is_active: false
'''


def test_scheduler_section_loads_zato_keys_and_is_idempotent(make_rt, tmp_path):
    rt = make_rt()
    _apply(rt, tmp_path, ZATO_JOBS)
    jobs = {j['name']: j for j in rt.job_admin.list()}
    nightly, ping = jobs['payroll.nightly'], jobs['ping.every.minute']
    assert (nightly['timezone'], nightly['extra'], nightly['origin']) == ('Europe/Warsaw', '{"period": "yesterday"}',
                                                                           'config')
    assert nightly['next_run_time'].endswith(':00:00.000+00:00')
    assert (ping['is_active'], ping['start_date'], ping['repeats']) == (False, '2030-01-07T10:00:00+01:00', None)
    # Re-applying an unchanged definition (e.g. another file changed) leaves the schedule alone.
    with rt.engine.begin() as conn:
        conn.execute(update(Job).where(Job.name == 'payroll.nightly').values(run_count=7))
    _apply(rt, tmp_path, ZATO_JOBS + '\n# a comment changes the hash\n')
    assert rt.job_admin.get('payroll.nightly')['run_count'] == 7
    # A job the files no longer declare is removed; one made through the API stays.
    rt.job_admin.create(job(name='api.job'))
    _apply(rt, tmp_path, ZATO_JOBS.split('  - name: ping.every.minute')[0])
    assert sorted(j['name'] for j in rt.job_admin.list()) == ['api.job', 'payroll.nightly']


def test_scheduler_section_errors_name_file_job_and_field(make_rt, tmp_path):
    rt = make_rt()
    with pytest.raises(ConfigError) as e:
        _apply(rt, tmp_path, 'scheduler:\n  - {name: bad.job, service: s, job_type: interval_based, hours: many}\n')
    assert "jobs.yaml [scheduler] 'bad.job'" in str(e.value) and "'hours' must be a number" in str(e.value)
    assert rt.job_admin.list() == []


def test_demo_payroll_job_is_declared_and_runs(make_rt, tmp_path):
    rt = make_rt()
    rt.deploy(REPO / 'services' / 'demo' / 'demo_payroll.py')
    applier = ObjectsApplier(rt.engine, [REPO / 'config' / 'demo'])
    applier.add_handler(section_handler(SchedulerSection()))
    applier.apply()
    demo = rt.job_admin.get('demo.payroll.reconcile')
    assert demo['service'] == 'payroll.reconcile' and demo['is_active']
    run_id, greenlet = rt.scheduler.run_now('demo.payroll.reconcile')
    greenlet.join(5)
    assert rt.job_admin.run(run_id)['outcome'] == 'ok'
    result = rt.invoke('payroll.reconcile', {'tolerance': 0.01})
    assert [m['employee'] for m in result['mismatches']] == ['E-1003', 'E-1004', 'E-1005']


def test_wait_until_scheduler_loop_picks_up_changes(make_rt, recorder):
    """A job created while the loop sleeps fires without waiting for a poll (the change wakes it)."""
    rt = make_rt(enabled=True, poll_interval_secs=5.0)
    gevent.sleep(0.1)
    rt.job_admin.create({'name': 'soon', 'service': 'test.record', 'job_type': 'one_time',
                         'start_date': datetime.fromtimestamp(time.time() + 0.3, UTC).isoformat()})
    wait_until(lambda: calls(recorder), timeout=2, message='the one-time job ran')
