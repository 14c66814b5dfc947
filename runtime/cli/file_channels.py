"""``conduit file-channel ...``: inbound file-transfer channels of the running server, through its admin API.

Every field of a channel has an option (``--directory``, ``--pattern`` repeated, ``--format``,
``--topic`` repeated, ``--sftp-host``, ...); ``--set key=value`` reaches any field by its admin API
name (a value is read as JSON when it is JSON: ``--set topics=[]`` clears the topics). SFTP
secrets are given as references, quoted for the shell: ``--sftp-password '${CONDUIT_SECRET_SFTP}'``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from runtime.cli.args import assignments
from runtime.cli.calls import call, quote_name
from runtime.cli.output import echo_json, json_option, print_values, show

#: Options of single-valued fields: (option, field, click type, help).
_FIELDS: list[tuple[str, str, Any, str]] = [
    ('--directory', 'directory', str, 'Directory to watch (absolute; with --sftp-host, on the server).'),
    ('--poll-interval', 'poll_interval_secs', float, 'Seconds between two looks at the directory.'),
    ('--complete-when', 'complete_when', click.Choice(['stable', 'marker']),
     'A file is complete once unchanged over --stable-polls polls, or once its marker file exists.'),
    ('--stable-polls', 'stable_polls', int, 'Polls a file must stay unchanged (stable).'),
    ('--marker-suffix', 'marker_suffix', str, "The marker's suffix, e.g. .done (marker)."),
    ('--format', 'format', click.Choice(['bytes', 'text', 'json', 'jsonl', 'csv']), 'How files are read.'),
    ('--records', 'records', click.Choice(['file', 'each']),
     'One message per file, or one per element / line / row (default: by format).'),
    ('--encoding', 'encoding', str, 'Text encoding, e.g. utf-8, latin-1.'),
    ('--csv-delimiter', 'csv_delimiter', str, 'CSV field delimiter.'),
    ('--service', 'service', str, 'Service to invoke ("" for none).'),
    ('--invoke-per', 'invoke_per', click.Choice(['file', 'record']), 'Invoke the service per file or per record.'),
    ('--invoke-retries', 'invoke_retries', int, 'Retries of a failed invocation.'),
    ('--invoke-retry-wait', 'invoke_retry_wait_secs', float, 'Seconds between retries.'),
    ('--batch-size', 'batch_size', int, 'Records per transaction.'),
    ('--max-parallel-files', 'max_parallel_files', int, 'Files processed at once by one worker.'),
    ('--after', 'after', click.Choice(['delete', 'move', 'leave']), 'What happens to a processed file.'),
    ('--move-to', 'move_to', str, 'Path template of a moved file, e.g. processed/{date}/{name}.'),
    ('--error-dir', 'error_dir', str, 'Where failed files go with their .error.json.'),
    ('--sftp-host', 'sftp_host', str, 'SFTP server ("" for a local directory).'),
    ('--sftp-port', 'sftp_port', int, 'SFTP port.'),
    ('--sftp-username', 'sftp_username', str, 'SFTP user.'),
    ('--sftp-password', 'sftp_password', str, "A '${CONDUIT_SECRET_...}' reference to the password."),
    ('--sftp-private-key', 'sftp_private_key', str, "A '${CONDUIT_SECRET_...}' reference to the private key."),
    ('--sftp-host-key', 'sftp_host_key', str, "The server's public key line, e.g. 'ssh-ed25519 AAAA...'."),
    ('--sftp-known-hosts', 'sftp_known_hosts', str, 'A known_hosts file holding the server key.'),
]

#: Boolean fields: (on flag, off flag, field, help).
_FLAGS = [
    ('--recursive', '--no-recursive', 'recursive', 'Look into subdirectories too.'),
    ('--reprocess-same', '--no-reprocess-same', 'reprocess_same',
     'Process a file again even if the same content was processed before.'),
    ('--active', '--inactive', 'is_active', 'Whether the channel polls.'),
]


def _path(name: str, suffix: str = '') -> str:
    return f'/admin/file-channels/{quote_name(name)}{suffix}'


def _field_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add every field as an option defaulting to None (not given)."""
    for option, field, kind, help_text in reversed(_FIELDS):
        func = click.option(option, field, type=kind, default=None, help=help_text)(func)
    for on, off, field, help_text in reversed(_FLAGS):
        func = click.option(f'{on}/{off}', field, default=None, help=help_text)(func)
    func = click.option('--pattern', 'patterns', multiple=True,
                        help='File name glob, e.g. "*.csv" (repeatable; replaces the list).')(func)
    func = click.option('--topic', 'topics', multiple=True, help='Topic to publish to (repeatable; replaces '
                                                                 'the list).')(func)
    return click.option('--set', 'assigned', multiple=True, metavar='KEY=VALUE',
                        help='Any field by its admin API name (repeatable).')(func)


def _body(values: dict[str, Any]) -> dict[str, Any]:
    """The admin API body of the options given."""
    assigned = assignments(values.pop('assigned', ()), '--set')
    body = {k: v for k, v in values.items() if v is not None and k not in ('patterns', 'topics')}
    for key in ('patterns', 'topics'):
        if values.get(key):
            body[key] = list(values[key])
    return {**body, **assigned}


def _summary(channel: dict[str, Any]) -> str:
    """What a channel does, in a few words."""
    actions = []
    if channel.get('topics'):
        actions.append('publish to ' + ', '.join(channel['topics']))
    if channel.get('service'):
        actions.append(f"invoke {channel['service']} per {channel.get('invoke_per', 'file')}")
    return ' and '.join(actions) or '-'


def _source(channel: dict[str, Any]) -> str:
    if channel.get('sftp_host'):
        return f"sftp://{channel.get('sftp_username', '')}@{channel['sftp_host']}:{channel.get('sftp_port', 22)}" \
               f"/{str(channel['directory']).lstrip('/')}"
    return str(channel.get('directory', ''))


@click.group('file-channel')
def file_channel() -> None:
    """Inbound file-transfer channels: list, show, create, edit, delete, runs."""


@file_channel.command('list')
@json_option
@click.pass_context
def channel_list(ctx: click.Context, as_json: bool) -> None:
    """List file channels."""
    answer = call(ctx, 'GET', '/admin/file-channels')
    if as_json:
        echo_json(answer)
        return
    values = [(c['name'], _source(c), ', '.join(c.get('patterns', [])), f"{c.get('format')}/{c.get('records') or '-'}",
               _summary(c), 'yes' if c['is_active'] else 'no', c['origin'] + (' (problem)' if c.get('problem') else ''))
              for c in answer['file_channels']]
    print_values(('name', 'directory', 'patterns', 'format', 'does', 'active', 'origin'), values, (0, 1))


@file_channel.command('show')
@click.argument('name')
@json_option
@click.pass_context
def channel_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One file channel, every field."""
    show(call(ctx, 'GET', _path(name))['file_channel'], as_json)


@file_channel.command('create')
@click.argument('name')
@_field_options
@json_option
@click.pass_context
def channel_create(ctx: click.Context, name: str, as_json: bool, **values: Any) -> None:
    """Create a file channel, e.g. create invoices --directory /srv/in --pattern '*.csv' --format csv
    --topic invoice.received."""
    body = _body(values)
    if not body.get('directory'):
        raise click.UsageError('--directory is required')
    channel = call(ctx, 'POST', '/admin/file-channels', {'name': name, **body})['file_channel']
    if as_json:
        echo_json(channel)
        return
    click.echo(f"created file channel {name}: {_source(channel)} -> {_summary(channel)}")


@file_channel.command('edit')
@click.argument('name')
@click.option('--name', 'new_name', default=None, help='Rename the channel.')
@_field_options
@json_option
@click.pass_context
def channel_edit(ctx: click.Context, name: str, new_name: str | None, as_json: bool, **values: Any) -> None:
    """Change the fields given (--set key=null puts one back to its default)."""
    body = _body(values)
    if new_name:
        body['name'] = new_name
    if not body:
        raise click.UsageError('nothing to change')
    channel = call(ctx, 'PATCH', _path(name), body)['file_channel']
    if as_json:
        echo_json(channel)
        return
    click.echo(f"changed file channel {channel['name']}: {_source(channel)} -> {_summary(channel)}")


@file_channel.command('delete')
@click.argument('name')
@click.pass_context
def channel_delete(ctx: click.Context, name: str) -> None:
    """Delete a file channel (its run history stays)."""
    call(ctx, 'DELETE', _path(name))
    click.echo(f'deleted file channel {name}')


@file_channel.command('runs')
@click.argument('name')
@click.option('--state', type=click.Choice(['running', 'done', 'failed', 'skipped', 'superseded']), default=None,
              help='Only runs in this state.')
@click.option('--limit', type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option('--offset', type=click.IntRange(0), default=0)
@json_option
@click.pass_context
def channel_runs(ctx: click.Context, name: str, state: str | None, limit: int, offset: int, as_json: bool) -> None:
    """The files a channel processed, most recent first."""
    params = f'?limit={limit}&offset={offset}' + (f'&state={state}' if state else '')
    answer = call(ctx, 'GET', _path(name, '/runs') + params)
    if as_json:
        echo_json(answer)
        return
    values = [((r['started_at_iso'] or '')[:19].replace('T', ' '), r['file_name'], r['state'], str(r['records_done']),
               str(r['published']), str(r['invoked']), r['error'] or '') for r in answer['runs']]
    print_values(('started (UTC)', 'file', 'state', 'records', 'published', 'invoked', 'error'), values, (1,))
    shown = len(answer['runs'])
    if answer['total'] > offset + shown:
        click.echo(f"{offset + 1}-{offset + shown} of {answer['total']}; --offset {offset + shown} for more")
