"""``conduit topic ...`` and ``conduit publish``: topics and publishing, through the admin API."""

from __future__ import annotations

from typing import Any

import click

from runtime.cli.args import assignments, json_arg
from runtime.cli.calls import call, quote_name
from runtime.cli.columns import SUB_COLUMNS, SUB_NAMES, with_subscriber
from runtime.cli.output import echo_json, json_option, rows, show


@click.group()
def topic() -> None:
    """Topics: list, show (runtime details), create, edit, delete."""


@topic.command('list')
@json_option
@click.pass_context
def topic_list(ctx: click.Context, as_json: bool) -> None:
    """List topics with their depth and subscriptions."""
    answer = call(ctx, 'GET', '/admin/topics')
    rows(answer['topics'], [('name', 'name'), ('active', 'is_active'), ('gd', 'has_gd'), ('depth', 'depth.gd'),
                             ('non-GD depth', 'depth.non_gd'), ('subs', 'subscriptions'), ('origin', 'origin')],
          as_json, answer)


@topic.command('show')
@click.argument('name')
@click.option('--last', type=click.IntRange(0, 100), default=10, show_default=True, help='Last publications.')
@json_option
@click.pass_context
def topic_show(ctx: click.Context, name: str, last: int, as_json: bool) -> None:
    """A topic's attributes, depth, last publications and subscriptions with their queues."""
    answer = call(ctx, 'GET', f'/admin/topics/{quote_name(name)}?last={last}')
    if as_json:
        echo_json(answer)
        return
    show({**answer['topic'], 'depth': answer['depth'], 'last_pub_time_iso': answer['last_pub_time_iso']}, False)
    if answer['last_publications']:
        rows(answer['last_publications'], [('last publications: msg_id', 'msg_id'), ('published', 'pub_time_iso'),
                                            ('priority', 'priority'), ('size', 'size'), ('publisher', 'publisher')],
              False, None, names=('msg_id', 'publisher'))
    if answer['subscriptions']:
        rows(with_subscriber(answer['subscriptions']), SUB_COLUMNS, False, None, names=SUB_NAMES)


@topic.command('create')
@click.argument('name')
@click.option('--set', 'attrs', multiple=True, metavar='KEY=VALUE',
              help='A topic attribute, e.g. --set has_gd=false --set max_depth_gd=500 (repeatable).')
@click.pass_context
def topic_create(ctx: click.Context, name: str, attrs: tuple[str, ...]) -> None:
    """Create a topic."""
    answer = call(ctx, 'POST', '/admin/topics', {'name': name, **assignments(attrs, '--set')})
    click.echo(f'created topic {answer["topic"]["name"]}')


@topic.command('edit')
@click.argument('name')
@click.option('--set', 'attrs', multiple=True, metavar='KEY=VALUE', required=True,
              help='An attribute to change, e.g. --set is_active=false (repeatable).')
@click.pass_context
def topic_edit(ctx: click.Context, name: str, attrs: tuple[str, ...]) -> None:
    """Change attributes of a topic."""
    call(ctx, 'PATCH', f'/admin/topics/{quote_name(name)}', assignments(attrs, '--set'))
    click.echo(f'changed topic {name}')


@topic.command('delete')
@click.argument('name')
@click.confirmation_option(prompt='Delete the topic, the subscriptions to exactly it and the messages in it?')
@click.pass_context
def topic_delete(ctx: click.Context, name: str) -> None:
    """Delete a topic with its exact subscriptions and waiting messages."""
    answer = call(ctx, 'DELETE', f'/admin/topics/{quote_name(name)}')
    click.echo(f'deleted topic {name} ({answer["subscriptions_deleted"]} subscription(s), '
               f'{answer["messages_deleted"]} waiting message(s))')


@click.command()
@click.argument('topic_name')
@click.argument('data')
@click.option('--text', is_flag=True, help='Send DATA as text, not JSON.')
@click.option('--priority', type=click.IntRange(0, 9), default=None)
@click.option('--expiration', type=click.FloatRange(min=0, min_open=True), default=None, help='Seconds.')
@click.option('--correl-id', default=None)
@click.option('--gd/--no-gd', 'has_gd', default=None, help="Guaranteed delivery (default: the topic's).")
@click.option('--as-service', 'service', default=None, help='Publish on behalf of this service.')
@click.option('--as-security', 'security', default=None, help='Publish on behalf of this security definition.')
@click.pass_context
def publish(ctx: click.Context, topic_name: str, data: str, text: bool, priority: int | None,
            expiration: float | None, correl_id: str | None, has_gd: bool | None, service: str | None,
            security: str | None) -> None:
    """Publish DATA (JSON, or text with --text) to a topic or a service."""
    body: dict[str, Any] = {'topic': topic_name, 'data': data if text else json_arg(data, 'DATA')}
    for key, value in (('priority', priority), ('expiration', expiration), ('correl_id', correl_id),
                       ('has_gd', has_gd), ('service', service), ('security', security)):
        if value is not None:
            body[key] = value
    answer = call(ctx, 'POST', '/admin/publish', body)
    note = ' (past the topic\'s max depth: written to its overflow log)' if answer['overflowed'] else ''
    click.echo(f'{answer["msg_id"]} -> {answer["topic_name"]}{note}')
