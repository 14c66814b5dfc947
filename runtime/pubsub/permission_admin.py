"""The stored pub/sub permissions: their statements, and ``PermissionAdmin``, which the admin API changes them with.

One row of ``conduit_pubsub_permission`` per security definition that has any (``pub`` and ``sub``
as JSON lists). The object files' section (``runtime.pubsub.objects``) and the deletion of a
definition (``runtime.security.admin``) use the same statements; each change bumps the sync key
``pubsub_permissions`` in its transaction, so that every worker reloads ``Permissions``.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from sqlalchemy import Connection, Engine, delete, select, update

from runtime.cluster.sync import bump
from runtime.db.blocking import run_transaction
from runtime.db.models import BasicAuthDef, PubSubPermission
from runtime.errors import ObjectNotFound
from runtime.pubsub.permissions import SYNC_KEY, Grant, grant_of


def security_exists(conn: Connection, security: str) -> bool:
    """Whether a Basic Auth definition of that name exists."""
    return conn.execute(select(BasicAuthDef.id).where(BasicAuthDef.name == security)).first() is not None


def load(conn: Connection, security: str) -> Grant | None:
    """One definition's stored permissions."""
    row = conn.execute(select(PubSubPermission).where(PubSubPermission.security == security)).first()
    return grant_of(row) if row is not None else None


def save(conn: Connection, security: str, pub: list[str], sub: list[str], origin: str = 'api') -> None:
    """Create or replace a definition's permissions (the caller validated the patterns) and bump the sync key."""
    values = {'pub': json.dumps(pub), 'sub': json.dumps(sub), 'origin': origin}
    if conn.execute(update(PubSubPermission).where(PubSubPermission.security == security).values(**values)
                    ).rowcount == 0:
        conn.execute(PubSubPermission.__table__.insert().values(security=security, **values))
    bump(conn, SYNC_KEY)


def remove(conn: Connection, security: str) -> bool:
    """Delete a definition's permissions; False if it had none."""
    gone = conn.execute(delete(PubSubPermission).where(PubSubPermission.security == security)).rowcount > 0
    if gone:
        bump(conn, SYNC_KEY)
    return gone


class PermissionAdmin:
    """Reads and changes one security definition's stored permissions, for the admin API.

    ``save`` and ``remove`` (below) bump the sync key in the change's transaction (object files share them),
    so every worker follows within its next poll; ``reload`` reloads this worker's at once. A
    definition that does not exist is ObjectNotFound.
    """

    def __init__(self, engine: Engine, reload: Callable[[], None]) -> None:
        self._engine = engine
        self._reload = reload

    def exists(self, security: str) -> bool:
        """Whether a Basic Auth definition of that name is stored (made by any worker)."""
        return run_transaction(self._engine, lambda c: security_exists(c, security), write=False)

    def get(self, security: str) -> Grant | None:
        """A definition's permissions (None: it has none, and may do nothing)."""
        def work(conn: Connection) -> tuple[bool, Grant | None]:
            if not security_exists(conn, security):
                return False, None
            return True, load(conn, security)
        exists, grant = run_transaction(self._engine, work, write=False)
        if not exists:
            raise ObjectNotFound('security definition', security)
        return grant

    def update(self, security: str, pub: list[str], sub: list[str]) -> Grant | None:
        """Replace a definition's permissions (patterns already validated); returns them as stored."""
        def work(conn: Connection) -> tuple[bool, Grant | None]:
            if not security_exists(conn, security):
                return False, None
            save(conn, security, pub, sub, origin='api')
            return True, load(conn, security)
        exists, grant = run_transaction(self._engine, work)
        if not exists:
            raise ObjectNotFound('security definition', security)
        self._reload()
        return grant

    def delete(self, security: str) -> None:
        """Remove a definition's permissions; ObjectNotFound if it had none."""
        def work(conn: Connection) -> tuple[bool, bool]:
            if not security_exists(conn, security):
                return False, False
            return True, remove(conn, security)
        exists, removed = run_transaction(self._engine, work)
        if not exists:
            raise ObjectNotFound('security definition', security)
        if not removed:
            raise ObjectNotFound('pub/sub permissions of security definition', security)
        self._reload()
