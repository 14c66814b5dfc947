"""``conduit job ...``: scheduler jobs of the running server, through its admin API."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click

from runtime.cli.calls import call, quote_name
from runtime.cli.output import echo_json, json_option, print_values

#: Options shared by add and edit: (option, attribute, click type, help).
_ATTRIBUTES: list[tuple[str, str, Any, str]] = [
    ('--service', 'service', str, 'Service the job invokes.'),
    ('--type', 'job_type', click.Choice(['one_time', 'interval_based', 'cron_style']), 'Job type.'),
    ('--start-date', 'start_date', str, 'ISO 8601 date and time (in --timezone unless it has an offset).'),
    ('--weeks', 'weeks', float, 'Interval: weeks.'),
    ('--days', 'days', float, 'Interval: days.'),
    ('--hours', 'hours', float, 'Interval: hours.'),
    ('--minutes', 'minutes', float, 'Interval: minutes.'),
    ('--seconds', 'seconds', float, 'Interval: seconds.'),
    ('--repeats', 'repeats', int, 'Most scheduled runs (0: forever).'),
    ('--cron', 'cron_definition', str, 'Crontab line, e.g. "0 2 * * 1-5".'),
    ('--timezone', 'timezone', str, 'IANA time zone, e.g. Europe/Warsaw.'),
    ('--jitter', 'jitter', float, 'Delay each run by up to this many seconds.'),
    ('--max-execution-time', 'max_execution_time', float, 'Stop a run after this many seconds (0: no limit).'),
    ('--on-success', 'on_success', str, 'Service invoked after a successful run.'),
    ('--on-error', 'on_error', str, 'Service invoked after a failed or timed-out run.'),
]

#: Boolean attributes: (on flag, off flag, attribute, help).
_FLAGS = [
    ('--active', '--inactive', 'is_active', 'Whether the job fires.'),
    ('--skip-if-running', '--no-skip-if-running', 'skip_if_running', 'Skip a firing while the last run goes on.'),
    ('--catch-up', '--no-catch-up', 'catch_up', 'Run firings missed while no server ran, one by one.'),
]


def _path(name: str, suffix: str = '') -> str:
    return f'/admin/jobs/{quote_name(name)}{suffix}'


def _attribute_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add every job attribute as an option defaulting to None (not given)."""
    for option, attribute, kind, help_text in reversed(_ATTRIBUTES):
        func = click.option(option, attribute, type=kind, default=None, help=help_text)(func)
    for on, off, attribute, help_text in reversed(_FLAGS):
        func = click.option(f'{on}/{off}', attribute, default=None, help=help_text)(func)
    return click.option('--extra', default=None, help='JSON payload the service receives.')(func)


def _definition(values: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in values.items() if v is not None and k != 'extra'}
    if values.get('extra') is not None:
        try:
            body['extra'] = json.loads(values['extra'])
        except json.JSONDecodeError as e:
            raise click.ClickException(f'--extra is not valid JSON: {e}') from None
    return body


def _short(iso_time: str | None) -> str:
    """An ISO time as 'YYYY-MM-DD HH:MM:SS' (UTC), for tables."""
    return iso_time[:19].replace('T', ' ') if iso_time else '-'


def _print_job(verb: str, job: dict[str, Any], as_json: bool) -> None:
    """A created or changed job in one line (or as JSON)."""
    if as_json:
        echo_json(job)
        return
    state = 'active' if job['is_active'] else 'paused'
    click.echo(f"{verb} job {job['name']}: {job['service']}, {job['schedule']}, {state}, "
               f"next run {_short(job['next_run_time'])} UTC, {job['run_count']} run(s) so far")


@click.group()
def job() -> None:
    """Scheduler jobs: list, add, edit, pause, resume, run, delete, runs."""


@job.command('list')
@json_option
@click.pass_context
def list_jobs(ctx: click.Context, as_json: bool) -> None:
    """List jobs with their schedule, next run and last outcome."""
    answer = call(ctx, 'GET', '/admin/jobs')
    if as_json:
        echo_json(answer)
        return
    values = [(j['name'], j['service'], j['schedule'], 'yes' if j['is_active'] else 'paused',
               _short(j['next_run_time']), str(j['run_count']), (j.get('last_run') or {}).get('outcome', '-'))
              for j in answer['jobs']]
    # The job's and the service's names are what the other commands take: never cut.
    print_values(('name', 'service', 'schedule', 'active', 'next run (UTC)', 'runs', 'last'), values, (0, 1))


@job.command()
@click.argument('name')
@_attribute_options
@json_option
@click.pass_context
def add(ctx: click.Context, name: str, as_json: bool, **values: Any) -> None:
    """Create a job, e.g. add nightly --service payroll.reconcile --type cron_style --cron "0 2 * * *"."""
    _print_job('created', call(ctx, 'POST', '/admin/jobs', {'name': name, **_definition(values)})['job'], as_json)


@job.command()
@click.argument('name')
@click.option('--name', 'new_name', default=None, help='Rename the job.')
@_attribute_options
@json_option
@click.pass_context
def edit(ctx: click.Context, name: str, new_name: str | None, as_json: bool, **values: Any) -> None:
    """Change the attributes given; a changed schedule fires anew, the run count and history stay."""
    body = _definition(values)
    if new_name:
        body['name'] = new_name
    if not body:
        raise click.UsageError('nothing to change: give at least one option')
    _print_job('changed', call(ctx, 'PATCH', _path(name), body)['job'], as_json)


@job.command()
@click.argument('name')
@click.pass_context
def pause(ctx: click.Context, name: str) -> None:
    """Stop firing a job."""
    call(ctx, 'POST', _path(name, '/pause'))
    click.echo(f'paused: {name}')


@job.command()
@click.argument('name')
@click.pass_context
def resume(ctx: click.Context, name: str) -> None:
    """Fire a paused job again, from its next firing on."""
    result = call(ctx, 'POST', _path(name, '/resume'))['job']
    click.echo(f'resumed: {name}, next run {result["next_run_time"] or "none"}')


@job.command()
@click.argument('name')
@click.option('--wait/--no-wait', default=True, show_default=True, help='Wait for the run to end.')
@click.option('--timeout', type=float, default=60.0, show_default=True, help='Seconds to wait.')
@click.pass_context
def run(ctx: click.Context, name: str, wait: bool, timeout: float) -> None:
    """Run a job now, outside its schedule."""
    suffix = f'/run?wait=true&timeout={timeout}' if wait else '/run'
    result = call(ctx, 'POST', _path(name, suffix))['run']
    click.echo(f'run {result["id"]}: {result["outcome"]}' + (f': {result["error"]}' if result['error'] else ''))
    if result['outcome'] in ('error', 'timeout'):
        ctx.exit(1)


@job.command()
@click.argument('name')
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete a job and its run history."""
    call(ctx, 'DELETE', _path(name))
    click.echo(f'deleted: {name}')


@job.command()
@click.argument('name')
@click.option('--limit', type=click.IntRange(1, 10000), default=20, show_default=True)
@json_option
@click.pass_context
def runs(ctx: click.Context, name: str, limit: int, as_json: bool) -> None:
    """Show a job's latest runs: when, how long, outcome and error."""
    answer = call(ctx, 'GET', _path(name, f'/runs?limit={limit}'))
    if as_json:
        echo_json(answer)
        return
    values = [(str(r['id']), r['kind'], _short(r['fire_time']), _short(r['started_at']),
               f'{r["duration_secs"]:.3f}' if r['duration_secs'] is not None else '-', r['outcome'],
               (r['error'] or '')[:120]) for r in answer['runs']]
    print_values(('run', 'kind', 'fire time (UTC)', 'started', 'secs', 'outcome', 'error'), values)
