"""``conduit queue ...`` and ``conduit dlq ...``: queues and dead letters, through the admin API."""

from __future__ import annotations

from typing import Any

import click

from runtime.cli.args import json_arg
from runtime.cli.calls import call, quote_name
from runtime.cli.columns import SUB_COLUMNS, SUB_NAMES, with_subscriber
from runtime.cli.output import confirm, json_option, rows, show

_MSG_COLUMNS = [('msg_id', 'msg_id'), ('topic', 'topic_name'), ('prio', 'priority'), ('published', 'pub_time_iso'),
                ('attempts', 'delivery_count'), ('data', 'data_preview'), ('last error', 'last_error')]
_MSG_NAMES = ('msg_id', 'topic_name')


def _edit_body(data: str | None, priority: int | None, expiration: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if data is not None:
        body['data'] = json_arg(data, '--data')
    if priority is not None:
        body['priority'] = priority
    if expiration is not None:
        body['expiration'] = expiration
    if not body:
        raise click.UsageError('nothing to change: give --data, --priority or --expiration')
    return body


def _edit_options(func: Any) -> Any:
    func = click.option('--expiration', type=click.FloatRange(min=0, min_open=True), default=None,
                        help='Expire this many seconds from now.')(func)
    func = click.option('--priority', type=click.IntRange(0, 9), default=None)(func)
    return click.option('--data', default=None, help='New data, as JSON.')(func)


def _page_options(func: Any) -> Any:
    func = click.option('--offset', type=click.IntRange(0), default=0, show_default=True)(func)
    return click.option('--limit', type=click.IntRange(1, 1000), default=50, show_default=True)(func)


@click.group()
def queue() -> None:
    """Queues: list, show, browse, get, edit, delete and purge messages."""


@queue.command('list')
@json_option
@click.pass_context
def queue_list(ctx: click.Context, as_json: bool) -> None:
    """Every queue: depth, oldest message, dead letters."""
    answer = call(ctx, 'GET', '/admin/queues')
    rows(with_subscriber(answer['queues']), SUB_COLUMNS, as_json, answer, names=SUB_NAMES)


@queue.command('show')
@click.argument('sub_id', type=int)
@json_option
@click.pass_context
def queue_show(ctx: click.Context, sub_id: int, as_json: bool) -> None:
    """One queue's depth, oldest message and dead letters."""
    show(call(ctx, 'GET', f'/admin/queues/{sub_id}')['queue'], as_json)


@queue.command('browse')
@click.argument('sub_id', type=int)
@_page_options
@json_option
@click.pass_context
def queue_browse(ctx: click.Context, sub_id: int, limit: int, offset: int, as_json: bool) -> None:
    """Messages of a queue in delivery order."""
    answer = call(ctx, 'GET', f'/admin/queues/{sub_id}/messages?limit={limit}&offset={offset}')
    rows(answer['messages'], _MSG_COLUMNS, as_json, answer, names=_MSG_NAMES)
    if not as_json and answer['next_offset'] is not None:
        click.echo(f'{answer["depth"]} in all; next page: --offset {answer["next_offset"]}')


@queue.command('get')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@json_option
@click.pass_context
def queue_get(ctx: click.Context, sub_id: int, msg_id: str, as_json: bool) -> None:
    """One queued message with its full data."""
    show(call(ctx, 'GET', f'/admin/queues/{sub_id}/messages/{quote_name(msg_id)}')['message'], as_json)


@queue.command('edit')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@_edit_options
@click.pass_context
def queue_edit(ctx: click.Context, sub_id: int, msg_id: str, data: str | None, priority: int | None,
               expiration: float | None) -> None:
    """Edit a queued message in place; the next delivery sees it."""
    answer = call(ctx, 'PATCH', f'/admin/queues/{sub_id}/messages/{quote_name(msg_id)}',
                  _edit_body(data, priority, expiration))
    shared = f' (stored once for {answer["held_by"]} queues: all see it)' if answer['held_by'] > 1 else ''
    click.echo(f'edited {msg_id}{shared}')


@queue.command('delete')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@click.pass_context
def queue_delete(ctx: click.Context, sub_id: int, msg_id: str) -> None:
    """Remove one message from a queue."""
    call(ctx, 'DELETE', f'/admin/queues/{sub_id}/messages/{quote_name(msg_id)}')
    click.echo(f'deleted {msg_id}')


@queue.command('purge')
@click.argument('sub_id', type=int)
@click.confirmation_option(prompt='Remove every message waiting in the queue?')
@click.pass_context
def queue_purge(ctx: click.Context, sub_id: int) -> None:
    """Remove every message of a queue."""
    answer = call(ctx, 'DELETE', f'/admin/queues/{sub_id}/messages')
    click.echo(f'purged {answer["deleted"]} message(s)')


@click.group()
def dlq() -> None:
    """Dead letters: list, show, edit, redrive, delete."""


@dlq.command('list')
@click.argument('sub_id', type=int)
@_page_options
@json_option
@click.pass_context
def dlq_list(ctx: click.Context, sub_id: int, limit: int, offset: int, as_json: bool) -> None:
    """A subscription's dead letters, oldest first."""
    answer = call(ctx, 'GET', f'/admin/queues/{sub_id}/dead-letters?limit={limit}&offset={offset}')
    rows(answer['dead_letters'], [*_MSG_COLUMNS[:5], ('reason', 'reason'), ('dead since', 'dead_time_iso'),
                                   ('last error', 'last_error')], as_json, answer, names=_MSG_NAMES)


@dlq.command('show')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@json_option
@click.pass_context
def dlq_show(ctx: click.Context, sub_id: int, msg_id: str, as_json: bool) -> None:
    """One dead letter with its full data and last error."""
    show(call(ctx, 'GET', f'/admin/queues/{sub_id}/dead-letters/{quote_name(msg_id)}')['dead_letter'], as_json)


@dlq.command('edit')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@_edit_options
@click.pass_context
def dlq_edit(ctx: click.Context, sub_id: int, msg_id: str, data: str | None, priority: int | None,
             expiration: float | None) -> None:
    """Edit a dead letter before re-driving it."""
    call(ctx, 'PATCH', f'/admin/queues/{sub_id}/dead-letters/{quote_name(msg_id)}',
         _edit_body(data, priority, expiration))
    click.echo(f'edited {msg_id}')


@dlq.command('redrive')
@click.argument('sub_id', type=int)
@click.argument('msg_ids', nargs=-1)
@click.option('--all', 'redrive_all', is_flag=True, help='Re-drive every dead letter of the subscription.')
@click.pass_context
def dlq_redrive(ctx: click.Context, sub_id: int, msg_ids: tuple[str, ...], redrive_all: bool) -> None:
    """Put dead letters back into their queue, to be delivered again."""
    if bool(msg_ids) == redrive_all:
        raise click.UsageError('give msg_ids, or --all')
    body = {'all': True} if redrive_all else {'msg_ids': list(msg_ids)}
    answer = call(ctx, 'POST', f'/admin/queues/{sub_id}/redrive', body)
    click.echo(f're-drove {answer["count"]} message(s)')


@dlq.command('delete')
@click.argument('sub_id', type=int)
@click.argument('msg_id', required=False)
@click.option('--all', 'delete_all', is_flag=True, help='Delete every dead letter of the subscription.')
@click.option('--yes', is_flag=True, help='Do not ask for confirmation.')
@click.pass_context
def dlq_delete(ctx: click.Context, sub_id: int, msg_id: str | None, delete_all: bool, yes: bool) -> None:
    """Delete one dead letter, or all with --all (which asks first, unless --yes)."""
    if bool(msg_id) == delete_all:
        raise click.UsageError('give a msg_id, or --all')
    if delete_all:
        confirm(f'Delete every dead letter of subscription {sub_id}?', yes)
    path = f'/admin/queues/{sub_id}/dead-letters' + (f'/{quote_name(msg_id)}' if msg_id else '')
    answer = call(ctx, 'DELETE', path)
    click.echo(f'deleted {answer["deleted"]}' + (' dead letter(s)' if delete_all else ''))
