"""The admin API of pub/sub permissions, under /admin/security/{name}/permissions.

- ``GET``: the definition's ``pub`` and ``sub`` lists (empty when it has none: it may do nothing).
- ``PUT {pub?: [...], sub?: [...], patterns?: "pub=...\\nsub=..."}``: replace them (a list left out
  becomes empty); each entry is a topic name or a pattern, validated, order kept.
- ``DELETE``: remove them.

Changes take effect at once in this worker and within the sync interval in the others
(runtime.pubsub.permissions). The definition must exist (404 otherwise).
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.errors import BadRequest
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.body import read_json
from runtime.pubsub import permissions

_NAME_PARAM = {'name': 'name', 'in': 'path', 'required': True, 'description': 'Name of a security definition',
               'schema': {'type': 'string'}}
_PATTERNS = {'type': 'array', 'items': {'type': 'string', 'maxLength': 200},
             'description': 'Topic names or patterns (* one segment, ** any depth), tried exact names first, '
                            'then patterns in order'}
_GRANT = {'type': 'object', 'required': ['security', 'pub', 'sub'],
          'properties': {'security': {'type': 'string'}, 'pub': _PATTERNS, 'sub': _PATTERNS,
                         'origin': {'type': ['string', 'null'], 'description': "'config', 'api', or null (none set)"}}}
_ERROR = {'type': 'object', 'required': ['is_ok', 'cid', 'status', 'details'],
          'properties': {'is_ok': {'const': False}, 'cid': {'type': 'string'}, 'status': {'type': 'string'},
                         'details': {'type': 'string'}}}


def _answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {'description': description, 'content': {'application/json': {'schema': schema}}}


_OK_GRANT = _answer({'type': 'object', 'required': ['is_ok', 'permissions'],
                     'properties': {'is_ok': {'const': True}, 'permissions': _GRANT}}, 'The permissions')
_401 = _answer(_ERROR, 'No or wrong admin credentials')
_404 = _answer(_ERROR, 'No such security definition (or, for DELETE, no permissions set)')


def _none_set(name: str) -> dict[str, Any]:
    return {'security': name, 'pub': [], 'sub': [], 'origin': None}


class PermissionsResource(AdminResource):
    """GET|PUT|DELETE /admin/security/{name}/permissions: a definition's pub/sub permissions."""

    #: OpenAPI 3.1 Operation objects by lower-case HTTP method (read by the /openapi.json builder).
    openapi: dict[str, dict[str, Any]] = {
        'get': {'summary': "A security definition's pub/sub permissions", 'tags': ['admin: security'],
                'parameters': [_NAME_PARAM], 'responses': {'200': _OK_GRANT, '401': _401, '404': _404}},
        'put': {'summary': "Replace a security definition's pub/sub permissions", 'tags': ['admin: security'],
                'parameters': [_NAME_PARAM],
                'requestBody': {'required': True, 'content': {'application/json': {'schema': {
                    'type': 'object', 'properties': {
                        'pub': _PATTERNS, 'sub': _PATTERNS,
                        'patterns': {'type': 'string', 'description': "Zato's lines: pub=<pattern> or sub=<pattern>, "
                                                                      "one a line, added after pub and sub"}}}}}},
                'responses': {'200': _OK_GRANT, '400': _answer(_ERROR, 'A malformed list or pattern (named)'),
                              '401': _401, '404': _404}},
        'delete': {'summary': "Remove a security definition's pub/sub permissions", 'tags': ['admin: security'],
                   'parameters': [_NAME_PARAM],
                   'responses': {'200': _answer({'type': 'object', 'required': ['is_ok', 'deleted'], 'properties': {
                       'is_ok': {'const': True}, 'deleted': {'type': 'string'}}}, 'Removed'),
                       '401': _401, '404': _404}},
    }

    def __init__(self, parts: AdminParts) -> None:
        self._permissions = parts.permission_admin

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        grant = self._permissions.get(name)
        resp.media = {'is_ok': True, 'permissions': grant.as_dict() if grant else _none_set(name)}

    def on_put(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        body = read_json(req)
        if not isinstance(body, dict):
            raise BadRequest('body must be a JSON object: {pub?: [...], sub?: [...], patterns?: "..."}')
        unknown = sorted(set(body) - {'pub', 'sub', 'patterns'})
        if unknown:
            raise BadRequest(f'unknown key(s): {", ".join(unknown)}'[:300])
        pub, sub = permissions.parse_grant(body)
        grant = self._permissions.update(name, pub, sub)
        resp.media = {'is_ok': True, 'permissions': grant.as_dict() if grant else _none_set(name)}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self._permissions.delete(name)
        resp.media = {'is_ok': True, 'deleted': name}
