"""``conduit start|stop|status``: run the server in the foreground, stop it, and ask whether it runs.

``start`` loads the server stack (gevent patches the standard library first); ``stop`` and
``status`` do not: they read the pid file and ask over HTTP.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import click

from runtime.config import Settings
from runtime.errors import ConduitError
from runtime.observability import log_lines


def _settings(ctx: click.Context) -> Settings:
    return ctx.obj['settings']


@click.command()
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
    logging.basicConfig(level=settings.logging.level.upper(), handlers=[log_lines.handler(settings.logging.format)])
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
    if settings.dashboard.enabled:
        viewer = ('configured' if settings.dashboard.viewer_password
                  else f'in {settings.path(settings.dashboard.viewer_password_file)}')
        click.echo(f'Dashboard: {url}/dashboard/ (sign in as {settings.admin.username}, or as '
                   f'{settings.dashboard.viewer_username} to only look: its password {viewer})')
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


@click.command()
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


@click.command()
@click.pass_context
def status(ctx: click.Context) -> None:
    """Show whether the server runs and what it serves (asked over HTTP: works from any directory)."""
    from runtime.admin_client import base_url, for_cli, is_up
    settings = _settings(ctx)
    url = ctx.obj.get('url') or base_url(settings)
    pid = _read_pid(settings)
    if not is_up(url):
        if pid is not None:
            raise click.ClickException(f'pid {pid} is alive but nothing answers at {url}')
        click.echo(f'not running (nothing answers at {url})')
        sys.exit(1)
    try:
        info = for_cli(ctx.obj).call('GET', '/admin/status')
    except ConduitError as e:
        raise click.ClickException(f'a server answers at {url} but the admin API failed: {e}') from None
    master = pid or info.get('master_pid')
    click.echo(f"running: master pid {master}, {info['services']} services, {info['channels']} channels, "
               f"database {info['database']}, at {url}")
