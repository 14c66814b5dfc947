"""``conduit job ...``: scheduler jobs of the running server, through its admin API."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import click
from rich.console import Console
from rich.table import Table

from runtime.errors import ConduitError

_console = Console()

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


def _client(ctx: click.Context) -> Any:
    from runtime.admin_client import AdminClient
    return AdminClient(ctx.obj['settings'])


def _call(ctx: click.Context, method: str, path: str, body: Any = None) -> dict[str, Any]:
    try:
        return _client(ctx).call(method, path, body)
    except ConduitError as e:
        raise click.ClickException(str(e)) from None


def _path(name: str, suffix: str = '') -> str:
    return f'/admin/jobs/{quote(name, safe="")}{suffix}'


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


def _print_job(job: dict[str, Any]) -> None:
    click.echo(json.dumps(job, indent=2, default=str))


@click.group()
def job() -> None:
    """Scheduler jobs: list, add, edit, pause, resume, run, delete, runs."""


@job.command('list')
@click.pass_context
def list_jobs(ctx: click.Context) -> None:
    """List jobs with their schedule, next run and last outcome."""
    table = Table()
    table.add_column('name', no_wrap=True)  # never cut: it is what the other commands take
    for title in ('service', 'schedule', 'active', 'next run (UTC)', 'runs', 'last'):
        table.add_column(title)
    for j in _call(ctx, 'GET', '/admin/jobs')['jobs']:
        last = j.get('last_run') or {}
        table.add_row(j['name'], j['service'], j['schedule'], 'yes' if j['is_active'] else 'paused',
                      _short(j['next_run_time']), str(j['run_count']), last.get('outcome', '-'))
    _console.print(table)


@job.command()
@click.argument('name')
@_attribute_options
@click.pass_context
def add(ctx: click.Context, name: str, **values: Any) -> None:
    """Create a job, e.g. add nightly --service payroll.reconcile --type cron_style --cron "0 2 * * *"."""
    _print_job(_call(ctx, 'POST', '/admin/jobs', {'name': name, **_definition(values)})['job'])


@job.command()
@click.argument('name')
@click.option('--name', 'new_name', default=None, help='Rename the job.')
@_attribute_options
@click.pass_context
def edit(ctx: click.Context, name: str, new_name: str | None, **values: Any) -> None:
    """Change the attributes given; a changed schedule starts afresh."""
    body = _definition(values)
    if new_name:
        body['name'] = new_name
    if not body:
        raise click.UsageError('nothing to change: give at least one option')
    _print_job(_call(ctx, 'PATCH', _path(name), body)['job'])


@job.command()
@click.argument('name')
@click.pass_context
def pause(ctx: click.Context, name: str) -> None:
    """Stop firing a job."""
    _call(ctx, 'POST', _path(name, '/pause'))
    click.echo(f'paused: {name}')


@job.command()
@click.argument('name')
@click.pass_context
def resume(ctx: click.Context, name: str) -> None:
    """Fire a paused job again, from its next firing on."""
    result = _call(ctx, 'POST', _path(name, '/resume'))['job']
    click.echo(f'resumed: {name}, next run {result["next_run_time"] or "none"}')


@job.command()
@click.argument('name')
@click.option('--wait/--no-wait', default=True, show_default=True, help='Wait for the run to end.')
@click.option('--timeout', type=float, default=60.0, show_default=True, help='Seconds to wait.')
@click.pass_context
def run(ctx: click.Context, name: str, wait: bool, timeout: float) -> None:
    """Run a job now, outside its schedule."""
    suffix = f'/run?wait=true&timeout={timeout}' if wait else '/run'
    result = _call(ctx, 'POST', _path(name, suffix))['run']
    click.echo(f'run {result["id"]}: {result["outcome"]}' + (f': {result["error"]}' if result['error'] else ''))
    if result['outcome'] in ('error', 'timeout'):
        ctx.exit(1)


@job.command()
@click.argument('name')
@click.pass_context
def delete(ctx: click.Context, name: str) -> None:
    """Delete a job and its run history."""
    _call(ctx, 'DELETE', _path(name))
    click.echo(f'deleted: {name}')


@job.command()
@click.argument('name')
@click.option('--limit', type=click.IntRange(1, 10000), default=20, show_default=True)
@click.pass_context
def runs(ctx: click.Context, name: str, limit: int) -> None:
    """Show a job's latest runs: when, how long, outcome and error."""
    table = Table('run', 'kind', 'fire time (UTC)', 'started', 'secs', 'outcome', 'error')
    for r in _call(ctx, 'GET', _path(name, f'/runs?limit={limit}'))['runs']:
        duration = f'{r["duration_secs"]:.3f}' if r['duration_secs'] is not None else '-'
        table.add_row(str(r['id']), r['kind'], _short(r['fire_time']), _short(r['started_at']), duration,
                      r['outcome'], (r['error'] or '')[:120])
    _console.print(table)
