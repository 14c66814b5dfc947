"""``conduit channel ...``: REST channels, through the admin API."""

from __future__ import annotations

from typing import Any

import click

from runtime.cli.calls import call, quote_name
from runtime.cli.output import json_option, rows, show


def _channel_options(func: Any) -> Any:
    for decorator in reversed([
        click.option('--service', default=None, help='The service the channel invokes.'),
        click.option('--url-path', default=None, help='Path template, e.g. /api/customer/{id}.'),
        click.option('--method', 'methods', multiple=True, help='An HTTP method (repeatable; none: any).'),
        click.option('--data-format', type=click.Choice(['json', 'form', 'text']), default=None),
        click.option('--security', default=None, help='A Basic Auth definition; "" for none.'),
        click.option('--active/--inactive', 'is_active', default=None),
    ]):
        func = decorator(func)
    return func


def _channel_body(values: dict[str, Any]) -> dict[str, Any]:
    body = {k: v for k, v in values.items() if v is not None and k != 'methods'}
    if values.get('methods'):
        body['methods'] = [m.upper() for m in values['methods']]
    return body


@click.group()
def channel() -> None:
    """REST channels: list, show, create, edit, delete."""


@channel.command('list')
@json_option
@click.pass_context
def channel_list(ctx: click.Context, as_json: bool) -> None:
    """List REST channels."""
    answer = call(ctx, 'GET', '/admin/channels')
    items = [{**c, 'methods': ', '.join(c['methods']) or 'any'} for c in answer['channels']]
    rows(items, [('name', 'name'), ('url path', 'url_path'), ('methods', 'methods'), ('service', 'service'),
                  ('format', 'data_format'), ('security', 'security'), ('active', 'is_active'),
                  ('origin', 'origin')], as_json, answer, names=('name', 'url_path', 'service'))


@channel.command('show')
@click.argument('name')
@json_option
@click.pass_context
def channel_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One REST channel."""
    show(call(ctx, 'GET', f'/admin/channels/{quote_name(name)}')['channel'], as_json)


@channel.command('create')
@click.argument('name')
@_channel_options
@click.pass_context
def channel_create(ctx: click.Context, name: str, **values: Any) -> None:
    """Create a REST channel, e.g. create crm --service crm.customer.get --url-path /api/customer/{id}."""
    if not values.get('service') or not values.get('url_path'):
        raise click.UsageError('--service and --url-path are required')
    answer = call(ctx, 'POST', '/admin/channels', {'name': name, **_channel_body(values)})
    click.echo(f'created channel {name}: {answer["channel"]["url_path"]} -> {answer["channel"]["service"]}')


@channel.command('edit')
@click.argument('name')
@click.option('--name', 'new_name', default=None, help='Rename the channel.')
@_channel_options
@click.pass_context
def channel_edit(ctx: click.Context, name: str, new_name: str | None, **values: Any) -> None:
    """Change a REST channel."""
    body = _channel_body(values)
    if new_name:
        body['name'] = new_name
    if not body:
        raise click.UsageError('nothing to change')
    call(ctx, 'PATCH', f'/admin/channels/{quote_name(name)}', body)
    click.echo(f'changed channel {name}')


@channel.command('delete')
@click.argument('name')
@click.pass_context
def channel_delete(ctx: click.Context, name: str) -> None:
    """Delete a REST channel."""
    call(ctx, 'DELETE', f'/admin/channels/{quote_name(name)}')
    click.echo(f'deleted channel {name}')
