"""``conduit pubsub ...``: pub/sub runtime views, through the admin API.

``conduit pubsub websockets`` lists the WebSocket subscriptions with their clients. Subscriptions
are named by their numeric id, as in ``conduit sub`` and ``conduit queue``: the sub_key is a
secret that the admin API does not show, so no table (and no ``--json``) prints it.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import click

from runtime.cli.calls import call
from runtime.cli.output import json_option, rows

#: (title, key) columns of the WebSocket table.
_WS_COLUMNS = [('id', 'sub_id'), ('security', 'security'), ('pattern', 'pattern'), ('connected', 'connected'),
               ('worker', 'worker'), ('peer', 'peer'), ('window', 'window'), ('in-flight', 'in_flight'),
               ('queue depth', 'queue_depth'), ('last activity', 'last_activity')]
#: Columns users copy from: never shortened.
_WS_NAMES = ('sub_id', 'security', 'pattern', 'worker')


def age(secs: float) -> str:
    """A duration as people read an age: 42s, 3m 05s, 2h 07m, 4d 06h."""
    secs = max(0, int(secs))
    minutes, seconds = divmod(secs, 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    if days:
        return f'{days}d {hours:02d}h'
    if hours:
        return f'{hours}h {minutes:02d}m'
    if minutes:
        return f'{minutes}m {seconds:02d}s'
    return f'{seconds}s'


def _shown(view: dict[str, Any]) -> dict[str, Any]:
    # The server measures the idle time: the CLI's clock may differ from the server's.
    return {**view, 'worker': view.get('owner') or None, 'peer': view.get('peer') or None,
            'last_activity': f'{age(view["idle_secs"])} ago' if view.get('idle_secs') is not None else None}


@click.group()
def pubsub() -> None:
    """Pub/sub runtime views: WebSocket subscribers."""


@pubsub.command('websockets')
@click.option('--security', default=None, help='Only the subscriptions of this security definition.')
@click.option('--connected/--not-connected', 'connected', default=None,
              help='Only those with a client attached now, or only those without one.')
@json_option
@click.pass_context
def websockets(ctx: click.Context, security: str | None, connected: bool | None, as_json: bool) -> None:
    """WebSocket subscriptions: client connected, worker, peer, window, in flight, queue depth, last activity."""
    params: dict[str, str] = {}
    if security is not None:
        params['security'] = security
    if connected is not None:
        params['connected'] = 'true' if connected else 'false'
    answer = call(ctx, 'GET', '/admin/pubsub/websockets' + (f'?{urlencode(params)}' if params else ''))
    rows([_shown(v) for v in answer['websockets']], _WS_COLUMNS, as_json, answer, names=_WS_NAMES)
    if not as_json:
        totals = answer['totals']
        click.echo(f'{totals["subscriptions"]} WebSocket subscription(s), {totals["connected"]} connected')
