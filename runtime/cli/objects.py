"""``conduit objects apply|detach``, ``conduit audit``, and ``--detach`` on the commands that edit objects.

``objects apply [FILE...] [--dry-run]`` applies object files straight to the database (no server
needed; a running one picks the changes up through its sync keys). Without FILE it applies the
configured directory, as ``conduit start`` does; with FILEs, exactly those files, and it deletes
only objects an earlier application of those files made. ``--dry-run`` prints the same list of
changes (create, update, delete, skip with the reason) and changes nothing.

The edit and delete commands of ``conduit channel``, ``sec``, ``topic``, ``sub`` and ``job`` are
refused by the server for an object an object file declares; ``--detach`` (added here to each of
them, so that their own modules stay about output) first detaches the object from its file.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import click
from rich.table import Table

from runtime.cli.calls import call
from runtime.cli.output import print_table
from runtime.errors import ConduitError


@click.group()
def objects() -> None:
    """Object files: apply them (or show what applying would change), detach an object from its file."""


@objects.command('apply')
@click.argument('files', nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option('--dry-run', is_flag=True, help='Show what would be created, updated and deleted; change nothing.')
@click.option('--demo', is_flag=True, help='With no FILE: the demo objects (config/demo) too, as start --demo.')
@click.option('--json', 'as_json', is_flag=True, help='Print the changes as JSON.')
@click.pass_context
def objects_apply(ctx: click.Context, files: tuple[Path, ...], dry_run: bool, demo: bool, as_json: bool) -> None:
    """Apply object files (default: the configured directory) to the database."""
    from sqlalchemy.exc import SQLAlchemyError

    from runtime.core import idle_in_transaction_secs, make_objects_applier
    from runtime.db.engine import make_engine
    from runtime.db.migrate import upgrade
    settings = ctx.obj['settings']
    engine = make_engine(settings.database_url, pool_size=1, dead_client_secs=settings.database.dead_client_secs,
                         idle_in_transaction_secs=idle_in_transaction_secs(settings))
    try:
        applier = make_objects_applier(settings, engine, demo, list(files) if files else None)
        applier.actor = f'conduit objects apply ({getpass.getuser()})'
        if dry_run:
            changes = applier.plan()
        else:
            upgrade(engine)
            applier.apply()
            changes = applier.last_changes
    except ConduitError as e:
        raise click.ClickException(str(e)) from None
    except SQLAlchemyError as e:
        raise click.ClickException(f'the database cannot be read ({type(e).__name__}); has the server been '
                                   'started once against it?') from None
    finally:
        engine.dispose()
    if as_json:
        click.echo(json.dumps({'dry_run': dry_run, 'changes': [c.as_dict() for c in changes]}, indent=2))
        return
    if not changes:
        click.echo('nothing to change' if dry_run else 'nothing changed')
        return
    table = Table('action', 'kind', 'name', 'file', 'detail')
    table.columns[2].no_wrap = True
    for c in changes:
        table.add_row(c.action, c.kind, c.name, c.file, c.detail)
    print_table(table)
    counts = {a: sum(1 for c in changes if c.action == a) for a in ('create', 'update', 'delete', 'skip')}
    summary = ', '.join(f'{n} to {a}' if dry_run else f'{n} {a}' for a, n in counts.items() if n)
    click.echo(('dry run, nothing changed: ' if dry_run else 'applied: ') + summary)


@objects.command('detach')
@click.argument('kind', type=click.Choice(['security', 'channel', 'topic', 'subscription', 'permission', 'job',
                                           'file_channel']))
@click.argument('name')
@click.pass_context
def objects_detach(ctx: click.Context, kind: str, name: str) -> None:
    """Detach an object from the file that declared it: the CLI and admin API may then change it."""
    answer = call(ctx, 'POST', '/admin/detach', {'kind': kind, 'name': name})
    if answer.get('detached'):
        click.echo(f"detached: {kind} {name!r} is no longer managed by {answer['file']}")
    else:
        click.echo(f'{kind} {name!r}: {answer.get("reason", "not detached")}')


def add_detach_options(groups: dict[str, click.Group]) -> None:
    """Give the edit and delete commands of objects a --detach flag (detach first, then do the command)."""
    targets = {
        ('channel', 'edit'): ('channel', 'name'), ('channel', 'delete'): ('channel', 'name'),
        ('sec', 'edit'): ('security', 'name'), ('sec', 'delete'): ('security', 'name'),
        ('sec', 'passwd'): ('security', 'name'), ('sec', 'permissions'): ('permission', 'name'),
        ('topic', 'edit'): ('topic', 'name'), ('topic', 'delete'): ('topic', 'name'),
        ('sub', 'edit'): ('subscription', 'sub_id'), ('sub', 'delete'): ('subscription', 'sub_id'),
        ('sub', 'pause'): ('subscription', 'sub_id'), ('sub', 'resume'): ('subscription', 'sub_id'),
        ('job', 'edit'): ('job', 'name'), ('job', 'delete'): ('job', 'name'),
        ('job', 'pause'): ('job', 'name'), ('job', 'resume'): ('job', 'name'),
        ('file-channel', 'edit'): ('file_channel', 'name'), ('file-channel', 'delete'): ('file_channel', 'name'),
    }
    for (group_name, command_name), (kind, argument) in targets.items():
        group = groups.get(group_name)
        command = group.commands.get(command_name) if group is not None else None
        if command is None or command.callback is None or any(p.name == 'detach' for p in command.params):
            continue
        command.params.append(click.Option(['--detach'], is_flag=True, help=(
            'First detach the object from the object file that declares it (the file then no longer manages it).')))
        command.callback = _detaching(command.callback, kind, argument)


def _detaching(callback: Callable[..., Any], kind: str, argument: str) -> Callable[..., Any]:
    def run(*args: Any, detach: bool = False, **kwargs: Any) -> Any:
        if detach:
            ctx = click.get_current_context()
            answer = call(ctx, 'POST', '/admin/detach', {'kind': kind, 'name': str(kwargs[argument])})
            if answer.get('detached'):
                click.echo(f"detached from {answer['file']}", err=True)
        return callback(*args, **kwargs)
    run.__wrapped__ = callback  # type: ignore[attr-defined]
    run.__doc__ = callback.__doc__
    return run


@click.command('audit')
@click.option('--kind', help='Only this kind of object (channel, security, topic, subscription, job, ...).')
@click.option('--name', help='Only this object.')
@click.option('--actor', help='Only this admin user.')
@click.option('--action', help='Only this action (create, update, delete, detach, ...).')
@click.option('--source', type=click.Choice(['api', 'cli', 'dashboard', 'files']),
              help='Only changes made through this: the admin API, the CLI, the dashboard or object files.')
@click.option('--limit', type=click.IntRange(1, 1000), default=50, show_default=True)
@click.option('--offset', type=click.IntRange(0), default=0)
@click.option('--json', 'as_json', is_flag=True, help="Print the server's JSON answer (with before and after).")
@click.pass_context
def audit(ctx: click.Context, kind: str | None, name: str | None, actor: str | None, action: str | None,
          source: str | None, limit: int, offset: int, as_json: bool) -> None:
    """The audit log of admin changes, newest first."""
    query = {k: v for k, v in (('kind', kind), ('name', name), ('actor', actor), ('action', action),
                                ('source', source), ('limit', limit), ('offset', offset)) if v is not None}
    answer = call(ctx, 'GET', '/admin/audit?' + urlencode(query))
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    table = Table('time', 'actor', 'source', 'action', 'kind', 'name', 'changed')
    for e in answer['entries']:
        table.add_row(_short(e['at']), e['actor'], e.get('source', ''), e['action'], e['kind'], e['name'],
                      _changed(e))
    print_table(table)
    shown = len(answer['entries'])
    click.echo(f"{shown} of {answer['total']} entries" + (f' (from {offset + 1})' if offset else ''))


def _short(iso: str) -> str:
    return datetime.fromisoformat(iso).strftime('%Y-%m-%d %H:%M:%S')


def _changed(entry: dict[str, Any]) -> str:
    """The fields that differ between before and after."""
    before, after = entry.get('before') or {}, entry.get('after') or {}
    if not before or not after:
        return ''
    return ', '.join(sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)))
