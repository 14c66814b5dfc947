"""Every write of the admin API passes here: objects owned by files are guarded, and each change is audited.

``AdminWrites`` is falcon middleware that runs for every POST, PUT, PATCH and DELETE routed to an
admin resource, after the admin credentials were checked:

- before the responder, it reads the object the resource writes (declared by the resource as a
  ``Managed``). If an object file declared it, the write is refused (409 naming the file) unless
  the request says ``detach=true``: then the object is first handed to the admin API (``origin``
  api, no owner; the file no longer manages it), and the detach is audited on its own;
- after a successful answer, it records one audit entry (``runtime.observability.audit``): the admin user and
  client address, method, path, kind and name of the object, the action, and the object before and
  after, secrets masked. Its ``source`` says where the change came from: ``dashboard`` for the
  dashboard's API mirror (the actor is then the signed-in dashboard user), ``cli`` for a request
  with the header ``X-Conduit-Client: cli`` (the ``conduit`` CLI sends it), ``api`` for the rest.

Resources declare what they write (``managed``) and, for an action that is not a create, update or
delete, its name (``audit_action``: pause, run, redrive, ...), in one table in
``runtime.http.admin.routes``; none of them writes audit entries itself. A resource whose POST
changes nothing (waiting for a Spark job) says ``audited = False``.
``GET /admin/audit`` reads the log, newest first, with paging and filters.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import InvalidInput, ObjectNotFound, ObjectOwnedByFile
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT, Body, has_bad_chars
from runtime.http.openapi import ANY, BOOL, INT, STR, TIME, arr, integer, obj, operation, query, string
from runtime.observability import audit

if TYPE_CHECKING:
    from runtime.observability.audit import AuditLog

_log = logging.getLogger(__name__)

#: Methods that change something.
WRITE_METHODS = frozenset({'POST', 'PUT', 'PATCH', 'DELETE'})

#: Default page of GET /admin/audit.
DEFAULT_PAGE = 50


@dataclass(frozen=True)
class Managed:
    """The stored object an admin resource writes: how to find it before and after the write."""

    kind: str
    #: The model class, with ``origin`` and ``owner`` columns.
    table: Any
    #: The column that identifies the object.
    column: str
    #: The URI parameter holding it (None for a collection: the object is only known after a create).
    param: str | None = 'name'
    #: The key of the answer holding the object after the write (a create, a rename).
    answer: str | None = None
    #: Turns the URI parameter into the column's value (e.g. a topic's case-insensitive key).
    to_key: Callable[[Any], Any] | None = None
    #: The answer's field holding the key, when it is not the column's name.
    answer_field: str | None = None
    #: Whether the write changes the object (False: an action on it, e.g. running a job now).
    changes_object: bool = True

    def key(self, value: Any) -> Any:
        """The column value for a URI parameter or an answer's field."""
        return self.to_key(value) if self.to_key is not None else value

    def load(self, log: AuditLog, key: Any) -> Any:
        """The stored row, or None."""
        if isinstance(key, int) and not -MAX_DB_INT - 1 <= key <= MAX_DB_INT:
            return None  # no row has it, and PostgreSQL refuses to compare an integer column with it
        return log.load(self.table, self.column, key)


@dataclass
class _Pending:
    managed: Managed | None
    key: Any
    before: dict[str, Any] | None
    name: str


#: The header by which the CLI says a request is its own (the audit log's source 'cli').
CLIENT_HEADER = 'X-Conduit-Client'


def _source(req: falcon.Request) -> str:
    """'dashboard', 'cli' or 'api': where the request's change comes from."""
    if getattr(req.context, 'dashboard_user', None) is not None:
        return 'dashboard'
    return 'cli' if (req.get_header(CLIENT_HEADER) or '').strip().lower() == 'cli' else 'api'


def _kind_of_path(path: str) -> str:
    """The resource family of an admin path, or of its dashboard mirror (/dashboard/api/topics/... -> topics)."""
    parts = path.strip('/').split('/')
    if parts[:2] == ['dashboard', 'api']:
        parts = parts[1:]
    return parts[1][:32] if len(parts) > 1 else ''


def _actor(req: falcon.Request) -> str:
    """The user name of the request: the dashboard user, else the admin user (authenticated by RouteAuth)."""
    user = getattr(req.context, 'dashboard_user', None)
    if user is not None:
        return str(user.actor)[:200] or '?'
    header = req.get_header('Authorization') or ''
    scheme, _, value = header.partition(' ')
    if scheme.lower() != 'basic':
        return '?'
    try:
        return base64.b64decode(value.strip(), validate=True).decode('utf-8').partition(':')[0][:200] or '?'
    except (binascii.Error, UnicodeDecodeError):
        return '?'


class AdminWrites:
    """Middleware: guards objects declared in files and records every admin change in the audit log."""

    def __init__(self, parts: AdminParts) -> None:
        self._log = parts.audit

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         params: dict[str, Any]) -> None:
        if (req.method not in WRITE_METHODS or not isinstance(resource, AdminResource)
                or not getattr(resource, 'audited', True)
                or not callable(getattr(resource, f'on_{req.method.lower()}', None))):
            return
        managed: Managed | None = getattr(resource, 'managed', None)
        name = '/'.join(str(v) for v in params.values())
        key, before = None, None
        if managed is not None and managed.param is not None and managed.param in params:
            key = managed.key(params[managed.param])
            row = managed.load(self._log, key)
            if row is not None and managed.changes_object and row.origin == 'config' and row.owner:
                if not req.get_param_as_bool('detach'):
                    raise ObjectOwnedByFile(managed.kind, str(params[managed.param]), row.owner)
                row = detach(self._log, req, managed, key, row, str(params[managed.param]))
            before = audit.snapshot(row)
        req.context.admin_write = _Pending(managed, key, before, name)

    def process_response(self, req: falcon.Request, resp: falcon.Response, resource: Any,
                         req_succeeded: bool) -> None:
        pending: _Pending | None = getattr(req.context, 'admin_write', None)
        status = resp.status_code
        if pending is None or not req_succeeded or status >= 400:
            return
        managed, after, name = pending.managed, None, pending.name
        try:
            if managed is not None:
                key = pending.key
                answer = resp.media.get(managed.answer) if managed.answer and isinstance(resp.media, dict) else None
                field = managed.answer_field or managed.column
                if isinstance(answer, dict) and answer.get(field) is not None:
                    key = managed.key(answer[field])
                    name = name or str(answer[field])
                if key is not None:
                    after = audit.snapshot(managed.load(self._log, key))
            action = getattr(resource, 'audit_action', '') or _action(pending.before, after)
            kind = managed.kind if managed is not None else _kind_of_path(req.path)
            self._log.record(**_entry(req, kind, name, action or req.method.lower(), status, pending.before, after))
        except Exception:
            # The change is made: a failing audit write must not turn its answer into an error.
            _log.exception('recording the audit entry of %s %s failed', req.method, req.path)


def _action(before: dict[str, Any] | None, after: dict[str, Any] | None) -> str:
    """create, update or delete, by what existed before and after ('' when neither did)."""
    if before is None:
        return 'create' if after is not None else ''
    return 'update' if after is not None else 'delete'


def _entry(req: falcon.Request, kind: str, name: str, action: str, status: int,
           before: dict[str, Any] | None, after: dict[str, Any] | None) -> dict[str, Any]:
    """The fields of a request's audit entry."""
    return {'at': time.time(), 'actor': _actor(req), 'source': _source(req), 'client': req.remote_addr or '',
            'method': req.method,
            'path': req.path, 'kind': kind, 'name': name, 'action': action, 'status': status, 'before': before,
            'after': after}


def detach(log: AuditLog, req: falcon.Request, managed: Managed, key: Any, row: Any, name: str) -> Any:
    """Hand an object from its file to the admin API (audited); returns it as it is now."""
    detached = log.detach(managed.table, managed.column, key, lambda after: _entry(
        req, managed.kind, name, 'detach', 200, audit.snapshot(row), audit.snapshot(after)))
    _log.info('%s %r detached from %s by %s', managed.kind, name, row.owner, _actor(req))
    return detached


def _text_param(req: falcon.Request, key: str) -> str | None:
    value = req.get_param(key)
    if value is None:
        return None
    if len(value) > 400 or has_bad_chars(value):
        raise InvalidInput(key, 'must be at most 400 characters, without control characters')
    return value


def _finite(req: falcon.Request, key: str) -> float | None:
    """A time parameter in UNIX seconds; NaN passes falcon's range check (every comparison is false)."""
    value = req.get_param_as_float(key, min_value=0, max_value=1e11)
    if value is not None and not math.isfinite(value):
        raise InvalidInput(key, 'must be UNIX seconds, a number from 0 to 1e11')
    return value


class AuditResource(AdminResource):
    """GET /admin/audit: the audit log, newest first, paged and filtered."""

    audited = False

    def __init__(self, parts: AdminParts) -> None:
        self._log = parts.audit

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit = req.get_param_as_int('limit', min_value=1, max_value=audit.MAX_PAGE) or DEFAULT_PAGE
        offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
        since = _finite(req, 'since')
        until = _finite(req, 'until')
        filters = {k: _text_param(req, k) for k in ('kind', 'name', 'actor', 'action', 'source')}
        total, entries = self._log.query(limit=limit, offset=offset, since=since, until=until, **filters)
        resp.media = {'is_ok': True, 'total': total, 'limit': limit, 'offset': offset, 'entries': entries}


#: Kinds of objects a file may declare, as DetachResource names them (filled by routes.declare_writes).
DETACHABLE: dict[str, Managed] = {}


class DetachResource(AdminResource):
    """POST /admin/detach {kind, name}: the file that declared an object no longer manages it."""

    audited = False  # detach() records its own entry

    def __init__(self, parts: AdminParts) -> None:
        self._log = parts.audit

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = Body(req, {'kind', 'name'})
        kind = body.text('kind', required=True, max_len=32)
        managed = DETACHABLE.get(kind)
        if managed is None:
            raise InvalidInput('kind', f'must be one of {", ".join(sorted(DETACHABLE))}')
        name = body.text('name', required=True, allow_empty=False)
        try:
            key = managed.key(name)
        except ValueError:
            raise InvalidInput('name', f'is not a {kind} id') from None
        row = managed.load(self._log, key)
        if row is None:
            raise ObjectNotFound(kind, name)
        if row.origin != 'config' or not row.owner:
            resp.media = {'is_ok': True, 'detached': False, 'kind': kind, 'name': name,
                          'reason': 'no object file manages it'}
            return
        owner = row.owner
        detach(self._log, req, managed, key, row, name)
        resp.media = {'is_ok': True, 'detached': True, 'kind': kind, 'name': name, 'file': owner}


_ENTRY = obj({'id': INT, 'at': TIME, 'actor': STR, 'source': {'enum': list(audit.SOURCES)}, 'client': STR,
              'method': STR, 'path': STR, 'kind': STR, 'name': STR, 'action': STR, 'status': INT, 'before': ANY,
              'after': ANY},
             required=['id', 'at', 'actor', 'method', 'path', 'action'])
_TEXT = string(400)
AuditResource.openapi = {'get': operation(
    'The audit log of admin changes, newest first (secrets masked)', tags=['admin: audit'], errors=(400,),
    params=[query('limit', integer(1, audit.MAX_PAGE), f'Page size (default {DEFAULT_PAGE})'),
            query('offset', integer(0, MAX_DB_INT), 'Entries to skip'),
            query('kind', _TEXT, 'Only this kind of object (channel, security, topic, subscription, job, ...)'),
            query('name', _TEXT, 'Only this object'), query('actor', _TEXT, 'Only this admin user'),
            query('action', _TEXT, 'Only this action (create, update, delete, detach, ...)'),
            query('source', _TEXT, 'Only changes from this source (api, cli, dashboard, files)'),
            query('since', {'type': 'number', 'minimum': 0}, 'From this UNIX time'),
            query('until', {'type': 'number', 'minimum': 0}, 'Before this UNIX time')],
    response={'total': INT, 'limit': INT, 'offset': INT, 'entries': arr(_ENTRY)})}


DetachResource.openapi = {'post': operation(
    'Detach an object from the object file that declared it: the admin API and the CLI may then change it, '
    'and the file no longer does', tags=['admin: audit'], errors=(400, 404),
    body=obj({'kind': {'enum': ['security', 'channel', 'topic', 'subscription', 'permission', 'job', 'file_channel']},
              'name': string(200, 1, description='Name (a subscription: its id)')}, required=['kind', 'name']),
    response={'detached': BOOL, 'kind': STR, 'name': STR, 'file': STR})}
