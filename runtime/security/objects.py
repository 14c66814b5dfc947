"""The ``security`` section of the object files: Basic Auth definitions, matched by name.

A password is written as it is or as a ``${CONDUIT_SECRET_...}`` reference; only its hash is stored,
and it is hashed again only when it changed. A user name may not be one another definition has, nor
look like one (``runtime.security.user_names``), nor the server's admin or viewer.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, delete, select

from runtime.db.models import BasicAuthDef
from runtime.errors import ConfigError
from runtime.objects.applier import (
    DELETE,
    SECURITY_KEY,
    Scope,
    SectionHandler,
    check_unique,
    require,
    resolve_secret,
)
from runtime.security import user_names
from runtime.security.basic_auth import hash_password, verify_password


def section_handler() -> SectionHandler:
    """The handler of section ``security`` (before the sections that name definitions)."""
    return SectionHandler('security', apply_security, (SECURITY_KEY,))


def apply_security(conn: Connection, items: list[dict[str, Any]], scope: Scope) -> None:
    """Section ``security``: Basic Auth definitions."""
    for item in items:
        where = f'{item["_file"]} [security] {item.get("name", "?")!r}'
        item['name'] = str(require(item, 'name', where))
        kind = item.get('type', 'basic_auth')
        if kind != 'basic_auth':
            raise ConfigError(where, f'type {kind!r} is not supported; use basic_auth')
        require(item, 'username', where)
        item['_password'] = resolve_secret(require(item, 'password', where), where)
    check_unique(items, 'security')
    existing = {r.name: r for r in conn.execute(select(BasicAuthDef)).all()}
    usernames = {r.username: r.name for r in existing.values()}
    for item in items:
        old = existing.get(item['name'])
        owner = usernames.get(item['username'])
        if owner is not None and owner != item['name']:
            raise ConfigError(f'{item["_file"]} [security] {item["name"]!r}',
                              f'username {item["username"]!r} is already used by {owner!r}')
        if old is None or old.username != str(item['username']):
            # Only a new or renamed user name: one stored before the look-alike rule keeps working.
            others = [r.username for r in existing.values() if r.name != item['name']]
            others += [str(i['username']) for i in items if i['name'] != item['name']]
            refused = user_names.problem(str(item['username']), others, scope.reserved_usernames)
            if refused is not None:
                raise ConfigError(f'{item["_file"]} [security] {item["name"]!r}', refused)
        values = {'username': str(item['username']), 'realm': str(item.get('realm') or 'Conduit'),
                  'is_active': bool(item.get('is_active', True))}
        if old is None or not verify_password(item['_password'], old.password_hash):
            values['password_hash'] = hash_password(item['_password'])
        scope.upsert(conn, 'security', BasicAuthDef, 'name', item['name'], values, item['_file'])
    declared = {i['name'] for i in items}
    for row in scope.stale(conn, BasicAuthDef):
        if row.name not in declared:
            conn.execute(delete(BasicAuthDef).where(BasicAuthDef.id == row.id))
            scope.record(DELETE, 'security', row.name, row.owner)
