"""How commands call the running server's admin API: one call, its errors turned into click's.

``runtime.admin_client`` is imported when a command calls, not when the CLI loads: it imports
``ssl``, which ``conduit start`` imports only after gevent patched the standard library.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import click

from runtime.errors import ConduitError


def call(ctx: click.Context, method: str, path: str, body: Any = None, timeout: float = 30.0) -> dict[str, Any]:
    """The admin API's answer to one request of this invocation (its settings and --url); errors exit."""
    from runtime.admin_client import for_cli
    try:
        return for_cli(ctx.obj, timeout=timeout).call(method, path, body)
    except ConduitError as e:
        raise click.ClickException(str(e)) from None


def quote_name(name: str) -> str:
    """A name (topic, service, msg_id, ...) quoted as one segment of an admin path."""
    return quote(name, safe='')
