"""Administration of Basic Auth security definitions: list, read, create, change, re-password, delete.

What the admin API does with definitions, without HTTP. Each change is one transaction that also
bumps the ``security`` sync key (``runtime.objects.checked_write.write_checked``), so every worker reloads the
definitions within ``sync.interval_secs`` and this one at once. A password is hashed (scrypt, in
gevent's thread pool) before it is stored; the rows returned carry the hash, and the caller decides
what of a row it shows (the admin API never shows the hash).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gevent
from sqlalchemy import Connection, Engine, delete, func, insert, or_, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import BasicAuthDef, RestChannel, Subscription
from runtime.errors import BadRequest, ObjectExists, ObjectInUse, ObjectNotFound
from runtime.objects.applier import SECURITY_KEY
from runtime.objects.checked_write import write_checked
from runtime.pubsub import permission_admin
from runtime.security import user_names
from runtime.security.basic_auth import hash_password


def _username_problem(conn: Connection, username: str, own_name: str | None,
                      reserved: tuple[str, ...]) -> BadRequest | None:
    query = select(BasicAuthDef.username)
    if own_name is not None:
        query = query.where(BasicAuthDef.name != own_name)
    found = user_names.problem(username, conn.execute(query).scalars().all(), reserved)
    return BadRequest(found) if found is not None else None


def _hash(password: str) -> str:
    # scrypt takes tens of milliseconds of CPU: off the hub, as authentication does.
    return gevent.get_hub().threadpool.apply(hash_password, (password,))


class SecurityAdmin:
    """Reads and changes the Basic Auth definitions in the database, reloading them after each change.

    reload reloads the definitions in this worker (the ``security`` sync key); permissions_changed
    reloads the pub/sub permissions, which go with a deleted definition.
    """

    def __init__(self, engine: Engine, reload: Callable[[], None], permissions_changed: Callable[[], None],
                 reserved_usernames: tuple[str, ...] = user_names.RESERVED_USERNAMES) -> None:
        self._engine = engine
        self._reload = reload
        self._permissions_changed = permissions_changed
        #: User names no definition may look like (the server's admin and viewer).
        self._reserved = reserved_usernames

    def list(self) -> list[Any]:
        """Every definition's row, by name."""
        return run_transaction(self._engine, lambda c: c.execute(
            select(BasicAuthDef).order_by(BasicAuthDef.name)).all(), write=False)

    def page(self, search: str = '', limit: int | None = None, offset: int = 0) -> tuple[int, list[Any]]:
        """(how many definitions match, a page of their rows by name); search: part of the name or user name."""
        where = []
        if search:
            term = search.lower()
            where.append(or_(func.lower(BasicAuthDef.name).contains(term, autoescape=True),
                             func.lower(BasicAuthDef.username).contains(term, autoescape=True)))

        def work(conn: Connection) -> tuple[int, list[Any]]:
            total = conn.execute(select(func.count()).select_from(BasicAuthDef).where(*where)).scalar_one()
            query = select(BasicAuthDef).where(*where).order_by(BasicAuthDef.name).offset(offset)
            return total, conn.execute(query.limit(limit) if limit is not None else query).all()
        return run_transaction(self._engine, work, write=False)

    def get(self, name: str) -> Any:
        """A definition's row; ObjectNotFound if there is none."""
        row = run_transaction(self._engine, lambda c: c.execute(select(BasicAuthDef).where(BasicAuthDef.name == name))
                              .first(), write=False)
        if row is None:
            raise ObjectNotFound('security definition', name)
        return row

    def create(self, values: dict[str, Any], password: str) -> Any:
        """Store a new definition (values: its columns but the hash) with password hashed; its row.

        ObjectExists when the name or the username is taken.
        """
        values = {**values, 'password_hash': _hash(password)}

        def work(conn: Connection) -> Exception | None:
            for column, kind in (('name', 'security definition'), ('username', 'username')):
                if conn.execute(select(BasicAuthDef.id).where(getattr(BasicAuthDef, column) == values[column])).first():
                    return ObjectExists(kind, values[column])
            refused = _username_problem(conn, values['username'], None, self._reserved)
            if refused is not None:
                return refused
            conn.execute(insert(BasicAuthDef).values(**values))
            return None
        write_checked(self._engine, SECURITY_KEY, work, self._reload, ObjectExists('security definition',
                                                                                    values['name']))
        return self.get(values['name'])

    def update(self, name: str, values: dict[str, Any]) -> Any:
        """Change a definition's username, realm and is_active (values); its row. ObjectExists for a taken username."""
        def work(conn: Connection) -> Exception | None:
            taken = conn.execute(select(BasicAuthDef.name).where(BasicAuthDef.username == values['username'],
                                                                 BasicAuthDef.name != name)).first()
            if taken:
                return ObjectExists('username', values['username'])
            stored = conn.execute(select(BasicAuthDef.username).where(BasicAuthDef.name == name)).scalar()
            # A stored name that predates the look-alike rule keeps working: only a new name is checked.
            if stored != values['username']:
                refused = _username_problem(conn, values['username'], name, self._reserved)
                if refused is not None:
                    return refused
            conn.execute(update(BasicAuthDef).where(BasicAuthDef.name == name).values(**values))
            return None
        write_checked(self._engine, SECURITY_KEY, work, self._reload, ObjectExists('username', values['username']))
        return self.get(name)

    def change_password(self, name: str, password: str) -> Any:
        """Store a new hash of password for a definition; its row. ObjectNotFound if it is gone."""
        password_hash = _hash(password)

        def work(conn: Connection) -> Exception | None:
            if not conn.execute(update(BasicAuthDef).where(BasicAuthDef.name == name)
                                .values(password_hash=password_hash)).rowcount:
                return ObjectNotFound('security definition', name)
            return None
        write_checked(self._engine, SECURITY_KEY, work, self._reload)
        return self.get(name)

    def delete(self, name: str) -> None:
        """Delete a definition with its pub/sub permissions; ObjectInUse while a channel or subscription uses it."""
        self.get(name)

        def work(conn: Connection) -> Exception | None:
            users = [f'channel {r.name!r}' for r in conn.execute(select(RestChannel.name)
                                                                 .where(RestChannel.security == name)).all()]
            users += [f'subscription #{r.id}' for r in conn.execute(select(Subscription.id)
                                                                    .where(Subscription.security == name)).all()]
            if users:
                return ObjectInUse('security definition', name, users)
            # Permissions go with their definition: a later one of the same name must not inherit them.
            permission_admin.remove(conn, name)
            conn.execute(delete(BasicAuthDef).where(BasicAuthDef.name == name))
            return None
        write_checked(self._engine, SECURITY_KEY, work, self._reload)
        self._permissions_changed()
