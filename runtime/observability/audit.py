"""The audit log: every change made through the admin API (and by object files), kept in a table.

An entry says who (the admin or dashboard user and the client's address, or ``object files`` for an
application of files), from where (``source``: api, cli, dashboard or files), what (method, path,
kind and name of the object, the action) and when, and holds the object as it was before and
after the change. Secrets never reach it: any key that looks like a password, hash, sub_key,
secret, token or private key is masked at any depth, and JSON text columns
(subscription options) are read and masked too. The table is written by one place only in the HTTP
layer (``runtime.http.admin.audit``, through ``AuditLog``) and read through ``GET /admin/audit`` and
``conduit audit``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, func, insert, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import AuditEntry
from runtime.util.timefmt import iso

_log = logging.getLogger(__name__)


class FileChange(Protocol):
    """What the log records of one object an application of files changed (``runtime.objects.applier.Change``)."""

    action: str
    kind: str
    name: str
    file: str
    detail: str

#: Where a change can come from (an entry's ``source``): the admin API, the CLI, the dashboard, object files.
SOURCES = ('api', 'cli', 'dashboard', 'files')

#: Shown instead of a secret.
MASK = '***'

#: Parts of key names whose values are secrets.
_SECRET_PARTS = ('password', 'hash', 'sub_key', 'secret', 'token', 'private_key')

#: Longest before/after kept, in characters of JSON; a bigger object keeps only that it was cut.
MAX_SNAPSHOT_CHARS = 64_000

#: Columns whose text is JSON, read so that secrets inside them are masked (a file channel's definition).
_JSON_COLUMNS = ('options', 'definition')

#: Largest page of GET /admin/audit.
MAX_PAGE = 1000


def is_secret(key: str) -> bool:
    """Whether a key's value must never be shown."""
    key = key.lower()
    return any(part in key for part in _SECRET_PARTS)


def mask(value: Any) -> Any:
    """A copy of value with every secret masked, at any depth."""
    if isinstance(value, dict):
        return {k: (MASK if is_secret(str(k)) and v not in (None, '') else mask(v)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask(v) for v in value]
    return value


def snapshot(row: Any) -> dict[str, Any] | None:
    """A stored row as the audit log keeps it: every column, JSON columns read, secrets masked."""
    if row is None:
        return None
    values = dict(row._mapping)
    for column in _JSON_COLUMNS:
        if isinstance(values.get(column), str):
            try:
                values[column] = json.loads(values[column])
            except ValueError:
                pass
    return mask(values)


def _dump(value: dict[str, Any] | None) -> str | None:
    if value is None:
        return None
    text = json.dumps(value, default=str, sort_keys=True)
    if len(text) > MAX_SNAPSHOT_CHARS:
        return json.dumps({'truncated': True, 'chars': len(text)})
    return text


def record(conn: Connection, *, at: float, actor: str, client: str, method: str, path: str, kind: str,
           name: str, action: str, status: int, before: dict[str, Any] | None = None,
           after: dict[str, Any] | None = None, source: str = 'api') -> None:
    """Insert one entry (before and after are masked again here: the last line of defence)."""
    conn.execute(insert(AuditEntry).values(
        at=at, actor=actor[:200], client=client[:100], source=source[:16], method=method[:16],
        path=path[:1000], kind=kind[:32],
        name=name[:400], action=action[:16], status=status,
        before=_dump(mask(before) if before is not None else None),
        after=_dump(mask(after) if after is not None else None)))


def record_file_changes(conn: Connection, actor: str, changes: Iterable[FileChange], at: float) -> None:
    """One entry per object an application of files created, updated or deleted."""
    for change in changes:
        if change.action == 'skip':
            continue
        record(conn, at=at, actor=actor, client='', method='FILE', path=change.file, kind=change.kind,
               name=change.name, action=change.action, status=200, source='files',
               after={'detail': change.detail} if change.detail else None)


def entry_view(row: Any) -> dict[str, Any]:
    """One entry as the admin API answers it."""
    return {'id': row.id, 'at': iso(row.at), 'actor': row.actor, 'source': row.source, 'client': row.client,
            'method': row.method,
            'path': row.path, 'kind': row.kind, 'name': row.name, 'action': row.action, 'status': row.status,
            'before': json.loads(row.before) if row.before else None,
            'after': json.loads(row.after) if row.after else None}


def query(conn: Connection, *, limit: int, offset: int = 0, kind: str | None = None, name: str | None = None,
          actor: str | None = None, action: str | None = None, since: float | None = None,
          until: float | None = None, source: str | None = None) -> tuple[int, list[dict[str, Any]]]:
    """(how many entries match, one page of them newest first)."""
    where = []
    if source:
        where.append(AuditEntry.source == source)
    if kind:
        where.append(AuditEntry.kind == kind)
    if name:
        where.append(AuditEntry.name == name)
    if actor:
        where.append(AuditEntry.actor == actor)
    if action:
        where.append(AuditEntry.action == action)
    if since is not None:
        where.append(AuditEntry.at >= since)
    if until is not None:
        where.append(AuditEntry.at < until)
    total = conn.execute(select(func.count()).select_from(AuditEntry).where(*where)).scalar_one()
    rows = conn.execute(select(AuditEntry).where(*where).order_by(AuditEntry.id.desc())
                        .limit(limit).offset(offset)).all()
    return total, [entry_view(r) for r in rows]


def load_object(conn: Connection, table: Any, column: str, key: Any) -> Any:
    """The stored row of an audited object (a model with ``origin`` and ``owner``), or None."""
    return conn.execute(select(table).where(getattr(table, column) == key)).first()


class AuditLog:
    """The audit log and the audited objects, read and written each in a transaction of its own."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def load(self, table: Any, column: str, key: Any) -> Any:
        """An audited object's stored row, or None."""
        return run_transaction(self._engine, lambda c: load_object(c, table, column, key), write=False)

    def record(self, **entry: Any) -> None:
        """Insert one entry (the arguments of ``record``)."""
        run_transaction(self._engine, lambda c: record(c, **entry))

    def detach(self, table: Any, column: str, key: Any, entry: Callable[[Any], dict[str, Any]]) -> Any:
        """Hand an object from its file to the admin API (origin api, no owner) and record it, in one transaction.

        entry(row after) gives the entry's fields; returns the object as it is now.
        """
        def work(conn: Connection) -> Any:
            conn.execute(update(table).where(getattr(table, column) == key).values(origin='api', owner=''))
            after = load_object(conn, table, column, key)
            record(conn, **entry(after))
            return after
        return run_transaction(self._engine, work)

    def query(self, **filters: Any) -> tuple[int, list[dict[str, Any]]]:
        """(how many entries match, one page of them newest first): the arguments of ``query``."""
        return run_transaction(self._engine, lambda c: query(c, **filters), write=False)
