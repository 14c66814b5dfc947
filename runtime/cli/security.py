"""``conduit sec ...``: Basic Auth security definitions, through the admin API.

Passwords are prompted for (hidden, twice) unless given on standard input with ``--password-stdin``;
they are never taken from the command line, where ``ps`` and shell history would keep them.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from runtime.cli.calls import call, quote_name
from runtime.cli.output import json_option, rows, show


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
@json_option
@click.pass_context
def sec_list(ctx: click.Context, as_json: bool) -> None:
    """List security definitions (never their passwords)."""
    answer = call(ctx, 'GET', '/admin/security')
    rows(answer['security'], [('name', 'name'), ('username', 'username'), ('realm', 'realm'),
                               ('active', 'is_active'), ('origin', 'origin')], as_json, answer,
          names=('name', 'username'))


@sec.command('show')
@click.argument('name')
@json_option
@click.pass_context
def sec_show(ctx: click.Context, name: str, as_json: bool) -> None:
    """One security definition."""
    show(call(ctx, 'GET', f'/admin/security/{quote_name(name)}')['security'], as_json)


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
    call(ctx, 'POST', '/admin/security', body)
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
    call(ctx, 'PATCH', f'/admin/security/{quote_name(name)}', body)
    click.echo(f'changed security definition {name}')


@sec.command('passwd')
@click.argument('name')
@click.option('--password-stdin', is_flag=True, help='Read the password from standard input instead of a prompt.')
@click.pass_context
def sec_passwd(ctx: click.Context, name: str, password_stdin: bool) -> None:
    """Change a definition's password (every worker uses it within the sync interval)."""
    call(ctx, 'POST', f'/admin/security/{quote_name(name)}/password', {'password': _read_password(password_stdin)})
    click.echo(f'changed the password of {name}')


@sec.command('permissions')
@click.argument('name')
@click.option('--pub', multiple=True, help='Replace: a topic or pattern it may publish to (repeatable).')
@click.option('--sub', 'sub_', multiple=True, help='Replace: a topic or pattern it may subscribe to (repeatable).')
@json_option
@click.pass_context
def sec_permissions(ctx: click.Context, name: str, pub: tuple[str, ...], sub_: tuple[str, ...],
                    as_json: bool) -> None:
    """Show a definition's pub/sub permissions, or replace them with --pub/--sub."""
    path = f'/admin/security/{quote_name(name)}/permissions'
    if pub or sub_:
        answer = call(ctx, 'PUT', path, {'pub': list(pub), 'sub': list(sub_)})
    else:
        answer = call(ctx, 'GET', path)
    show(answer['permissions'], as_json)


@sec.command('delete')
@click.argument('name')
@click.pass_context
def sec_delete(ctx: click.Context, name: str) -> None:
    """Delete a definition (refused while a channel or subscription uses it)."""
    call(ctx, 'DELETE', f'/admin/security/{quote_name(name)}')
    click.echo(f'deleted security definition {name}')
