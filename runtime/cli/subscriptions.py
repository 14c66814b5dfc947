"""``conduit sub ...``: subscriptions, through the admin API.

Subscriptions and their queues are named by their numeric id (``conduit sub list`` shows it); the
sub_key is a secret and is printed once, by ``sub create``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import click

from runtime.cli.args import assignments
from runtime.cli.client import call
from runtime.cli.columns import SUB_COLUMNS, SUB_NAMES, with_subscriber
from runtime.cli.output import json_option, rows, show


@click.group()
def sub() -> None:
    """Subscriptions: list, show, create, edit, pause, resume, delete."""


@sub.command('list')
@click.option('--topic', 'topic_name', default=None, help='Only those whose topic or pattern matches this topic.')
@click.option('--kind', type=click.Choice(['service', 'pull', 'rest_push', 'websocket']), default=None)
@json_option
@click.pass_context
def sub_list(ctx: click.Context, topic_name: str | None, kind: str | None, as_json: bool) -> None:
    """List subscriptions with their queues."""
    params = {k: v for k, v in (('topic', topic_name), ('kind', kind)) if v}
    answer = call(ctx, 'GET', '/admin/subscriptions' + (f'?{urlencode(params)}' if params else ''))
    rows(with_subscriber(answer['subscriptions']), SUB_COLUMNS, as_json, answer, names=SUB_NAMES)


@sub.command('show')
@click.argument('sub_id', type=int)
@json_option
@click.pass_context
def sub_show(ctx: click.Context, sub_id: int, as_json: bool) -> None:
    """One subscription with its options and queue."""
    show(call(ctx, 'GET', f'/admin/subscriptions/{sub_id}')['subscription'], as_json)


@sub.command('create')
@click.argument('topic_or_pattern')
@click.option('--service', default='', help='Deliver to this service (kind service).')
@click.option('--security', default='', help='The security definition of a pull or REST push client.')
@click.option('--push-url', default='', help='POST messages to this URL (kind rest_push).')
@click.option('--option', 'options', multiple=True, metavar='KEY=VALUE',
              help='A delivery option, e.g. --option max_attempts=5 (repeatable).')
@click.option('--paused', is_flag=True, help='Create it paused.')
@click.pass_context
def sub_create(ctx: click.Context, topic_or_pattern: str, service: str, security: str, push_url: str,
               options: tuple[str, ...], paused: bool) -> None:
    """Subscribe a service (--service), a pull client (--security) or a REST endpoint (--push-url)."""
    kind = 'rest_push' if push_url else 'service' if service and not security else 'pull'
    body: dict[str, Any] = {'topic': topic_or_pattern, 'kind': kind, 'service': service, 'security': security,
                            'push_url': push_url, 'options': assignments(options, '--option')}
    if paused:
        body['is_active'] = False
    answer = call(ctx, 'POST', '/admin/subscriptions', body)
    click.echo(f'created subscription {answer["subscription"]["id"]} ({kind}) to {topic_or_pattern}')
    click.echo(f'sub_key: {answer["sub_key"]}  (a secret: shown only now)')


@sub.command('edit')
@click.argument('sub_id', type=int)
@click.option('--option', 'options', multiple=True, metavar='KEY=VALUE', help='A delivery option to change.')
@click.option('--push-url', default=None)
@click.option('--security', default=None)
@click.pass_context
def sub_edit(ctx: click.Context, sub_id: int, options: tuple[str, ...], push_url: str | None,
             security: str | None) -> None:
    """Change delivery options, push URL or security of a subscription."""
    body: dict[str, Any] = {}
    if options:
        body['options'] = assignments(options, '--option')
    if push_url is not None:
        body['push_url'] = push_url
    if security is not None:
        body['security'] = security
    if not body:
        raise click.UsageError('nothing to change: give --option, --push-url or --security')
    call(ctx, 'PATCH', f'/admin/subscriptions/{sub_id}', body)
    click.echo(f'changed subscription {sub_id}')


@sub.command('pause')
@click.argument('sub_id', type=int)
@click.pass_context
def sub_pause(ctx: click.Context, sub_id: int) -> None:
    """Stop delivering (messages keep queueing)."""
    call(ctx, 'POST', f'/admin/subscriptions/{sub_id}/pause')
    click.echo(f'paused subscription {sub_id}')


@sub.command('resume')
@click.argument('sub_id', type=int)
@click.pass_context
def sub_resume(ctx: click.Context, sub_id: int) -> None:
    """Deliver again."""
    call(ctx, 'POST', f'/admin/subscriptions/{sub_id}/resume')
    click.echo(f'resumed subscription {sub_id}')


@sub.command('delete')
@click.argument('sub_id', type=int)
@click.confirmation_option(prompt='Delete the subscription with its queue and dead letters?')
@click.pass_context
def sub_delete(ctx: click.Context, sub_id: int) -> None:
    """Unsubscribe: remove a subscription with its queue and dead letters."""
    call(ctx, 'DELETE', f'/admin/subscriptions/{sub_id}')
    click.echo(f'deleted subscription {sub_id}')
