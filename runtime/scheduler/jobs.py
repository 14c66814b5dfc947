"""Scheduled jobs: their definitions, the validation of them, and when they fire.

A job is one of Zato's three types. ``one_time`` runs once at ``start_date``. ``interval_based``
runs every weeks/days/hours/minutes/seconds from ``start_date`` (default: one interval after the
job was created), at most ``repeats`` times. ``cron_style`` runs at the times of a crontab line in
a time zone. Next fire times come from APScheduler 3's triggers.

A crontab line means what it means to cron, not what APScheduler 3 makes of it: in day-of-week,
0 and 7 are Sunday (APScheduler 3 takes 0 for Monday), and when both day-of-month and day-of-week
are restricted a day matching either fires (APScheduler would need both).

Everything here is pure: no database, and no clock of its own (``now`` is always passed in).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from datetime import UTC, date, datetime, tzinfo
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.base import BaseTrigger
from apscheduler.triggers.combining import OrTrigger
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from runtime.errors import InvalidJob

ONE_TIME = 'one_time'
INTERVAL_BASED = 'interval_based'
CRON_STYLE = 'cron_style'
JOB_TYPES = (ONE_TIME, INTERVAL_BASED, CRON_STYLE)

INTERVAL_FIELDS = ('weeks', 'days', 'hours', 'minutes', 'seconds')
_INTERVAL_SECS = {'weeks': 604800, 'days': 86400, 'hours': 3600, 'minutes': 60, 'seconds': 1}

#: Fields whose change restarts a job's schedule (and its count of repeats).
SCHEDULE_FIELDS = ('job_type', 'start_date', *INTERVAL_FIELDS, 'repeats', 'cron_definition', 'timezone')

#: Keys that Zato's files carry and that mean nothing here.
IGNORED_KEYS = frozenset({'id', 'cluster_id'})

#: Most missed firings looked at one by one when a job fell behind; past it, they are skipped as a block.
MAX_MISSED_SCAN = 500

_CRON_MACROS = {'@yearly': '0 0 1 1 *', '@annually': '0 0 1 1 *', '@monthly': '0 0 1 * *',
                '@weekly': '0 0 * * 0', '@daily': '0 0 * * *', '@midnight': '0 0 * * *', '@hourly': '0 * * * *'}
_DOW_NAMES = ('sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat')


@dataclass(frozen=True)
class JobDefinition:
    """What a job is, as configured; validated by from_dict."""

    name: str
    service: str
    job_type: str
    #: Epoch seconds, or None.
    start_date: float | None = None
    weeks: float = 0.0
    days: float = 0.0
    hours: float = 0.0
    minutes: float = 0.0
    seconds: float = 0.0
    repeats: int | None = None
    cron_definition: str = ''
    timezone: str = 'UTC'
    extra: Any = None
    is_active: bool = True
    jitter: float = 0.0
    #: Seconds; None means no limit.
    max_execution_time: float | None = None
    on_success: str = ''
    on_error: str = ''
    skip_if_running: bool = False
    catch_up: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any], default_timezone: str = 'UTC') -> JobDefinition:
        """Validate a definition in the keys of the object files and the admin API."""
        name = data.get('name')
        if not isinstance(name, str) or not name.strip() or name != name.strip() or len(name) > 200:
            raise InvalidJob(str(name), 'name', 'must be a non-empty string of at most 200 characters '
                                                'without whitespace at either end')
        if '/' in name or any(ord(c) < 32 for c in name):
            raise InvalidJob(name, 'name', 'must not contain "/" or control characters')
        known = {f.name for f in dataclasses.fields(cls)}
        for key in data:
            if key not in known and key not in IGNORED_KEYS:
                raise InvalidJob(name, key, f'is not a job attribute (known: {", ".join(sorted(known))})')
        v = _Reader(name, data)
        job_type = data.get('job_type')
        if job_type not in JOB_TYPES:
            raise InvalidJob(name, 'job_type', f'must be one of {", ".join(JOB_TYPES)}, not {job_type!r}')
        timezone = v.text('timezone') or default_timezone
        tz = _timezone(name, timezone)
        values: dict[str, Any] = {
            'name': name, 'service': v.text('service', required=True), 'job_type': job_type,
            'start_date': _parse_start_date(name, data.get('start_date'), tz), 'timezone': timezone,
            'extra': v.json('extra'), 'is_active': v.flag('is_active', True), 'jitter': v.number('jitter'),
            'max_execution_time': v.number('max_execution_time') or None, 'on_success': v.text('on_success'),
            'on_error': v.text('on_error'), 'skip_if_running': v.flag('skip_if_running', False),
            'catch_up': v.flag('catch_up', False),
        }
        if job_type == ONE_TIME:
            if values['start_date'] is None:
                raise InvalidJob(name, 'start_date', 'is required for a one_time job')
        else:
            values['repeats'] = int(v.number('repeats', integer=True)) or None
        if job_type == INTERVAL_BASED:
            values.update({f: v.number(f) for f in INTERVAL_FIELDS})
            if not any(values[f] for f in INTERVAL_FIELDS):
                raise InvalidJob(name, 'seconds', 'or another of weeks, days, hours, minutes must be above 0 '
                                                  'for an interval_based job')
        if job_type == CRON_STYLE:
            line = v.text('cron_definition', required=True)
            values['cron_definition'] = line
            try:
                cron_trigger(line, tz, None)
            except ValueError as e:
                raise InvalidJob(name, 'cron_definition', f'{line!r} is not a valid crontab line: {e}') from None
        return cls(**values)

    def changed_schedule(self, other: JobDefinition) -> bool:
        """Whether other fires at different times than this one."""
        return any(getattr(self, f) != getattr(other, f) for f in SCHEDULE_FIELDS)

    @property
    def interval_secs(self) -> float:
        """Length of the interval of an interval_based job."""
        return sum(getattr(self, f) * _INTERVAL_SECS[f] for f in INTERVAL_FIELDS)

    def to_dict(self) -> dict[str, Any]:
        """The definition in the keys of the object files (start_date in the job's time zone)."""
        out: dict[str, Any] = {'name': self.name, 'service': self.service, 'job_type': self.job_type,
                               'is_active': self.is_active, 'start_date': None, 'timezone': self.timezone}
        if self.start_date is not None:
            out['start_date'] = datetime.fromtimestamp(self.start_date, _timezone(self.name, self.timezone)).isoformat()
        for f in INTERVAL_FIELDS:
            value = getattr(self, f)
            out[f] = int(value) if value == int(value) else value
        out.update(repeats=self.repeats, cron_definition=self.cron_definition, extra=self.extra,
                   jitter=self.jitter, max_execution_time=self.max_execution_time, on_success=self.on_success,
                   on_error=self.on_error, skip_if_running=self.skip_if_running, catch_up=self.catch_up)
        return out

    def describe(self) -> str:
        """The schedule in a few words, for tables."""
        if self.job_type == ONE_TIME:
            return f'once at {self.to_dict()["start_date"]}'
        if self.job_type == CRON_STYLE:
            text = f'cron {self.cron_definition} ({self.timezone})'
        else:
            parts = [f'{getattr(self, f):g}{f[0] if f != "minutes" else "min"}' for f in INTERVAL_FIELDS
                     if getattr(self, f)]
            text = 'every ' + ' '.join(parts)
        return text + (f', {self.repeats} times' if self.repeats else '')


class _Reader:
    """Reads typed values out of a definition, raising InvalidJob naming the field."""

    def __init__(self, name: str, data: dict[str, Any]) -> None:
        self.name = name
        self.data = data

    def text(self, key: str, required: bool = False) -> str:
        value = self.data.get(key)
        if value is None or value == '':
            if required:
                raise InvalidJob(self.name, key, 'is required')
            return ''
        if not isinstance(value, str) or len(value) > 200:
            raise InvalidJob(self.name, key, f'must be a string of at most 200 characters, not {value!r}')
        return value.strip()

    def number(self, key: str, integer: bool = False) -> float:
        value = self.data.get(key)
        if value is None or value == '':
            return 0.0
        what = 'a whole number' if integer else 'a number'
        if isinstance(value, str):  # Zato's files may quote numbers
            try:
                value = float(value)
            except ValueError:
                raise InvalidJob(self.name, key, f'must be {what} >= 0, not {value!r}') from None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0 \
                or (integer and value != int(value)):
            raise InvalidJob(self.name, key, f'must be {what} >= 0, not {value!r}')
        return float(value)

    def flag(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidJob(self.name, key, f'must be true or false, not {value!r}')
        return value

    def json(self, key: str) -> Any:
        value = self.data.get(key)
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            raise InvalidJob(self.name, key, 'must be JSON data (objects, lists, strings, numbers)') from None
        return value


def _timezone(job: str, name: str) -> tzinfo:
    if name == 'UTC':
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidJob(job, 'timezone', f'{name!r} is not a known IANA time zone (e.g. Europe/Warsaw)') from None


def _parse_start_date(job: str, value: Any, tz: tzinfo) -> float | None:
    if value is None or value == '':
        return None
    if isinstance(value, datetime):  # YAML reads unquoted timestamps as datetimes
        dt = value
    elif isinstance(value, date):
        dt = datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        try:
            dt = datetime.fromisoformat(value.strip())
        except ValueError:
            raise InvalidJob(job, 'start_date', f'must be an ISO 8601 date and time, e.g. 2025-01-31T09:00:00, '
                                                f'not {value!r}') from None
    else:
        raise InvalidJob(job, 'start_date', f'must be an ISO 8601 date and time, not {value!r}')
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=tz)  # a start date without an offset is in the job's time zone
    return dt.timestamp()


# Triggers


def _expand_dow(field: str) -> str:
    """A crontab day-of-week field as APScheduler 3 day names (crontab numbering: 0 and 7 are Sunday)."""
    if field in ('*', '?'):
        return '*'
    days: set[int] = set()
    for item in field.lower().split(','):
        spec, _, step_text = item.partition('/')
        step = int(step_text) if step_text.isdigit() and int(step_text) > 0 else None
        if step_text and step is None:
            raise ValueError(f'bad step in day-of-week {item!r}')
        if spec == '*':
            first, last = 0, 6
        else:
            lo, _, hi = spec.partition('-')
            first = _dow_number(lo)
            last = _dow_number(hi) if hi else (6 if step else first)
            if last < first:
                raise ValueError(f'day-of-week range {spec!r} runs backwards')
        days.update(d % 7 for d in range(first, last + 1, step or 1))
    return ','.join(_DOW_NAMES[d] for d in sorted(days))


def _dow_number(text: str) -> int:
    if text.isdigit() and 0 <= int(text) <= 7:
        return int(text)
    if text[:3] in _DOW_NAMES and len(text) == 3:
        return _DOW_NAMES.index(text)
    raise ValueError(f'bad day of week {text!r} (use 0-7 or sun-sat)')


def cron_trigger(line: str, tz: tzinfo, start: datetime | None) -> BaseTrigger:
    """The trigger of a crontab line (five fields, or a macro such as @daily) in a time zone."""
    line = _CRON_MACROS.get(line.strip().lower(), line)
    fields = line.split()
    if len(fields) != 5:
        raise ValueError(f'expected 5 fields (minute hour day month day-of-week), got {len(fields)}')
    minute, hour, day, month, dow = fields
    dow = _expand_dow(dow)

    def make(day: str, dow: str) -> CronTrigger:
        return CronTrigger(minute=minute, hour=hour, day=day, month=month, day_of_week=dow, timezone=tz,
                           start_date=start)

    if not day.startswith('*') and not fields[4].startswith('*'):
        # cron fires on a day that matches either field when both are restricted.
        return OrTrigger([make(day, '*'), make('*', dow)])
    return make(day, dow)


def make_trigger(job: JobDefinition, created_at: float) -> BaseTrigger:
    """The APScheduler trigger that computes the job's fire times."""
    tz = _timezone(job.name, job.timezone)
    start = datetime.fromtimestamp(job.start_date, tz) if job.start_date is not None else None
    if job.job_type == ONE_TIME:
        return DateTrigger(run_date=start, timezone=tz)
    if job.job_type == CRON_STYLE:
        return cron_trigger(job.cron_definition, tz, start)
    # A fixed anchor even without a start date, so that the grid survives restarts and edits.
    anchor = start or datetime.fromtimestamp(created_at + job.interval_secs, tz)
    return IntervalTrigger(seconds=job.interval_secs, start_date=anchor, timezone=tz)


def _dt(t: float) -> datetime:
    return datetime.fromtimestamp(t, UTC)


def next_fire_after(trigger: BaseTrigger, t: float) -> float | None:
    """The first fire time strictly after t, or None."""
    nxt = trigger.get_next_fire_time(_dt(t), _dt(t))
    return nxt.timestamp() if nxt is not None else None


def first_fire(job: JobDefinition, created_at: float, now: float, run_count: int = 0,
               last_fire: float | None = None) -> float | None:
    """When a job that is (re)started at now fires first; None if it is done."""
    if job.repeats and run_count >= job.repeats:
        return None
    if job.job_type == ONE_TIME:
        # A one-time job whose date passed while it was paused or before it was created runs at once.
        return None if last_fire is not None else max(job.start_date or now, now)
    nxt = make_trigger(job, created_at).get_next_fire_time(None, _dt(now))
    return nxt.timestamp() if nxt is not None else None


@dataclass(frozen=True)
class FiringPlan:
    """What to do about a job that is due: which firing runs, which are skipped, what comes next."""

    #: The fire time to run now, or None.
    run: float | None
    #: Firings skipped because they were missed (first, last) and how many; count 0 if none.
    missed: tuple[float, float] | None
    missed_count: int
    #: True when more firings were missed than MAX_MISSED_SCAN (missed_count is then a lower bound).
    missed_capped: bool
    #: The trigger's firing after this one; the claim applies repeats, as only runs count towards them.
    next_run_time: float | None
    last_fire: float


def plan_firing(job: JobDefinition, created_at: float, due: float, now: float, grace_secs: float) -> FiringPlan:
    """Decide about a job whose next firing (due) has come, at now.

    With catch_up (and for one-time jobs), the due firing runs, however late. Otherwise firings
    missed while no server ran (or the scheduler fell behind) are coalesced: only the latest of
    them runs, and only if it is at most grace_secs late; the others are skipped. A restart
    therefore never causes a burst of runs.
    """
    trigger = make_trigger(job, created_at)
    times = [due]
    capped = False
    if not job.catch_up and job.job_type != ONE_TIME:
        while True:
            nxt = next_fire_after(trigger, times[-1])
            if nxt is None or nxt > now:
                break
            if len(times) >= MAX_MISSED_SCAN:
                capped = True
                break
            times.append(nxt)
    latest = times[-1]
    run = latest if (job.catch_up or job.job_type == ONE_TIME or now - latest <= grace_secs) and not capped \
        else None
    missed = times if run is None else times[:-1]
    if capped:
        later = trigger.get_next_fire_time(None, _dt(now))
        next_run = later.timestamp() if later is not None else None
    else:
        next_run = next_fire_after(trigger, latest)
    return FiringPlan(run=run, missed=(missed[0], missed[-1]) if missed else None, missed_count=len(missed),
                      missed_capped=capped, next_run_time=next_run, last_fire=latest)


def iso(t: float | None) -> str | None:
    """An epoch time as ISO 8601 in UTC (None stays None)."""
    return datetime.fromtimestamp(t, UTC).isoformat(timespec='milliseconds') if t is not None else None
