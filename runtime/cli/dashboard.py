"""``conduit dashboard ...``: the dashboard's signed-in sessions, through the admin API."""

from __future__ import annotations

import click

from runtime.cli.calls import call
from runtime.cli.output import confirm, json_option, rows

#: Roles a session may have (runtime.security.dashboard_sessions.ROLES, not imported: the CLI loads no server code).
ROLES = ('admin', 'viewer')


@click.group()
def dashboard() -> None:
    """Dashboard sessions: list them, end them."""


@dashboard.command('sessions')
@click.option('--limit', type=click.IntRange(1, 1000), default=None, help='Most sessions listed (newest first).')
@json_option
@click.pass_context
def dashboard_sessions(ctx: click.Context, limit: int | None, as_json: bool) -> None:
    """List the live dashboard sessions: who, role, address, since when, until when."""
    answer = call(ctx, 'GET', '/admin/dashboard/sessions' + (f'?limit={limit}' if limit else ''))
    rows(answer['sessions'], [('user', 'actor'), ('role', 'role'), ('client', 'client'),
                              ('signed in', 'created_at_iso'), ('last seen', 'last_seen_at_iso'),
                              ('ends', 'expires_at_iso')], as_json, answer, names=('actor',))
    if not as_json and answer['total'] > len(answer['sessions']):
        click.echo(f'{len(answer["sessions"])} of {answer["total"]} sessions shown')


@dashboard.command('end-sessions')
@click.option('--all', 'end_all', is_flag=True, help='End every session, of the admin and of the viewer.')
@click.option('--role', type=click.Choice(ROLES), default=None, help="End only this role's sessions.")
@click.option('--yes', is_flag=True, help='Do not ask for confirmation.')
@click.pass_context
def dashboard_end_sessions(ctx: click.Context, end_all: bool, role: str | None, yes: bool) -> None:
    """End dashboard sessions (--all, or --role): their users must sign in again. Asks first, unless --yes."""
    if end_all == (role is not None):
        raise click.UsageError('give --all, or --role admin|viewer')
    confirm('End every dashboard session?' if end_all else f'End every dashboard session of the {role}?', yes)
    answer = call(ctx, 'DELETE', '/admin/dashboard/sessions' + (f'?role={role}' if role else ''))
    click.echo(f'ended {answer["ended"]} dashboard session(s)')
