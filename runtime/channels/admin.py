"""Administration of REST channels: list, read, create, change, delete, and who names a service.

What the admin API does with channels, without HTTP. Each change is one transaction that also
bumps the ``channels`` sync key (``runtime.objects.checked_write.write_checked``), so every worker rebuilds
its router within ``sync.interval_secs`` and this one at once. No two channels may answer the same
path and method (``runtime.objects.checks.channel_clash``, as object files are checked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, or_, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import RestChannel
from runtime.errors import ObjectExists, ObjectNotFound, RouteClash
from runtime.objects.applier import CHANNELS_KEY
from runtime.objects.checked_write import write_checked
from runtime.objects.checks import channel_clash, service_users


class ChannelAdmin:
    """Reads and changes the REST channels in the database; reload rebuilds this worker's router after a change."""

    def __init__(self, engine: Engine, reload: Callable[[], None]) -> None:
        self._engine = engine
        self._reload = reload

    def list(self) -> list[Any]:
        """Every channel's row, by name."""
        return run_transaction(self._engine, lambda c: c.execute(
            select(RestChannel).order_by(RestChannel.name)).all(), write=False)

    def page(self, search: str = '', limit: int | None = None, offset: int = 0) -> tuple[int, list[Any]]:
        """(how many channels match, a page of their rows by name); search: part of the name, path or service."""
        where = []
        if search:
            term = search.lower()
            where.append(or_(*(func.lower(c).contains(term, autoescape=True)
                               for c in (RestChannel.name, RestChannel.url_path, RestChannel.service))))

        def work(conn: Connection) -> tuple[int, list[Any]]:
            total = conn.execute(select(func.count()).select_from(RestChannel).where(*where)).scalar_one()
            query = select(RestChannel).where(*where).order_by(RestChannel.name).offset(offset)
            return total, conn.execute(query.limit(limit) if limit is not None else query).all()
        return run_transaction(self._engine, work, write=False)

    def get(self, name: str) -> Any:
        """A channel's row; ObjectNotFound if there is none."""
        row = run_transaction(self._engine, lambda c: c.execute(select(RestChannel).where(RestChannel.name == name))
                              .first(), write=False)
        if row is None:
            raise ObjectNotFound('channel', name)
        return row

    def check_routes(self, name: str, url_path: str, methods: frozenset[str], current: str | None = None) -> None:
        """RouteClash if another channel answers the same path and a same method.

        current: the channel's name now, when it exists (a rename is checked against every other one).
        """
        clash = run_transaction(self._engine, lambda c: channel_clash(
            c, current if current is not None else name, url_path, methods), write=False)
        if clash is not None:
            raise RouteClash(name, clash)

    def create(self, values: dict[str, Any]) -> Any:
        """Store a new channel (values: its columns); its row. ObjectExists when the name is taken."""
        def work(conn: Connection) -> Exception | None:
            if conn.execute(select(RestChannel.id).where(RestChannel.name == values['name'])).first():
                return ObjectExists('channel', values['name'])
            conn.execute(insert(RestChannel).values(**values))
            return None
        write_checked(self._engine, CHANNELS_KEY, work, self._reload, ObjectExists('channel', values['name']))
        return self.get(values['name'])

    def update(self, name: str, values: dict[str, Any]) -> Any:
        """Change a channel (renaming it too, values['name']); its row. ObjectExists when the new name is taken."""
        def work(conn: Connection) -> Exception | None:
            if values['name'] != name and conn.execute(select(RestChannel.id)
                                                       .where(RestChannel.name == values['name'])).first():
                return ObjectExists('channel', values['name'])
            conn.execute(update(RestChannel).where(RestChannel.name == name).values(**values))
            return None
        write_checked(self._engine, CHANNELS_KEY, work, self._reload, ObjectExists('channel', values['name']))
        return self.get(values['name'])

    def delete(self, name: str) -> None:
        """Delete a channel; ObjectNotFound if there is none."""
        def work(conn: Connection) -> Exception | None:
            if not conn.execute(delete(RestChannel).where(RestChannel.name == name)).rowcount:
                return ObjectNotFound('channel', name)
            return None
        write_checked(self._engine, CHANNELS_KEY, work, self._reload)

    def service_users(self, service: str) -> list[str]:
        """Every channel, job, subscription and topic hook that names a service, described for a person.

        Here because channels are the first of them: undeploying a service asks before it leaves them
        pointing nowhere.
        """
        return run_transaction(self._engine, lambda c: service_users(c, service), write=False)
