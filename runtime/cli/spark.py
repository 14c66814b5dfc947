"""``conduit spark ...``: Spark jobs of the running server, through its admin API."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import click

from runtime.cli.calls import call, quote_name
from runtime.cli.output import echo_json, json_option, print_values


def _path(job_id: str, suffix: str = '') -> str:
    return f'/admin/spark/jobs/{quote_name(job_id)}{suffix}'


def _secs(job: dict[str, Any]) -> str:
    return f'{job["duration_secs"]:.1f}' if job.get('duration_secs') is not None else '-'


@click.group()
def spark() -> None:
    """Spark jobs: list, show, log, kill, submit, pipelines."""


@spark.command('list')
@click.option('--status', type=click.Choice(['submitted', 'running', 'succeeded', 'failed', 'killed']))
@click.option('--pipeline', help='Only jobs of this pipeline.')
@click.option('--limit', type=click.IntRange(1, 10000), default=20, show_default=True)
@json_option
@click.pass_context
def list_jobs(ctx: click.Context, status: str | None, pipeline: str | None, limit: int, as_json: bool) -> None:
    """List jobs, newest first."""
    query = urlencode({k: v for k, v in (('status', status), ('pipeline', pipeline), ('limit', limit)) if v})
    answer = call(ctx, 'GET', f'/admin/spark/jobs?{query}')
    if as_json:
        echo_json(answer)
        return
    values = [(j['job_id'], j['pipeline'], j['status'], j['submitted_at'], _secs(j), j['master'],
               (j['error'] or '')[:100]) for j in answer['jobs']]
    print_values(('job id', 'pipeline', 'status', 'submitted (UTC)', 'secs', 'master', 'error'), values, (0, 1))


@spark.command()
@click.argument('job_id')
@click.option('--lines', type=click.IntRange(0, 100000), default=20, show_default=True,
              help='Lines of the driver log to show.')
@click.pass_context
def show(ctx: click.Context, job_id: str, lines: int) -> None:
    """Show a job: status, times, arguments, output location, error, and the end of its log."""
    job = call(ctx, 'GET', _path(job_id, f'?lines={lines}'))['job']
    tail = job.pop('log_tail', [])
    click.echo(json.dumps(job, indent=2, default=str))
    if tail:
        click.echo(f'--- last {len(tail)} line(s) of {job["log_path"]}')
        click.echo('\n'.join(tail))


@spark.command()
@click.argument('job_id')
@click.option('--lines', type=click.IntRange(1, 100000), default=200, show_default=True)
@click.pass_context
def log(ctx: click.Context, job_id: str, lines: int) -> None:
    """Print the end of a job's driver log."""
    result = call(ctx, 'GET', _path(job_id, f'/log?lines={lines}'))
    click.echo('\n'.join(result['lines']))


@spark.command()
@click.argument('job_id')
@click.pass_context
def kill(ctx: click.Context, job_id: str) -> None:
    """Kill a running job (it is recorded as killed)."""
    job = call(ctx, 'POST', _path(job_id, '/kill'))['job']
    if job['status'] in ('submitted', 'running'):
        click.echo(f'killing: {job_id} (was {job["status"]})')
    else:
        click.echo(f'{job_id} already ended: {job["status"]}')


@spark.command()
@click.argument('pipeline')
@click.argument('args', nargs=-1)
@click.option('--master', help='Spark master URL (default: [spark] master).')
@click.option('--conf', 'conf', multiple=True, metavar='KEY=VALUE', help='A Spark setting; may be repeated.')
@click.option('--timeout', type=float, help='Seconds before the job is killed (0: no limit).')
@click.option('--callback', help='Service that also receives the job event.')
@click.option('--wait/--no-wait', default=False, help='Wait for the job to end.')
@click.option('--wait-timeout', type=float, default=600.0, show_default=True)
@click.pass_context
def submit(ctx: click.Context, pipeline: str, args: tuple[str, ...], master: str | None, conf: tuple[str, ...],
           timeout: float | None, callback: str | None, wait: bool, wait_timeout: float) -> None:
    """Submit a pipeline; its own options go after --, e.g. submit traffic_analytics -- --topic 'orders.*'."""
    settings: dict[str, str] = {}
    for item in conf:
        key, eq, value = item.partition('=')
        if not eq or not key:
            raise click.BadParameter(f'{item!r} is not KEY=VALUE', param_hint='--conf')
        settings[key] = value
    body = {k: v for k, v in (('pipeline', pipeline), ('args', list(args)), ('master', master),
                              ('conf', settings or None), ('timeout', timeout), ('callback', callback))
            if v is not None}
    job_id = call(ctx, 'POST', '/admin/spark/jobs', body)['job_id']
    click.echo(f'submitted: {job_id}')
    if wait:
        job = call(ctx, 'POST', _path(job_id, f'/wait?timeout={wait_timeout}'), timeout=wait_timeout + 30)['job']
        click.echo(f'{job_id}: {job["status"]}' + (f': {job["error"]}' if job['error'] else '')
                   + (f'; output in {job["output_location"]}' if job['status'] == 'succeeded' else ''))
        if job['status'] != 'succeeded':
            ctx.exit(1)


@spark.command()
@json_option
@click.pass_context
def pipelines(ctx: click.Context, as_json: bool) -> None:
    """List the pipelines that can be submitted."""
    result = call(ctx, 'GET', '/admin/spark/pipelines')
    if as_json:
        echo_json(result)
        return
    click.echo(f'{result["directory"]} (master {result["master"]}):')
    for name in result['pipelines']:
        click.echo(f'  {name}')
