"""``conduit invoke|deploy|undeploy|services``: services of the running server, through its admin API."""

from __future__ import annotations

import json
from pathlib import Path

import click

from runtime.cli.calls import call, quote_name
from runtime.cli.output import echo_json, json_option, print_values


@click.command()
@click.argument('name')
@click.option('--data', default=None, help='JSON payload.')
@click.option('--timeout', type=float, default=None, help='Seconds before the service is stopped.')
@click.pass_context
def invoke(ctx: click.Context, name: str, data: str | None, timeout: float | None) -> None:
    """Invoke a service on the running server and print its response."""
    try:
        payload = json.loads(data) if data is not None else None
    except json.JSONDecodeError as e:
        raise click.ClickException(f'--data is not valid JSON: {e}') from None
    path = f'/admin/services/{quote_name(name)}/invoke' + (f'?timeout={timeout}' if timeout else '')
    result = call(ctx, 'POST', path, payload)
    click.echo(json.dumps(result['response'], indent=2, default=str))


@click.command()
@click.argument('files', nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def deploy(ctx: click.Context, files: tuple[Path, ...]) -> None:
    """Deploy service modules to every worker of the running server (undeployed services of them come back).

    Several files are deployed together, all or none: a helper and the modules that import it.
    """
    modules = []
    for file in files:
        try:
            modules.append({'file_name': file.name, 'source': file.read_text(encoding='utf-8')})
        except (OSError, UnicodeDecodeError) as e:
            raise click.ClickException(f'cannot read {file}: {e}') from None
    result = call(ctx, 'POST', '/admin/deploy', {'modules': modules})
    click.echo(f"deployed: {', '.join(result['services']) or 'no services'}")
    if result.get('reloaded'):
        click.echo(f"reloaded (they import a deployed module): {', '.join(result['reloaded'])}")


@click.command()
@click.argument('name')
@click.option('--force', is_flag=True, help='Undeploy even though channels, jobs or subscriptions use it.')
@click.pass_context
def undeploy(ctx: click.Context, name: str, force: bool) -> None:
    """Remove a service from every worker of the running server (refused while others use it)."""
    answer = call(ctx, 'DELETE', f'/admin/services/{quote_name(name)}' + ('?force=true' if force else ''))
    click.echo(f'undeployed: {name}')
    for user in answer.get('now_pointing_nowhere') or []:
        click.echo(f'  now pointing nowhere: {user}', err=True)


@click.command()
@json_option
@click.pass_context
def services(ctx: click.Context, as_json: bool) -> None:
    """List deployed services."""
    result = call(ctx, 'GET', '/admin/services')
    if as_json:
        echo_json(result)
        return
    values = [(s['name'], s['module'], ', '.join(s['input'] + [f'-{f}' for f in s['input_optional']]),
               s['deployed_at']) for s in result['services']]
    # A service's name is what users copy from the list: never shorten it, shorten the rest.
    print_values(('name', 'module', 'input', 'deployed at'), values)
