"""The admin API of shared objects: Basic Auth security definitions and REST channels.

- ``/admin/security`` (GET, POST) and ``/admin/security/{name}`` (GET, PATCH username/realm/
  is_active, DELETE); ``POST /admin/security/{name}/password {password}`` changes a password.
  A password is hashed (scrypt, in gevent's thread pool) before it is stored and never comes
  back: no answer carries a password or its hash.
- ``/admin/channels`` (GET, POST) and ``/admin/channels/{name}`` (GET, PATCH, DELETE).

The resources read and check the request and answer; the administration layers
(``runtime.security.admin``, ``runtime.channels.admin``) read and write the database. Each change is
one transaction that also bumps the ``security`` or ``channels`` sync key, so every worker reloads it
within ``sync.interval_secs`` (this one at once). Objects an object file declared are refused here
unless detached (``runtime.http.admin.audit``). A channel must name a deployed service, and no two
channels may answer the same path and method (409 naming the other one).
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.channels.rest import DATA_FORMATS, Channel, parse_methods
from runtime.errors import BadRequest, ConfigError, InvalidInput
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT, Body, has_bad_chars
from runtime.http.admin.lookups import security_exists, service_known
from runtime.http.openapi import BOOL, INT, STR, arr, integer, obj, operation, query, string
from runtime.service.base import HTTP_VERBS

#: Longest password accepted, in characters (scrypt takes any length; this bounds the work).
MAX_PASSWORD_CHARS = 1000

_T = ['admin: security']
_C = ['admin: channels']

SECURITY = obj({'name': STR, 'type': {'const': 'basic_auth'}, 'username': STR, 'realm': STR, 'is_active': BOOL,
                'origin': STR}, required=['name', 'username', 'realm', 'is_active'])
CHANNEL = obj({'name': STR, 'service': STR, 'url_path': STR, 'methods': arr(STR), 'data_format': STR,
               'security': STR, 'is_active': BOOL, 'origin': STR}, required=['name', 'service', 'url_path'])
_PASSWORD = string(MAX_PASSWORD_CHARS, 1, writeOnly=True)
_METHODS = {'oneOf': [arr({'enum': list(HTTP_VERBS)}), string(200)]}


def _security_view(row: Any) -> dict[str, Any]:
    # Listed column by column: a new column (the hash above all) must never reach an answer by default.
    return {'name': row.name, 'type': 'basic_auth', 'username': row.username, 'realm': row.realm,
            'is_active': row.is_active, 'origin': row.origin}


def _channel_view(row: Any) -> dict[str, Any]:
    return {'name': row.name, 'service': row.service, 'url_path': row.url_path,
            'methods': sorted(parse_methods(row.methods)), 'data_format': row.data_format,
            'security': row.security, 'is_active': row.is_active, 'origin': row.origin}


#: Largest page of the security and channel lists.
MAX_LIST_PAGE = 1000


def _list_params(req: falcon.Request) -> tuple[str, int | None, int]:
    """(search, limit, offset) of a list: without limit, every match."""
    search = req.get_param('search') or ''
    if len(search) > 200 or has_bad_chars(search):
        raise InvalidInput('search', 'must be at most 200 characters, without control characters')
    limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_LIST_PAGE)
    offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
    return search, limit, offset


def _list_query(what: str) -> list[dict[str, Any]]:
    return [query('search', string(200), f'Only those whose {what} contains this (any case)'),
            query('limit', integer(1, MAX_LIST_PAGE), 'Page size (default: every match)'),
            query('offset', integer(0, MAX_DB_INT), 'Matches to skip')]


def _password(body: Body) -> str:
    value = body.data.get('password')
    if not isinstance(value, str) or not value:
        raise InvalidInput('password', 'is required and must be a non-empty string')
    if len(value) > MAX_PASSWORD_CHARS:
        raise InvalidInput('password', f'must be at most {MAX_PASSWORD_CHARS} characters')
    try:
        value.encode('utf-8')
    except UnicodeEncodeError:
        raise InvalidInput('password', 'is not valid Unicode') from None
    return value


def _realm(body: Body, default: str) -> str:
    value = body.text('realm', default=default) or 'Conduit'
    if '"' in value or '\\' in value:
        raise InvalidInput('realm', 'must not contain quotes or backslashes (it is sent in a header)')
    return value


def _username(body: Body, required: bool, default: str = '') -> str:
    value = body.text('username', required=required, default=default, allow_empty=False)
    if ':' in value:
        raise InvalidInput('username', "must not contain ':' (Basic Auth separates the password with it)")
    return value


class _ObjectResource(AdminResource):
    """A resource of security definitions or channels."""

    def __init__(self, parts: AdminParts) -> None:
        self._parts = parts


# Security definitions


class SecurityDefsResource(_ObjectResource):
    """GET /admin/security: every Basic Auth definition; POST: create one."""

    openapi = {
        'get': operation('List security definitions (never their passwords), by name', tags=_T, errors=(400,),
                         params=_list_query('name or user name'), response={'security': arr(SECURITY), 'total': INT}),
        'post': operation('Create a Basic Auth security definition', tags=_T, status=201, errors=(400, 409),
                          body=obj({'name': string(200, 1), 'type': {'const': 'basic_auth'},
                                    'username': string(200, 1), 'password': _PASSWORD, 'realm': string(200),
                                    'is_active': BOOL}, required=['name', 'username', 'password']),
                          response={'security': SECURITY}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        total, rows = self._parts.security_admin.page(*_list_params(req))
        resp.media = {'is_ok': True, 'security': [_security_view(r) for r in rows], 'total': total}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = Body(req, {'name', 'type', 'username', 'password', 'realm', 'is_active'})
        body.require('name', 'username', 'password')
        name = body.text('name', required=True, allow_empty=False)
        if body.text('type', default='basic_auth') != 'basic_auth':
            raise InvalidInput('type', "must be 'basic_auth', the only type supported")
        values = {'name': name, 'username': _username(body, True),
                  'realm': _realm(body, 'Conduit'),
                  'is_active': body.flag('is_active', True), 'origin': 'api'}
        row = self._parts.security_admin.create(values, _password(body))
        resp.status = falcon.HTTP_201
        resp.media = {'is_ok': True, 'security': _security_view(row)}


class SecurityDefResource(_ObjectResource):
    """GET /admin/security/{name}; PATCH: username, realm, is_active; DELETE (refused while in use)."""

    openapi = {
        'get': operation('A security definition (never its password)', tags=_T, errors=(404,),
                         response={'security': SECURITY}),
        'patch': operation('Change username, realm or is_active (the password has its own endpoint)', tags=_T,
                           errors=(400, 404, 409),
                           body=obj({'username': string(200, 1), 'realm': string(200), 'is_active': BOOL}),
                           response={'security': SECURITY}),
        'delete': operation('Delete a security definition (with its pub/sub permissions); refused while a '
                            'channel or subscription uses it', tags=_T, errors=(404, 409),
                            response={'deleted': STR}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'security': _security_view(self._parts.security_admin.get(name))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        row = self._parts.security_admin.get(name)
        body = Body(req, {'username', 'realm', 'is_active'})
        values = {'username': _username(body, False, row.username),
                  'realm': _realm(body, row.realm),
                  'is_active': body.flag('is_active', row.is_active)}
        row = self._parts.security_admin.update(name, values)
        resp.media = {'is_ok': True, 'security': _security_view(row)}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self._parts.security_admin.delete(name)
        resp.media = {'is_ok': True, 'deleted': name}


class SecurityPasswordResource(_ObjectResource):
    """POST /admin/security/{name}/password {password}: change a definition's password."""

    openapi = {'post': operation('Change the password of a security definition', tags=_T, errors=(400, 404),
                                 body=obj({'password': _PASSWORD}, required=['password']),
                                 response={'security': SECURITY})}

    def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        admin = self._parts.security_admin
        admin.get(name)
        row = admin.change_password(name, _password(Body(req, {'password'})))
        resp.media = {'is_ok': True, 'security': _security_view(row)}


# Channels


_CHANNEL_FIELDS = {'name', 'service', 'url_path', 'methods', 'data_format', 'security', 'is_active'}


def _channel_values(parts: AdminParts, body: Body, current: Any | None) -> dict[str, Any]:
    """Validated column values of a channel: the body over the current ones."""
    def text(key: str, default: str, max_len: int = 200) -> str:
        return body.text(key, required=current is None and key in ('name', 'service', 'url_path'),
                         default=default, max_len=max_len)
    raw_methods = body.data.get('methods', current.methods if current is not None else '')
    if not isinstance(raw_methods, (str, list)) or (isinstance(raw_methods, list)
                                                    and not all(isinstance(m, str) for m in raw_methods)):
        raise InvalidInput('methods', 'must be a list of HTTP methods or a comma-separated string')
    try:
        channel = Channel(name=text('name', current.name if current is not None else ''),
                          service=text('service', current.service if current is not None else ''),
                          url_path=text('url_path', current.url_path if current is not None else '', 1000),
                          methods=parse_methods(raw_methods),
                          data_format=text('data_format', current.data_format if current is not None else 'json'),
                          security=text('security', current.security if current is not None else ''),
                          is_active=body.flag('is_active', current.is_active if current is not None else True))
    except ConfigError as e:
        raise BadRequest(str(e)) from None
    if any(c in channel.url_path for c in '?#'):
        raise InvalidInput('url_path', 'must be a path only, without ? or #')
    if channel.security and not security_exists(parts, channel.security):
        raise InvalidInput('security', f'names no security definition ({channel.security!r})')
    if (current is None or channel.service != current.service) and not service_known(parts, channel.service):
        raise InvalidInput('service', f'names no deployed service ({channel.service!r})')
    parts.channel_admin.check_routes(channel.name, channel.url_path, channel.methods,
                                     current.name if current is not None else None)
    return {'name': channel.name, 'service': channel.service, 'url_path': channel.url_path,
            'methods': ','.join(sorted(channel.methods)), 'data_format': channel.data_format,
            'security': channel.security, 'is_active': channel.is_active}


class ChannelsResource(_ObjectResource):
    """GET /admin/channels: every REST channel; POST: create one (live at once, no restart)."""

    openapi = {
        'get': operation('List REST channels, by name', tags=_C, errors=(400,),
                         params=_list_query('name, path or service'),
                         response={'channels': arr(CHANNEL), 'total': INT}),
        'post': operation('Create a REST channel', tags=_C, status=201, errors=(400, 409),
                          body=obj({'name': string(200, 1), 'service': string(200, 1),
                                    'url_path': string(1000, 1, description='A path template, e.g. /api/item/{id}'),
                                    'methods': _METHODS, 'data_format': {'enum': list(DATA_FORMATS)},
                                    'security': string(200), 'is_active': BOOL},
                                   required=['name', 'service', 'url_path']),
                          response={'channel': CHANNEL}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        total, rows = self._parts.channel_admin.page(*_list_params(req))
        resp.media = {'is_ok': True, 'channels': [_channel_view(r) for r in rows], 'total': total}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = Body(req, _CHANNEL_FIELDS)
        body.require('name', 'service', 'url_path')
        values = _channel_values(self._parts, body, None)
        values['origin'] = 'api'
        row = self._parts.channel_admin.create(values)
        resp.status = falcon.HTTP_201
        resp.media = {'is_ok': True, 'channel': _channel_view(row)}


class ChannelResource(_ObjectResource):
    """GET /admin/channels/{name}; PATCH: change it (renaming too); DELETE."""

    openapi = {
        'get': operation('A REST channel', tags=_C, errors=(404,), response={'channel': CHANNEL}),
        'patch': operation('Change a REST channel', tags=_C, errors=(400, 404, 409),
                           body=obj({'name': string(200, 1), 'service': string(200, 1), 'url_path': string(1000, 1),
                                     'methods': _METHODS, 'data_format': {'enum': list(DATA_FORMATS)},
                                     'security': string(200), 'is_active': BOOL}),
                           response={'channel': CHANNEL}),
        'delete': operation('Delete a REST channel', tags=_C, errors=(404,), response={'deleted': STR}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'channel': _channel_view(self._parts.channel_admin.get(name))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        row = self._parts.channel_admin.get(name)
        values = _channel_values(self._parts, Body(req, _CHANNEL_FIELDS), row)
        row = self._parts.channel_admin.update(name, values)
        resp.media = {'is_ok': True, 'channel': _channel_view(row)}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self._parts.channel_admin.delete(name)
        resp.media = {'is_ok': True, 'deleted': name}
