"""The admin API of inbound file-transfer channels, under /admin/file-channels.

- ``GET /admin/file-channels``: every channel; ``POST``: create one (201; 409 when the name is taken).
- ``GET /admin/file-channels/{name}``: one channel; ``PATCH``: change the fields given (``name``
  renames it; ``null`` puts a field back to its default); ``PUT``: replace the whole definition
  (fields left out take their defaults); ``DELETE``: delete it (its run history stays).
- ``GET /admin/file-channels/{name}/runs[?limit=&offset=&state=]``: the files it processed, most
  recent first, with how far each got.

Bodies hold the fields of ``runtime.files.definition.FileChannelDef``; a wrong one is a 400
naming the field, an unknown channel a 404 naming it. SFTP passwords and private keys are accepted
only as ``${CONDUIT_SECRET_...}`` references: a secret written in clear is refused without being
repeated, and no answer can hold one, since nothing else is stored. The layer that reads and
writes the database is ``runtime.files.admin``; every change there bumps the ``file_channels``
sync key, so each worker's pollers follow within ``sync.interval_secs``. Channels an object file
declared are refused here unless detached (``runtime.http.admin.audit``).
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.errors import BadRequest, ConfigError, InvalidInput
from runtime.files.admin import MAX_RUNS_PAGE, RUN_STATES
from runtime.files.definition import (
    AFTER,
    COMPLETE_WHEN,
    FORMATS,
    INVOKE_PER,
    MAX_NAME_CHARS,
    MAX_PATH_CHARS,
    FileChannelDef,
)
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT, Body
from runtime.http.admin.lookups import service_known
from runtime.http.openapi import BOOL, INT, NUM, STR, TIME, arr, integer, obj, operation, query, string

_T = ['admin: file transfer']

#: Every field a body may hold.
FIELDS = frozenset(FileChannelDef.__dataclass_fields__)

#: Default page of runs.
DEFAULT_RUNS_PAGE = 50


def _where(name: Any) -> str:
    """How errors name the channel a body is about (its name only when it is a sane one)."""
    if isinstance(name, str) and 0 < len(name) <= MAX_NAME_CHARS:
        return f'file channel {name!r}'
    return 'file channel'


def _definition(parts: AdminParts, values: dict[str, Any], current: FileChannelDef | None) -> FileChannelDef:
    """The checked definition of a body, with what needs the database checked too; 400 naming the field."""
    try:
        definition = FileChannelDef.from_values(values, _where(values.get('name')))
    except ConfigError as e:
        raise BadRequest(str(e)) from None
    if definition.service and (current is None or definition.service != current.service) \
            and not service_known(parts, definition.service):
        raise InvalidInput('service', f'names no deployed service ({definition.service!r})')
    missing = parts.file_channel_admin.missing_topics(definition.topics)
    if missing:
        raise InvalidInput('topics', f'names topics that do not exist: {", ".join(repr(t) for t in missing)} '
                                     '(create them first)')
    return definition


class _FileChannelResource(AdminResource):
    """A resource of file channels."""

    def __init__(self, parts: AdminParts) -> None:
        self._parts = parts
        self._admin = parts.file_channel_admin


class FileChannelsResource(_FileChannelResource):
    """GET /admin/file-channels: every file channel; POST: create one (its pollers start without a restart)."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {'is_ok': True, 'file_channels': [c.view() for c in self._admin.list()]}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = Body(req, set(FIELDS))
        body.require('name', 'directory')
        stored = self._admin.create(_definition(self._parts, body.data, None))
        resp.status = falcon.HTTP_201
        resp.media = {'is_ok': True, 'file_channel': stored.view()}


class FileChannelResource(_FileChannelResource):
    """GET /admin/file-channels/{name}; PATCH: change some fields; PUT: replace it; DELETE."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'file_channel': self._admin.get(name).view()}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        current = self._admin.get(name)
        body = Body(req, set(FIELDS))
        try:
            before = current.definition
        except ConfigError:
            before = None  # a stored definition the checks no longer pass: the body must mend it
        values = {**current.values, **body.data}
        if values.get('name') is None:
            values['name'] = name
        stored = self._admin.update(name, _definition(self._parts, values, before))
        resp.media = {'is_ok': True, 'file_channel': stored.view()}

    def on_put(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        current = self._admin.get(name)
        body = Body(req, set(FIELDS))
        body.require('directory')
        values = dict(body.data)
        if values.get('name') is None:
            values['name'] = name
        try:
            before = current.definition
        except ConfigError:
            before = None
        stored = self._admin.update(name, _definition(self._parts, values, before))
        resp.media = {'is_ok': True, 'file_channel': stored.view()}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self._admin.delete(name)
        resp.media = {'is_ok': True, 'deleted': name}


class FileChannelRunsResource(_FileChannelResource):
    """GET /admin/file-channels/{name}/runs: the files a channel processed, most recent first."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_RUNS_PAGE) or DEFAULT_RUNS_PAGE
        offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
        state = req.get_param('state')
        if state is not None and state not in RUN_STATES:
            raise InvalidInput('state', f'must be one of {", ".join(RUN_STATES)}')
        self._admin.get(name)  # 404 naming the channel
        total, runs = self._admin.runs(name, limit, offset, state)
        resp.media = {'is_ok': True, 'channel': name, 'total': total, 'limit': limit, 'offset': offset,
                      'runs': runs}


# OpenAPI operations of the resources above (read by runtime.http.openapi).

_PATH = string(MAX_PATH_CHARS)
_REF = string(300, description='A ${CONDUIT_SECRET_...} reference, never the secret itself')
_BODY_FIELDS: dict[str, Any] = {
    'name': string(MAX_NAME_CHARS, 1),
    'directory': string(MAX_PATH_CHARS, 1, description='Absolute local directory, or the remote directory '
                                                       'with sftp_host'),
    'patterns': arr(string(255, 1), minItems=1, maxItems=100, description='Globs on file names, e.g. *.csv'),
    'recursive': BOOL, 'poll_interval_secs': {'type': 'number', 'minimum': 0.05, 'maximum': 86400},
    'complete_when': {'enum': list(COMPLETE_WHEN)}, 'stable_polls': integer(1, 1000),
    'marker_suffix': string(100, 1), 'format': {'enum': list(FORMATS)},
    'records': {'enum': ['', 'file', 'each']}, 'encoding': string(64, 1), 'csv_delimiter': string(1, 1),
    'topics': arr(string(200, 1), maxItems=100), 'service': string(200),
    'invoke_per': {'enum': list(INVOKE_PER)}, 'invoke_retries': integer(0, 100),
    'invoke_retry_wait_secs': {'type': 'number', 'minimum': 0, 'maximum': 3600},
    'batch_size': integer(1, 10_000), 'max_parallel_files': integer(1, 64), 'after': {'enum': list(AFTER)},
    'move_to': string(MAX_PATH_CHARS, 1, description='Path template: {name} {stem} {suffix} {channel} {date} '
                                                     '{time} {year} {month} {day}'),
    'error_dir': string(MAX_PATH_CHARS, 1), 'reprocess_same': BOOL, 'is_active': BOOL,
    'sftp_host': string(255), 'sftp_port': integer(1, 65535), 'sftp_username': string(200),
    'sftp_password': _REF, 'sftp_private_key': _REF,
    'sftp_host_key': string(16_384, description="The server's public key line, e.g. 'ssh-ed25519 AAAA...'"),
    'sftp_known_hosts': _PATH,
}
FILE_CHANNEL = obj({**_BODY_FIELDS, 'origin': STR, 'updated_at': NUM, 'updated_at_iso': TIME,
                    'problem': string(description='Why the stored definition no longer passes the checks')},
                   required=['name', 'directory', 'format', 'topics', 'service', 'is_active', 'origin'])
_RUN = obj({'id': INT, 'channel': STR, 'file_name': STR, 'size': INT, 'mtime': NUM, 'content_hash': STR,
            'state': {'enum': list(RUN_STATES)}, 'records_done': INT, 'published': INT, 'invoked': INT,
            'owner': STR, 'started_at': NUM, 'started_at_iso': TIME, 'finished_at': {'type': ['number', 'null']},
            'finished_at_iso': TIME, 'error': STR}, required=['id', 'file_name', 'state'])
_EXAMPLE = {'name': 'invoices', 'directory': '/var/conduit/inbox/invoices', 'patterns': ['*.csv'], 'format': 'csv',
            'topics': ['invoice.received'], 'after': 'move'}

FileChannelsResource.openapi = {
    'get': operation('List inbound file-transfer channels', tags=_T, errors=(),
                     response={'file_channels': arr(FILE_CHANNEL)}),
    'post': operation('Create a file-transfer channel (its pollers start without a restart)', tags=_T, status=201,
                      errors=(400, 409), body=obj(_BODY_FIELDS, required=['name', 'directory']), example=_EXAMPLE,
                      response={'file_channel': FILE_CHANNEL}),
}
FileChannelResource.openapi = {
    'get': operation('A file-transfer channel', tags=_T, errors=(404,), response={'file_channel': FILE_CHANNEL}),
    'patch': operation('Change the fields given (name renames it; null restores a default)', tags=_T,
                       errors=(400, 404, 409), body=obj(_BODY_FIELDS), response={'file_channel': FILE_CHANNEL}),
    'put': operation('Replace the whole definition (fields left out take their defaults)', tags=_T,
                     errors=(400, 404, 409), body=obj(_BODY_FIELDS, required=['directory']), example=_EXAMPLE,
                     response={'file_channel': FILE_CHANNEL}),
    'delete': operation('Delete a file-transfer channel (its run history stays)', tags=_T, errors=(404,),
                        response={'deleted': STR}),
}
FileChannelRunsResource.openapi = {'get': operation(
    'The files a channel processed, most recent first', tags=_T, errors=(400, 404),
    params=[query('limit', integer(1, MAX_RUNS_PAGE), f'Page size (default {DEFAULT_RUNS_PAGE})'),
            query('offset', integer(0, MAX_DB_INT), 'Runs to skip'),
            query('state', {'enum': list(RUN_STATES)}, 'Only runs in this state')],
    response={'channel': STR, 'total': INT, 'limit': INT, 'offset': INT, 'runs': arr(_RUN)})}
