"""The ``channel_rest`` section of the object files: REST channels, matched by name.

Each names a service that exists and, if it has one, a security definition of the files or the
database; a channel's route may not clash with another channel's or the admin API's.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, select

from runtime.channels.rest import Channel, parse_methods
from runtime.db.models import BasicAuthDef, RestChannel
from runtime.errors import ConfigError
from runtime.objects.applier import CHANNELS_KEY, DELETE, Scope, SectionHandler, check_unique, require
from runtime.objects.checks import check_channel_routes, check_service


def section_handler() -> SectionHandler:
    """The handler of section ``channel_rest`` (after ``security``: channels name definitions)."""
    return SectionHandler('channel_rest', apply_channels, (CHANNELS_KEY,))


def apply_channels(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
    """Section ``channel_rest``: REST channels."""
    rows = []
    for item in items:
        where = f'{item["_file"]} [channel_rest] {item.get("name", "?")!r}'
        methods = parse_methods(item.get('methods', item.get('method')))
        try:
            channel = Channel(name=str(require(item, 'name', where)), service=str(require(item, 'service', where)),
                              url_path=str(require(item, 'url_path', where)), methods=methods,
                              data_format=str(item.get('data_format') or 'json'),
                              security=str(item.get('security') or ''), is_active=bool(item.get('is_active', True)))
        except ConfigError as e:
            raise ConfigError(where, e.reason) from None
        item['name'] = channel.name
        rows.append(channel)
    check_unique(items, 'channel_rest')
    known_security = {r.name for r in conn.execute(select(BasicAuthDef.name)).all()}
    declared = {c.name for c in rows}
    for channel, item in zip(rows, items, strict=True):
        where = f'{item["_file"]} [channel_rest] {channel.name!r}'
        if channel.security and channel.security not in known_security:
            raise ConfigError(where, f'security definition {channel.security!r} does not exist')
        check_service(scope.service_exists, channel.service, where)
    for row in scope.stale(conn, RestChannel):
        if row.name not in declared:
            conn.execute(delete(RestChannel).where(RestChannel.id == row.id))
            scope.record(DELETE, 'channel', row.name, row.owner)
    for channel, item in zip(rows, items, strict=True):
        values = {'service': channel.service, 'url_path': channel.url_path,
                  'methods': ','.join(sorted(channel.methods)), 'data_format': channel.data_format,
                  'security': channel.security, 'is_active': channel.is_active}
        scope.upsert(conn, 'channel', RestChannel, 'name', channel.name, values, item['_file'])
    # After the writes: the clash may be with a channel of the admin API or of another file.
    check_channel_routes(conn, {c.name: f'{i["_file"]} [channel_rest] {c.name!r}'
                                for c, i in zip(rows, items, strict=True)})
