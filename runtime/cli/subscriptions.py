"""``conduit sub ...``: subscriptions, through the admin API.

Subscriptions and their queues are named by their numeric id (``conduit sub list`` shows it); the
sub_key is a secret and is printed once, by ``sub create``.

A file subscription (``sub create TOPIC --file-target file:///abs/dir``, or an ``sftp://`` target)
writes the topic's messages as files; its ``--file-*`` options are the subscription's ``file_*``
delivery options. SFTP credentials are given only as ``${CONDUIT_SECRET_...}`` references, which
the server reads from its environment: quote them so that the shell does not expand them.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import click

from runtime.cli.args import assignments
from runtime.cli.calls import call
from runtime.cli.columns import SUB_COLUMNS, SUB_NAMES, with_subscriber
from runtime.cli.output import json_option, rows, show

#: --file-* options of sub create and sub edit: (click option, delivery option, help).
_FILE_OPTIONS = (
    ('--file-format', 'file_format', 'The files\' format (default json).'),
    ('--file-per', 'file_per', 'One file per message (the default) or per delivery batch.'),
    ('--file-name', 'file_name', 'Name template, e.g. {topic}-{date}-{msg_id}.{ext} (the default); fields: '
                                 'topic, msg_id, date, time, ext, seq.'),
    ('--file-csv-columns', 'file_csv_columns', 'CSV columns, comma-separated (default: the messages\' keys).'),
    ('--file-password', 'file_password', "SFTP password as a reference: '${CONDUIT_SECRET_NAME}'."),
    ('--file-private-key', 'file_private_key', "SFTP private key (its text) as a reference: "
                                               "'${CONDUIT_SECRET_NAME}'."),
    ('--file-host-key', 'file_host_key', "The SFTP server's public key line, e.g. 'ssh-ed25519 AAAA...'."),
    ('--file-known-hosts', 'file_known_hosts', 'A known_hosts file of the server (instead of --file-host-key).'),
)


def _file_options(func: Any) -> Any:
    """Add the --file-* options to a command (they arrive as keyword arguments named as the delivery options)."""
    choices = {'file_format': click.Choice(['json', 'jsonl', 'csv']), 'file_per': click.Choice(['message', 'batch'])}
    for flag, name, help_text in reversed(_FILE_OPTIONS):
        func = click.option(flag, name, default=None, type=choices.get(name), help=help_text)(func)
    return func


def _given_file_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {name: kwargs[name] for _, name, _ in _FILE_OPTIONS if kwargs.get(name) is not None}


@click.group()
def sub() -> None:
    """Subscriptions: list, show, create, edit, pause, resume, delete."""


@sub.command('list')
@click.option('--topic', 'topic_name', default=None, help='Only those whose topic or pattern matches this topic.')
@click.option('--kind', type=click.Choice(['service', 'pull', 'rest_push', 'websocket', 'file']), default=None)
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
@click.option('--file-target', default='', help='Write messages as files here (kind file): file:///abs/dir or '
                                                'sftp://user@host:port/abs/dir.')
@_file_options
@click.option('--option', 'options', multiple=True, metavar='KEY=VALUE',
              help='A delivery option, e.g. --option max_attempts=5 (repeatable).')
@click.option('--paused', is_flag=True, help='Create it paused.')
@click.pass_context
def sub_create(ctx: click.Context, topic_or_pattern: str, service: str, security: str, push_url: str,
               file_target: str, options: tuple[str, ...], paused: bool, **file_options: str | None) -> None:
    """Subscribe a service (--service), pull client (--security), REST URL (--push-url) or directory (--file-target)."""
    given = _given_file_options(file_options)
    if file_target and push_url:
        raise click.UsageError('give --push-url (a REST endpoint) or --file-target (a directory), not both')
    if given and not file_target:
        raise click.UsageError('--file-* options need --file-target')
    if file_target:
        kind, push_url = 'file', file_target
    else:
        kind = 'rest_push' if push_url else 'service' if service and not security else 'pull'
    body: dict[str, Any] = {'topic': topic_or_pattern, 'kind': kind, 'service': service, 'security': security,
                            'push_url': push_url, 'options': {**assignments(options, '--option'), **given}}
    if paused:
        body['is_active'] = False
    answer = call(ctx, 'POST', '/admin/subscriptions', body)
    click.echo(f'created subscription {answer["subscription"]["id"]} ({kind}) to {topic_or_pattern}')
    click.echo(f'sub_key: {answer["sub_key"]}  (a secret: shown only now)')


@sub.command('edit')
@click.argument('sub_id', type=int)
@click.option('--option', 'options', multiple=True, metavar='KEY=VALUE', help='A delivery option to change.')
@click.option('--push-url', default=None)
@click.option('--file-target', default=None, help='A file subscription\'s new target directory.')
@_file_options
@click.option('--security', default=None)
@click.pass_context
def sub_edit(ctx: click.Context, sub_id: int, options: tuple[str, ...], push_url: str | None,
             file_target: str | None, security: str | None, **file_options: str | None) -> None:
    """Change delivery options, push URL (or file target) or security of a subscription."""
    body: dict[str, Any] = {}
    given = _given_file_options(file_options)
    if options or given:
        body['options'] = {**assignments(options, '--option'), **given}
    if push_url is not None and file_target is not None:
        raise click.UsageError('give --push-url or --file-target, not both')
    target = file_target if file_target is not None else push_url
    if target is not None:
        body['push_url'] = target
    if security is not None:
        body['security'] = security
    if not body:
        raise click.UsageError('nothing to change: give --option, --file-*, --push-url, --file-target or --security')
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
