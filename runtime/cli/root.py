"""The ``conduit`` command group itself: its global options, read before any command runs."""

from __future__ import annotations

import click

from runtime.config import CONFIG_ENV, URL_ENV, load_settings, unknown_env_vars
from runtime.errors import ConduitError


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
