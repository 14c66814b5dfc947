"""The ``conduit`` command line: start and stop the server, and talk to its admin API."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click

from runtime.cli_admin import COMMANDS as ADMIN_COMMANDS
from runtime.cli_jobs import job
from runtime.cli_objects import add_detach_options, audit, objects
from runtime.cli_output import echo_json, json_option, print_values
from runtime.cli_spark import spark
from runtime.config import CONFIG_ENV, URL_ENV, Settings, load_settings, unknown_env_vars
from runtime.errors import ConduitError


def _settings(ctx: click.Context) -> Settings:
    return ctx.obj['settings']


def _client(ctx: click.Context) -> Any:
    from runtime.admin_client import for_cli
    return for_cli(ctx.obj)


@click.group()
@click.option('--config', 'config_path', type=click.Path(dir_okay=False), envvar=CONFIG_ENV,
              help='server.toml to use (default: config/server.toml here or in the nearest parent directory).')
@click.option('--url', envvar=URL_ENV, default=None, metavar='URL',
              help="The server's URL, e.g. http://10.0.0.5:17010 (default: from server.toml's [server] bind).")
@click.pass_context
def main(ctx: click.Context, config_path: str | None, url: str | None) -> None:
    """Conduit: services and a durable publish/subscribe broker."""
    try:
        settings = load_settings(config_path)
    except ConduitError as e:
        raise click.ClickException(str(e)) from None
    if url and not url.startswith(('http://', 'https://')):
        raise click.BadParameter(f'{url!r} is not an http:// or https:// URL', param_hint='--url')
    ctx.obj = {'settings': settings, 'url': url}
    for var, guess in unknown_env_vars(settings):
        # A look-alike (CONDUIT_PORT, a typo) would otherwise be ignored without a word.
        hint = f'; did you mean {guess}?' if guess else ''
        click.echo(f'warning: environment variable {var} is not a Conduit setting and is ignored{hint}', err=True)


@main.command()
@click.option('--workers', type=click.IntRange(1, 64), help='Number of gunicorn workers.')
@click.option('--bind', help='host:port to listen on.')
@click.option('--demo', is_flag=True, help='Also deploy the demo services (services/demo) and apply the demo objects '
                                           '(config/demo), and print what to try.')
@click.pass_context
def start(ctx: click.Context, workers: int | None, bind: str | None, demo: bool) -> None:
    """Run the server in the foreground."""
    settings = _settings(ctx)
    if workers:
        settings.server.workers = workers
    if bind:
        settings.server.bind = bind
    logging.basicConfig(level=settings.logging.level.upper(), format=settings.logging.format)
    logging.getLogger('alembic').setLevel(logging.WARNING)
    # Patched here, before the server stack imports ssl: a worker patching after the fork warned each start.
    from gevent import monkey
    monkey.patch_all()
    from runtime.admin_client import base_url
    from runtime.server import run
    url = base_url(settings)
    click.echo(f'Conduit on {url} ({settings.server.workers} worker(s), '
               f'database {_without_password(settings.database.url)})')
    click.echo(f'Drop service modules into {settings.path(settings.hot_deploy.dir)}; admin password in '
               f'{settings.path(settings.admin.password_file)}')
    if demo:
        # The commands of the README's quick start, so that its printed answers apply.
        conduit = _program()
        click.echo('Try the demo (README.md, "Quick start", shows the answers):\n'
                   f"  curl -s -u demo:demo-password -X POST {url}/api/crm/customer "
                   "-d '{\"name\": \"Ada Lovelace\", \"email\": \"ada@example.com\"}'\n"
                   f'  curl -s -u demo:demo-password {url}/api/crm/customer/1\n'
                   f'  {conduit} invoke conduit.ping\n'
                   f'  {conduit} services\n'
                   f'  {conduit} job runs demo.payroll.reconcile\n'
                   'Pub/sub over REST as users crm and erp (password: secret), topic orders.created: '
                   'README.md, "Pub/sub over REST"')
    try:
        run(settings, demo=demo)
    except ConduitError as e:
        raise click.ClickException(str(e)) from None


def _program() -> str:
    """The conduit command as the user typed it (``.venv/bin/conduit`` under ``make run``), to paste back."""
    argv0 = sys.argv[0]
    if os.path.basename(argv0) != 'conduit' or shutil.which('conduit') == os.path.abspath(argv0):
        return 'conduit'
    path = Path(os.path.abspath(argv0))
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _without_password(url: str) -> str:
    """A database URL fit for a log: the password, if any, replaced by ***."""
    netloc = urlsplit(url).netloc
    userinfo, at, host = netloc.rpartition('@')
    if not at or ':' not in userinfo:
        return url
    return url.replace(netloc, f"{userinfo.split(':', 1)[0]}:***@{host}", 1)


def _read_pid(settings: Settings) -> int | None:
    path = settings.path(settings.server.pidfile)
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, 0)
        return pid
    except (OSError, ValueError):
        return None


@main.command()
@click.option('--timeout', default=30.0, show_default=True, help='Seconds to wait for the server to exit.')
@click.pass_context
def stop(ctx: click.Context, timeout: float) -> None:
    """Stop a running server gracefully (SIGTERM)."""
    settings = _settings(ctx)
    pid = _read_pid(settings)
    if pid is None:
        raise click.ClickException(f'no server is running (no live pid in {settings.path(settings.server.pidfile)}; '
                                   "run stop from the server's project directory or give --config)")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            click.echo(f'stopped (pid {pid})')
            return
        time.sleep(0.1)
    raise click.ClickException(f'server (pid {pid}) still running after {timeout:g} s')


@main.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Show whether the server runs and what it serves (asked over HTTP: works from any directory)."""
    from runtime.admin_client import base_url, is_up
    settings = _settings(ctx)
    url = ctx.obj.get('url') or base_url(settings)
    pid = _read_pid(settings)
    if not is_up(url):
        if pid is not None:
            raise click.ClickException(f'pid {pid} is alive but nothing answers at {url}')
        click.echo(f'not running (nothing answers at {url})')
        sys.exit(1)
    try:
        info = _client(ctx).call('GET', '/admin/status')
    except ConduitError as e:
        raise click.ClickException(f'a server answers at {url} but the admin API failed: {e}') from None
    master = pid or info.get('master_pid')
    click.echo(f"running: master pid {master}, {info['services']} services, {info['channels']} channels, "
               f"database {info['database']}, at {url}")


@main.command()
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
    path = f'/admin/services/{_quote(name)}/invoke' + (f'?timeout={timeout}' if timeout else '')
    try:
        result = _client(ctx).call('POST', path, payload)
    except ConduitError as e:
        raise click.ClickException(str(e)) from None
    click.echo(json.dumps(result['response'], indent=2, default=str))


@main.command()
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
    try:
        result = _client(ctx).call('POST', '/admin/deploy', {'modules': modules})
    except ConduitError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f"deployed: {', '.join(result['services']) or 'no services'}")
    if result.get('reloaded'):
        click.echo(f"reloaded (they import a deployed module): {', '.join(result['reloaded'])}")


@main.command()
@click.argument('name')
@click.option('--force', is_flag=True, help='Undeploy even though channels, jobs or subscriptions use it.')
@click.pass_context
def undeploy(ctx: click.Context, name: str, force: bool) -> None:
    """Remove a service from every worker of the running server (refused while others use it)."""
    try:
        answer = _client(ctx).call('DELETE', f'/admin/services/{_quote(name)}' + ('?force=true' if force else ''))
    except ConduitError as e:
        raise click.ClickException(str(e)) from None
    click.echo(f'undeployed: {name}')
    for user in answer.get('now_pointing_nowhere') or []:
        click.echo(f'  now pointing nowhere: {user}', err=True)


@main.command()
@json_option
@click.pass_context
def services(ctx: click.Context, as_json: bool) -> None:
    """List deployed services."""
    try:
        result = _client(ctx).call('GET', '/admin/services')
    except ConduitError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        echo_json(result)
        return
    values = [(s['name'], s['module'], ', '.join(s['input'] + [f'-{f}' for f in s['input_optional']]),
               s['deployed_at']) for s in result['services']]
    # A service's name is what users copy from the list: never shorten it, shorten the rest.
    print_values(('name', 'module', 'input', 'deployed at'), values)


def _quote(name: str) -> str:
    from urllib.parse import quote
    return quote(name, safe='')


main.add_command(job)
main.add_command(spark)
for _command in ADMIN_COMMANDS:  # topic, sub, queue, dlq, sec, channel, publish
    main.add_command(_command)
main.add_command(objects)
main.add_command(audit)
add_detach_options({name: cmd for name, cmd in main.commands.items() if isinstance(cmd, click.Group)})


if __name__ == '__main__':
    main()
