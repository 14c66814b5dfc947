"""``conduit topic|sub|queue|dlq|sec|channel ...`` and ``conduit publish``: the admin API from a shell.

Lists print as tables, single objects as two-column tables, and ``--json`` anywhere prints the
server's answer as it is, for scripts. Subscriptions and their queues are named by their numeric
id (``conduit sub list`` shows it); the sub_key is a secret and is printed once, by ``sub create``.
Passwords are prompted for (hidden, twice) unless given on standard input with ``--password-stdin``;
they are never taken from the command line, where ``ps`` and shell history would keep them.
"""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import quote, urlencode

import click

from runtime.cli_output import confirm, echo_json, json_option, rows, show
from runtime.errors import ConduitError


def _call(ctx: click.Context, method: str, path: str, body: Any = None) -> dict[str, Any]:
    from runtime.admin_client import for_cli
    try:
        return for_cli(ctx.obj).call(method, path, body)
    except ConduitError as e:
        raise click.ClickException(str(e)) from None


def _q(name: str) -> str:
    return quote(name, safe='')


def _assignments(values: tuple[str, ...], option: str) -> dict[str, Any]:
    """key=value pairs; a value is read as JSON when it is JSON (numbers, true, lists), else as text."""
    result: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition('=')
        if not sep or not key:
            raise click.BadParameter(f'{item!r} is not key=value', param_hint=option)
        try:
            result[key] = json.loads(raw)
        except json.JSONDecodeError:
            result[key] = raw
    return result


def _json_arg(value: str, what: str) -> Any:
    try:
        return json.loads(value)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f'not valid JSON: {e}', param_hint=what) from None


_as_json = json_option


# Topics


@click.group()
def topic() -> None:
    """Topics: list, show (runtime details), create, edit, delete."""


@topic.command('list')
@_as_json
@click.pass_context
def topic_list(ctx: click.Context, as_json: bool) -> None:
    """List topics with their depth and subscriptions."""
    answer = _call(ctx, 'GET', '/admin/topics')
    rows(answer['topics'], [('name', 'name'), ('active', 'is_active'), ('gd', 'has_gd'), ('depth', 'depth.gd'),
                             ('non-GD depth', 'depth.non_gd'), ('subs', 'subscriptions'), ('origin', 'origin')],
          as_json, answer)


@topic.command('show')
@click.argument('name')
@click.option('--last', type=click.IntRange(0, 100), default=10, show_default=True, help='Last publications.')
@_as_json
@click.pass_context
def topic_show(ctx: click.Context, name: str, last: int, as_json: bool) -> None:
    """A topic's attributes, depth, last publications and subscriptions with their queues."""
    answer = _call(ctx, 'GET', f'/admin/topics/{_q(name)}?last={last}')
    if as_json:
        echo_json(answer)
        return
    show({**answer['topic'], 'depth': answer['depth'], 'last_pub_time_iso': answer['last_pub_time_iso']}, False)
    if answer['last_publications']:
        rows(answer['last_publications'], [('last publications: msg_id', 'msg_id'), ('published', 'pub_time_iso'),
                                            ('priority', 'priority'), ('size', 'size'), ('publisher', 'publisher')],
              False, None, names=('msg_id', 'publisher'))
    if answer['subscriptions']:
        rows(_with_subscriber(answer['subscriptions']), _SUB_COLUMNS, False, None, names=_SUB_NAMES)


@topic.command('create')
@click.argument('name')
@click.option('--set', 'attrs', multiple=True, metavar='KEY=VALUE',
              help='A topic attribute, e.g. --set has_gd=false --set max_depth_gd=500 (repeatable).')
@click.pass_context
def topic_create(ctx: click.Context, name: str, attrs: tuple[str, ...]) -> None:
    """Create a topic."""
    answer = _call(ctx, 'POST', '/admin/topics', {'name': name, **_assignments(attrs, '--set')})
    click.echo(f'created topic {answer["topic"]["name"]}')


@topic.command('edit')
@click.argument('name')
@click.option('--set', 'attrs', multiple=True, metavar='KEY=VALUE', required=True,
              help='An attribute to change, e.g. --set is_active=false (repeatable).')
@click.pass_context
def topic_edit(ctx: click.Context, name: str, attrs: tuple[str, ...]) -> None:
    """Change attributes of a topic."""
    _call(ctx, 'PATCH', f'/admin/topics/{_q(name)}', _assignments(attrs, '--set'))
    click.echo(f'changed topic {name}')


@topic.command('delete')
@click.argument('name')
@click.confirmation_option(prompt='Delete the topic, the subscriptions to exactly it and the messages in it?')
@click.pass_context
def topic_delete(ctx: click.Context, name: str) -> None:
    """Delete a topic with its exact subscriptions and waiting messages."""
    answer = _call(ctx, 'DELETE', f'/admin/topics/{_q(name)}')
    click.echo(f'deleted topic {name} ({answer["subscriptions_deleted"]} subscription(s), '
               f'{answer["messages_deleted"]} waiting message(s))')


# Subscriptions

_SUB_COLUMNS = [('id', 'id'), ('topic', 'topic'), ('kind', 'kind'), ('subscriber', 'subscriber'),
                ('active', 'is_active'), ('depth', 'queue_depth'), ('oldest', 'oldest_message.pub_time_iso'),
                ('dead', 'dead_letters')]
#: Columns of subscription tables users copy from: never shortened.
_SUB_NAMES = ('id', 'topic', 'subscriber')


def _with_subscriber(subs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Subscriptions with one 'subscriber' column: the service, security definition or push URL."""
    return [{**s, 'subscriber': s.get('service') or s.get('security') or s.get('push_url') or None} for s in subs]


@click.group()
def sub() -> None:
    """Subscriptions: list, show, create, edit, pause, resume, delete."""


@sub.command('list')
@click.option('--topic', 'topic_name', default=None, help='Only those whose topic or pattern matches this topic.')
@click.option('--kind', type=click.Choice(['service', 'pull', 'rest_push']), default=None)
@_as_json
@click.pass_context
def sub_list(ctx: click.Context, topic_name: str | None, kind: str | None, as_json: bool) -> None:
    """List subscriptions with their queues."""
    params = {k: v for k, v in (('topic', topic_name), ('kind', kind)) if v}
    answer = _call(ctx, 'GET', '/admin/subscriptions' + (f'?{urlencode(params)}' if params else ''))
    rows(_with_subscriber(answer['subscriptions']), _SUB_COLUMNS, as_json, answer, names=_SUB_NAMES)


@sub.command('show')
@click.argument('sub_id', type=int)
@_as_json
@click.pass_context
def sub_show(ctx: click.Context, sub_id: int, as_json: bool) -> None:
    """One subscription with its options and queue."""
    show(_call(ctx, 'GET', f'/admin/subscriptions/{sub_id}')['subscription'], as_json)


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
                            'push_url': push_url, 'options': _assignments(options, '--option')}
    if paused:
        body['is_active'] = False
    answer = _call(ctx, 'POST', '/admin/subscriptions', body)
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
        body['options'] = _assignments(options, '--option')
    if push_url is not None:
        body['push_url'] = push_url
    if security is not None:
        body['security'] = security
    if not body:
        raise click.UsageError('nothing to change: give --option, --push-url or --security')
    _call(ctx, 'PATCH', f'/admin/subscriptions/{sub_id}', body)
    click.echo(f'changed subscription {sub_id}')


@sub.command('pause')
@click.argument('sub_id', type=int)
@click.pass_context
def sub_pause(ctx: click.Context, sub_id: int) -> None:
    """Stop delivering (messages keep queueing)."""
    _call(ctx, 'POST', f'/admin/subscriptions/{sub_id}/pause')
    click.echo(f'paused subscription {sub_id}')


@sub.command('resume')
@click.argument('sub_id', type=int)
@click.pass_context
def sub_resume(ctx: click.Context, sub_id: int) -> None:
    """Deliver again."""
    _call(ctx, 'POST', f'/admin/subscriptions/{sub_id}/resume')
    click.echo(f'resumed subscription {sub_id}')


@sub.command('delete')
@click.argument('sub_id', type=int)
@click.confirmation_option(prompt='Delete the subscription with its queue and dead letters?')
@click.pass_context
def sub_delete(ctx: click.Context, sub_id: int) -> None:
    """Unsubscribe: remove a subscription with its queue and dead letters."""
    _call(ctx, 'DELETE', f'/admin/subscriptions/{sub_id}')
    click.echo(f'deleted subscription {sub_id}')


# Queues and dead letters

_MSG_COLUMNS = [('msg_id', 'msg_id'), ('topic', 'topic_name'), ('prio', 'priority'), ('published', 'pub_time_iso'),
                ('attempts', 'delivery_count'), ('data', 'data_preview'), ('last error', 'last_error')]
_MSG_NAMES = ('msg_id', 'topic_name')


def _edit_body(data: str | None, priority: int | None, expiration: float | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if data is not None:
        body['data'] = _json_arg(data, '--data')
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
@_as_json
@click.pass_context
def queue_list(ctx: click.Context, as_json: bool) -> None:
    """Every queue: depth, oldest message, dead letters."""
    answer = _call(ctx, 'GET', '/admin/queues')
    rows(_with_subscriber(answer['queues']), _SUB_COLUMNS, as_json, answer, names=_SUB_NAMES)


@queue.command('show')
@click.argument('sub_id', type=int)
@_as_json
@click.pass_context
def queue_show(ctx: click.Context, sub_id: int, as_json: bool) -> None:
    """One queue's depth, oldest message and dead letters."""
    show(_call(ctx, 'GET', f'/admin/queues/{sub_id}')['queue'], as_json)


@queue.command('browse')
@click.argument('sub_id', type=int)
@_page_options
@_as_json
@click.pass_context
def queue_browse(ctx: click.Context, sub_id: int, limit: int, offset: int, as_json: bool) -> None:
    """Messages of a queue in delivery order."""
    answer = _call(ctx, 'GET', f'/admin/queues/{sub_id}/messages?limit={limit}&offset={offset}')
    rows(answer['messages'], _MSG_COLUMNS, as_json, answer, names=_MSG_NAMES)
    if not as_json and answer['next_offset'] is not None:
        click.echo(f'{answer["depth"]} in all; next page: --offset {answer["next_offset"]}')


@queue.command('get')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@_as_json
@click.pass_context
def queue_get(ctx: click.Context, sub_id: int, msg_id: str, as_json: bool) -> None:
    """One queued message with its full data."""
    show(_call(ctx, 'GET', f'/admin/queues/{sub_id}/messages/{_q(msg_id)}')['message'], as_json)


@queue.command('edit')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@_edit_options
@click.pass_context
def queue_edit(ctx: click.Context, sub_id: int, msg_id: str, data: str | None, priority: int | None,
               expiration: float | None) -> None:
    """Edit a queued message in place; the next delivery sees it."""
    answer = _call(ctx, 'PATCH', f'/admin/queues/{sub_id}/messages/{_q(msg_id)}',
                   _edit_body(data, priority, expiration))
    shared = f' (stored once for {answer["held_by"]} queues: all see it)' if answer['held_by'] > 1 else ''
    click.echo(f'edited {msg_id}{shared}')


@queue.command('delete')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@click.pass_context
def queue_delete(ctx: click.Context, sub_id: int, msg_id: str) -> None:
    """Remove one message from a queue."""
    _call(ctx, 'DELETE', f'/admin/queues/{sub_id}/messages/{_q(msg_id)}')
    click.echo(f'deleted {msg_id}')


@queue.command('purge')
@click.argument('sub_id', type=int)
@click.confirmation_option(prompt='Remove every message waiting in the queue?')
@click.pass_context
def queue_purge(ctx: click.Context, sub_id: int) -> None:
    """Remove every message of a queue."""
    answer = _call(ctx, 'DELETE', f'/admin/queues/{sub_id}/messages')
    click.echo(f'purged {answer["deleted"]} message(s)')


@click.group()
def dlq() -> None:
    """Dead letters: list, show, edit, redrive, delete."""


@dlq.command('list')
@click.argument('sub_id', type=int)
@_page_options
@_as_json
@click.pass_context
def dlq_list(ctx: click.Context, sub_id: int, limit: int, offset: int, as_json: bool) -> None:
    """A subscription's dead letters, oldest first."""
    answer = _call(ctx, 'GET', f'/admin/queues/{sub_id}/dead-letters?limit={limit}&offset={offset}')
    rows(answer['dead_letters'], [*_MSG_COLUMNS[:5], ('reason', 'reason'), ('dead since', 'dead_time_iso'),
                                   ('last error', 'last_error')], as_json, answer, names=_MSG_NAMES)


@dlq.command('show')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@_as_json
@click.pass_context
def dlq_show(ctx: click.Context, sub_id: int, msg_id: str, as_json: bool) -> None:
    """One dead letter with its full data and last error."""
    show(_call(ctx, 'GET', f'/admin/queues/{sub_id}/dead-letters/{_q(msg_id)}')['dead_letter'], as_json)


@dlq.command('edit')
@click.argument('sub_id', type=int)
@click.argument('msg_id')
@_edit_options
@click.pass_context
def dlq_edit(ctx: click.Context, sub_id: int, msg_id: str, data: str | None, priority: int | None,
             expiration: float | None) -> None:
    """Edit a dead letter before re-driving it."""
    _call(ctx, 'PATCH', f'/admin/queues/{sub_id}/dead-letters/{_q(msg_id)}', _edit_body(data, priority, expiration))
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
    answer = _call(ctx, 'POST', f'/admin/queues/{sub_id}/redrive', body)
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
    path = f'/admin/queues/{sub_id}/dead-letters' + (f'/{_q(msg_id)}' if msg_id else '')
    answer = _call(ctx, 'DELETE', path)
    click.echo(f'deleted {answer["deleted"]}' + (' dead letter(s)' if delete_all else ''))


# Publishing


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
    body: dict[str, Any] = {'topic': topic_name, 'data': data if text else _json_arg(data, 'DATA')}
    for key, value in (('priority', priority), ('expiration', expiration), ('correl_id', correl_id),
                       ('has_gd', has_gd), ('service', service), ('security', security)):
        if value is not None:
            body[key] = value
    answer = _call(ctx, 'POST', '/admin/publish', body)
    note = ' (past the topic\'s max depth: written to its overflow log)' if answer['overflowed'] else ''
    click.echo(f'{answer["msg_id"]} -> {answer["topic_name"]}{note}')


# Security definitions


def _read_password(password_stdin: bool) -> str:
    if password_stdin:
        password = sys.stdin.readline().rstrip('\r\n')
        if not password:
            raise click.UsageError('no password on standard input')
        return password
    return click.prompt('Password', hide_input=True, confirmation_prompt=True)


@click.group()
def sec() -> None:
    """Basic Auth security definitions: list, show, create, edit, passwd, permissions, delete."""


@sec.command('list')
@_as_json
@click.pass_context
def sec_list(ctx: click.Context, as_json: bool) -> None:
    """List security definitions (never their passwords)."""
    answer = _call(ctx, 'GET', '/admin/security')
    rows(answer['security'], [('name', 'name'), ('username', 'username'), ('realm', 'realm'),
                               ('active', 'is_active'), ('origin', 'origin')], as_json, answer,
          names=('name', 'username'))


@sec.command('show')
@click.argument('name')
@_as_json
@click.pass_context
def sec_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One security definition."""
    show(_call(ctx, 'GET', f'/admin/security/{_q(name)}')['security'], as_json)


@sec.command('create')
@click.argument('name')
@click.option('--username', required=True)
@click.option('--realm', default=None)
@click.option('--inactive', is_flag=True, help='Create it inactive.')
@click.option('--password-stdin', is_flag=True, help='Read the password from standard input instead of a prompt.')
@click.pass_context
def sec_create(ctx: click.Context, name: str, username: str, realm: str | None, inactive: bool,
               password_stdin: bool) -> None:
    """Create a Basic Auth definition (the password is prompted for)."""
    body: dict[str, Any] = {'name': name, 'username': username, 'password': _read_password(password_stdin)}
    if realm is not None:
        body['realm'] = realm
    if inactive:
        body['is_active'] = False
    _call(ctx, 'POST', '/admin/security', body)
    click.echo(f'created security definition {name}')


@sec.command('edit')
@click.argument('name')
@click.option('--username', default=None)
@click.option('--realm', default=None)
@click.option('--active/--inactive', 'is_active', default=None)
@click.pass_context
def sec_edit(ctx: click.Context, name: str, username: str | None, realm: str | None, is_active: bool | None) -> None:
    """Change username, realm or whether it is active."""
    body = {k: v for k, v in (('username', username), ('realm', realm), ('is_active', is_active)) if v is not None}
    if not body:
        raise click.UsageError('nothing to change: give --username, --realm or --active/--inactive')
    _call(ctx, 'PATCH', f'/admin/security/{_q(name)}', body)
    click.echo(f'changed security definition {name}')


@sec.command('passwd')
@click.argument('name')
@click.option('--password-stdin', is_flag=True, help='Read the password from standard input instead of a prompt.')
@click.pass_context
def sec_passwd(ctx: click.Context, name: str, password_stdin: bool) -> None:
    """Change a definition's password (every worker uses it within the sync interval)."""
    _call(ctx, 'POST', f'/admin/security/{_q(name)}/password', {'password': _read_password(password_stdin)})
    click.echo(f'changed the password of {name}')


@sec.command('permissions')
@click.argument('name')
@click.option('--pub', multiple=True, help='Replace: a topic or pattern it may publish to (repeatable).')
@click.option('--sub', 'sub_', multiple=True, help='Replace: a topic or pattern it may subscribe to (repeatable).')
@_as_json
@click.pass_context
def sec_permissions(ctx: click.Context, name: str, pub: tuple[str, ...], sub_: tuple[str, ...],
                    as_json: bool) -> None:
    """Show a definition's pub/sub permissions, or replace them with --pub/--sub."""
    path = f'/admin/security/{_q(name)}/permissions'
    if pub or sub_:
        answer = _call(ctx, 'PUT', path, {'pub': list(pub), 'sub': list(sub_)})
    else:
        answer = _call(ctx, 'GET', path)
    show(answer['permissions'], as_json)


@sec.command('delete')
@click.argument('name')
@click.pass_context
def sec_delete(ctx: click.Context, name: str) -> None:
    """Delete a definition (refused while a channel or subscription uses it)."""
    _call(ctx, 'DELETE', f'/admin/security/{_q(name)}')
    click.echo(f'deleted security definition {name}')


# Channels


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
@_as_json
@click.pass_context
def channel_list(ctx: click.Context, as_json: bool) -> None:
    """List REST channels."""
    answer = _call(ctx, 'GET', '/admin/channels')
    items = [{**c, 'methods': ', '.join(c['methods']) or 'any'} for c in answer['channels']]
    rows(items, [('name', 'name'), ('url path', 'url_path'), ('methods', 'methods'), ('service', 'service'),
                  ('format', 'data_format'), ('security', 'security'), ('active', 'is_active'),
                  ('origin', 'origin')], as_json, answer, names=('name', 'url_path', 'service'))


@channel.command('show')
@click.argument('name')
@_as_json
@click.pass_context
def channel_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One REST channel."""
    show(_call(ctx, 'GET', f'/admin/channels/{_q(name)}')['channel'], as_json)


@channel.command('create')
@click.argument('name')
@_channel_options
@click.pass_context
def channel_create(ctx: click.Context, name: str, **values: Any) -> None:
    """Create a REST channel, e.g. create crm --service crm.customer.get --url-path /api/customer/{id}."""
    if not values.get('service') or not values.get('url_path'):
        raise click.UsageError('--service and --url-path are required')
    answer = _call(ctx, 'POST', '/admin/channels', {'name': name, **_channel_body(values)})
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
    _call(ctx, 'PATCH', f'/admin/channels/{_q(name)}', body)
    click.echo(f'changed channel {name}')


@channel.command('delete')
@click.argument('name')
@click.pass_context
def channel_delete(ctx: click.Context, name: str) -> None:
    """Delete a REST channel."""
    _call(ctx, 'DELETE', f'/admin/channels/{_q(name)}')
    click.echo(f'deleted channel {name}')


#: Every command of this module, for runtime.cli.
COMMANDS = (topic, sub, queue, dlq, sec, channel, publish)
