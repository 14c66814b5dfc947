"""Deployment history and service sources, read from what is stored: ``conduit_deployment`` and the audit log.

``conduit_deployment`` keeps every hot deployment (module, file, source, services) and undeployment
that took effect, in order; a deployment that failed is not recorded there (its module was never
live), so the history lists successful ones only. Who made one is not in that table: the admin
API's audit entry of the request (action ``deploy`` or ``undeploy``, written just after the row)
is matched by time (it belongs to the latest rows before it, within ``AUDIT_MATCH_SECS``); a
deployment without such an entry came from a hot-deploy directory (``source: 'directory'``).

A service's source is the module source of its latest recorded deployment, else the file it was
loaded from (services deployed at start are not recorded), cut at ``MAX_SOURCE_CHARS``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, func, select

from runtime.db.blocking import run_transaction
from runtime.db.models import AuditEntry, Deployment
from runtime.util.timefmt import iso

T = TypeVar('T')

#: Longest source text returned, in characters.
MAX_SOURCE_CHARS = 256_000

#: Seconds after a deployment row within which its audit entry is looked for.
AUDIT_MATCH_SECS = 30.0

#: Rows recorded this close together, before one audit entry, were made by its request.
SAME_REQUEST_SECS = 1.0


def _names(text: str) -> list[str]:
    try:
        names = json.loads(text or '[]')
    except ValueError:
        return []
    return [str(n) for n in names] if isinstance(names, list) else []


def history(conn: Connection, limit: int, offset: int, module: str | None = None) -> tuple[int, list[dict[str, Any]]]:
    """(how many deployments are recorded, one page newest first), each with who made it when the audit tells."""
    where = [Deployment.module_name == module] if module else []
    total = conn.execute(select(func.count()).select_from(Deployment).where(*where)).scalar_one()
    rows = conn.execute(select(Deployment.id, Deployment.kind, Deployment.module_name, Deployment.file_name,
                               Deployment.source_hash, Deployment.service_names, Deployment.created_at,
                               func.length(Deployment.source).label('size'))
                        .where(*where).order_by(Deployment.id.desc()).limit(limit).offset(offset)).all()
    if not rows:
        return total, []
    times = [_epoch(r.created_at) for r in rows]
    audits = conn.execute(select(AuditEntry.at, AuditEntry.actor, AuditEntry.source, AuditEntry.action,
                                 AuditEntry.name, AuditEntry.status)
                          .where(AuditEntry.action.in_(('deploy', 'undeploy')), AuditEntry.at >= min(times) - 1,
                                 AuditEntry.at <= max(times) + AUDIT_MATCH_SECS)
                          .order_by(AuditEntry.at)).all()
    made_by = _attribute(rows, times, audits)
    entries = []
    for r, at in zip(rows, times, strict=True):
        match = made_by.get(r.id)
        entries.append({'id': r.id, 'kind': r.kind, 'module': r.module_name, 'file_name': r.file_name,
                        'services': _names(r.service_names), 'at': iso(at), 'source_hash': r.source_hash,
                        'size': r.size or 0, 'actor': match.actor if match else None,
                        'source': match.source if match else 'directory', 'ok': True})
    return total, entries


def _epoch(at: datetime) -> float:
    # SQLite gives the stored UTC time back without its zone.
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


def _attribute(rows: list[Any], times: list[float], audits: list[Any]) -> dict[int, Any]:
    """Deployment row id -> the audit entry of the request that made it.

    An entry (written once the request's rows are committed) belongs to the latest rows of its kind
    (and, for an undeployment, naming its service) recorded before it, within AUDIT_MATCH_SECS; rows
    recorded together (one request, several modules) share it.
    """
    made_by: dict[int, Any] = {}
    for audit in audits:
        candidates = [(at, r) for r, at in zip(rows, times, strict=True)
                      if r.kind == audit.action and at <= audit.at and audit.at - at <= AUDIT_MATCH_SECS
                      and (r.kind == 'deploy' or audit.name in _names(r.service_names))]
        if not candidates:
            continue
        latest = max(at for at, _ in candidates)
        for at, r in candidates:
            if latest - at <= SAME_REQUEST_SECS:
                made_by.setdefault(r.id, audit)
    return made_by


def recorded_source(conn: Connection, module: str) -> str | None:
    """The source of a module's latest recorded deployment, or None."""
    return conn.execute(select(Deployment.source).where(Deployment.module_name == module, Deployment.kind == 'deploy')
                        .order_by(Deployment.id.desc()).limit(1)).scalar()


class DeployHistory:
    """Reads the deployment history and the sources of deployed services."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _read(self, work: Callable[[Connection], T]) -> T:
        return run_transaction(self._engine, work, write=False)

    def history(self, limit: int, offset: int, module: str | None = None) -> tuple[int, list[dict[str, Any]]]:
        """(total, one page newest first) of recorded deployments and undeployments."""
        return self._read(lambda c: history(c, limit, offset, module))

    def source(self, module: str, source_file: str) -> dict[str, Any]:
        """A module's source: recorded, else read from source_file; {source, origin, truncated, chars}."""
        text = self._read(lambda c: recorded_source(c, module))
        origin = 'deployment'
        if text is None:
            text, origin = _read_file(source_file), 'file'
        if text is None:
            return {'source': None, 'origin': None, 'truncated': False, 'chars': 0}
        return {'source': text[:MAX_SOURCE_CHARS], 'origin': origin, 'truncated': len(text) > MAX_SOURCE_CHARS,
                'chars': len(text)}


def _read_file(path: str) -> str | None:
    if not path or not path.endswith('.py'):
        return None
    try:
        with Path(path).open(encoding='utf-8', errors='replace') as f:
            return f.read(MAX_SOURCE_CHARS + 1)
    except OSError:
        return None
