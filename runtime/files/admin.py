"""Administration of inbound file channels: list, read, create, change, delete, and their run history.

What the admin API and the CLI do with file channels, without HTTP. Each change is one
transaction that also bumps the ``file_channels`` sync key (``runtime.objects.checked_write``), so every
worker's file transfer restarts the pollers whose channel changed within ``sync.interval_secs``,
and this worker at once (``changed``). Definitions are checked by ``FileChannelDef.from_values``
before they get here; this layer adds what needs the database: a name is used once, the topics a
channel publishes to exist (unless topics are made on first publication).

Renaming a channel carries its run history along: what it processed before (the content hashes
that make a re-dropped file a duplicate) stays its own. Deleting a channel keeps its history
(``[file_transfer] history_days`` sweeps it), so a channel made again under the same name still
skips the files the old one processed.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import FileChannelRow, FileRun
from runtime.errors import ConfigError, ObjectExists, ObjectNotFound
from runtime.files.definition import FILE_CHANNELS_KEY, FileChannelDef
from runtime.objects.checked_write import write_checked
from runtime.objects.checks import topic_missing
from runtime.util.timefmt import iso

#: The kind of object errors and the audit log name.
KIND = 'file channel'

#: States a run may be in (``runtime.files.processor``).
RUN_STATES = ('running', 'done', 'failed', 'skipped', 'superseded')

#: Largest page of runs.
MAX_RUNS_PAGE = 1000


@dataclass(frozen=True)
class StoredFileChannel:
    """A file channel as the database holds it: its definition, and who manages it."""

    name: str
    #: ``FileChannelDef.as_values()``; the stored values as they are when they no longer pass the checks.
    values: dict[str, Any]
    is_active: bool
    #: 'api' (admin API, CLI) or 'config' (an object file: ``owner``).
    origin: str
    owner: str
    updated_at: float
    #: Why the stored definition no longer passes the checks ('' when it does); such a channel does not run.
    problem: str = ''

    @property
    def definition(self) -> FileChannelDef:
        """The checked definition; ConfigError when the stored one no longer passes the checks."""
        return FileChannelDef.from_values(self.values, f'{KIND} {self.name!r}')

    def view(self) -> dict[str, Any]:
        """As the admin API shows it (references to secrets, never secrets: nothing else is stored)."""
        answer = {**self.values, 'name': self.name, 'is_active': self.is_active, 'origin': self.origin,
                  'updated_at': self.updated_at, 'updated_at_iso': iso(self.updated_at) if self.updated_at else None}
        if self.problem:
            answer['problem'] = self.problem
        return answer


def _stored(row: Any) -> StoredFileChannel:
    """A row read: its definition checked again (the rules may have grown since it was stored)."""
    problem = ''
    try:
        values = FileChannelDef.from_stored(row.name, row.definition, row.is_active).as_values()
    except ConfigError as e:
        problem = e.reason
        try:
            loaded = json.loads(row.definition)
        except ValueError:
            loaded = {}
        values = {**(loaded if isinstance(loaded, dict) else {}), 'name': row.name, 'is_active': row.is_active}
    return StoredFileChannel(row.name, values, row.is_active, row.origin, row.owner, row.updated_at or 0.0, problem)


def run_view(row: Any) -> dict[str, Any]:
    """One processing of a file, as the admin API shows it."""
    return {'id': row.id, 'channel': row.channel, 'file_name': row.file_name, 'size': row.size, 'mtime': row.mtime,
            'content_hash': row.content_hash, 'state': row.state, 'records_done': row.records_done,
            'published': row.published, 'invoked': row.invoked, 'owner': row.owner, 'started_at': row.started_at,
            'started_at_iso': iso(row.started_at), 'finished_at': row.finished_at,
            'finished_at_iso': iso(row.finished_at) if row.finished_at is not None else None, 'error': row.error}


class FileChannelAdmin:
    """Reads and changes the file channels in the database; ``changed`` reloads this worker's file transfer."""

    def __init__(self, engine: Engine, changed: Callable[[], None], *,
                 topics_auto_created: Callable[[], bool] = lambda: False) -> None:
        self._engine = engine
        self._changed = changed
        #: Whether publishing to a topic that does not exist makes it (then a channel may name one).
        self._topics_auto_created = topics_auto_created

    def list(self) -> list[StoredFileChannel]:
        """Every file channel, by name."""
        rows = run_transaction(self._engine, lambda c: c.execute(
            select(FileChannelRow).order_by(FileChannelRow.name)).all(), write=False)
        return [_stored(r) for r in rows]

    def get(self, name: str) -> StoredFileChannel:
        """One file channel; ObjectNotFound naming it if there is none."""
        row = run_transaction(self._engine, lambda c: c.execute(
            select(FileChannelRow).where(FileChannelRow.name == name)).first(), write=False)
        if row is None:
            raise ObjectNotFound(KIND, name)
        return _stored(row)

    def exists(self, name: str) -> bool:
        """Whether a file channel of that name exists."""
        return run_transaction(self._engine, lambda c: c.execute(
            select(FileChannelRow.id).where(FileChannelRow.name == name)).first(), write=False) is not None

    def missing_topics(self, topics: Iterable[str]) -> list[str]:
        """The topics a channel names that do not exist (none when publishing makes them)."""
        if self._topics_auto_created():
            return []
        wanted = list(topics)
        return run_transaction(self._engine, lambda c: [t for t in wanted if topic_missing(c, t)], write=False)

    def create(self, definition: FileChannelDef) -> StoredFileChannel:
        """Store a new channel made through the admin API or the CLI; ObjectExists when the name is taken."""
        name = definition.name

        def work(conn: Connection) -> Exception | None:
            if _row_id(conn, name) is not None:
                return ObjectExists(KIND, name)
            conn.execute(insert(FileChannelRow).values(
                name=name, definition=definition.stored(), is_active=definition.is_active, origin='api', owner='',
                updated_at=time.time()))
            return None
        write_checked(self._engine, FILE_CHANNELS_KEY, work, self._changed, ObjectExists(KIND, name))
        return self.get(name)

    def update(self, name: str, definition: FileChannelDef) -> StoredFileChannel:
        """Replace a channel's definition (renaming it when definition.name differs; its runs follow).

        ObjectNotFound if it does not exist, ObjectExists when the new name is taken.
        """
        new = definition.name

        def work(conn: Connection) -> Exception | None:
            if _row_id(conn, name) is None:
                return ObjectNotFound(KIND, name)
            if new != name and _row_id(conn, new) is not None:
                return ObjectExists(KIND, new)
            conn.execute(update(FileChannelRow).where(FileChannelRow.name == name).values(
                name=new, definition=definition.stored(), is_active=definition.is_active, updated_at=time.time()))
            if new != name:
                conn.execute(update(FileRun).where(FileRun.channel == name).values(channel=new))
            return None
        write_checked(self._engine, FILE_CHANNELS_KEY, work, self._changed, ObjectExists(KIND, new))
        return self.get(new)

    def delete(self, name: str) -> None:
        """Delete a channel (its run history stays); ObjectNotFound if there is none."""
        def work(conn: Connection) -> Exception | None:
            if not conn.execute(delete(FileChannelRow).where(FileChannelRow.name == name)).rowcount:
                return ObjectNotFound(KIND, name)
            return None
        write_checked(self._engine, FILE_CHANNELS_KEY, work, self._changed)

    def runs(self, channel: str, limit: int = 50, offset: int = 0,
             state: str | None = None) -> tuple[int, list[dict[str, Any]]]:
        """How many runs the channel has (of that state) and one page of them, most recent first."""
        if state is not None and state not in RUN_STATES:
            raise ConfigError('state', f'must be one of {", ".join(RUN_STATES)}, not {state!r}')
        limit = max(1, min(limit, MAX_RUNS_PAGE))
        offset = max(0, offset)
        where = [FileRun.channel == channel] + ([FileRun.state == state] if state is not None else [])

        def read(conn: Connection) -> tuple[int, list[Any]]:
            total = conn.execute(select(func.count()).select_from(FileRun).where(*where)).scalar_one()
            rows = conn.execute(select(FileRun).where(*where).order_by(FileRun.started_at.desc(), FileRun.id.desc())
                                .limit(limit).offset(offset)).all()
            return total, rows
        total, rows = run_transaction(self._engine, read, write=False)
        return total, [run_view(r) for r in rows]


def _row_id(conn: Connection, name: str) -> int | None:
    return conn.execute(select(FileChannelRow.id).where(FileChannelRow.name == name)).scalar()
