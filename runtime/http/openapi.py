"""``GET /openapi.json``: an OpenAPI 3.1 document of every HTTP endpoint, generated from the app itself.

The generator walks the falcon router, so a route cannot be served without being described.
Each resource class documents its own methods in an ``openapi`` class attribute: a dict mapping
the lower-case HTTP method to an OpenAPI Operation object, usually built with ``operation()``::

    class TopicsResource(AdminResource):
        openapi = {'get': operation('List topics', tags=['topics'], response={'topics': arr(TOPIC)})}

What the generator adds so that resources stay short: path parameters a method does not declare
(typed from falcon's converters: ``{id:int}`` is an integer), the security of the resource's ``auth``
policy (admin credentials, or a Basic Auth definition for pub/sub; runtime.http.auth), 401 answers where
credentials are needed, a ``4XX`` error answer, and an operationId. A method of a resource with no
``openapi`` entry still appears, with a minimal operation taken from the class docstring. REST
channels are routed by a sink, not the router: they are described from the live channel table,
each with the methods and security it declares.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import falcon

from runtime.http.auth import ADMIN, CALLER, routed_resources

if TYPE_CHECKING:
    from runtime.channels.rest import ChannelRouter

#: Methods a channel with no methods of its own answers.
CHANNEL_ANY_METHODS = ('get', 'post', 'put', 'patch', 'delete')

_HTTP_METHODS = ('get', 'put', 'post', 'delete', 'options', 'head', 'patch')
_FIELD = re.compile(r'{([A-Za-z_][A-Za-z0-9_]*)(?::([A-Za-z_]+)[^}]*)?}')

# Schema building blocks

STR: dict[str, Any] = {'type': 'string'}
INT: dict[str, Any] = {'type': 'integer'}
NUM: dict[str, Any] = {'type': 'number'}
BOOL: dict[str, Any] = {'type': 'boolean'}
#: Any JSON value.
ANY: dict[str, Any] = {}
NULLABLE_STR: dict[str, Any] = {'type': ['string', 'null']}
NULLABLE_INT: dict[str, Any] = {'type': ['integer', 'null']}
#: An ISO 8601 time, or null when there is none.
TIME: dict[str, Any] = {'type': ['string', 'null'], 'format': 'date-time'}

ERROR: dict[str, Any] = {
    'type': 'object', 'required': ['is_ok', 'status', 'details'],
    'properties': {'is_ok': {'const': False}, 'cid': NULLABLE_STR, 'status': STR, 'details': STR},
}

_ERROR_TEXT = {400: 'Malformed request; details names the field', 401: 'Missing or wrong credentials',
               403: 'Not allowed', 404: 'No such object', 405: 'Method not allowed',
               409: 'Conflicts with an existing object', 413: 'Body too large', 503: 'Storage unavailable'}


def obj(properties: dict[str, Any] | None = None, required: tuple[str, ...] | list[str] = (),
        additional: bool | dict[str, Any] = False, **extra: Any) -> dict[str, Any]:
    """A JSON object schema; by default it admits no properties beyond those named."""
    schema: dict[str, Any] = {'type': 'object', 'properties': properties or {}, 'additionalProperties': additional}
    if required:
        schema['required'] = list(required)
    schema.update(extra)
    return schema


def arr(items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A JSON array schema."""
    return {'type': 'array', 'items': items, **extra}


def string(max_length: int | None = None, min_length: int | None = None, **extra: Any) -> dict[str, Any]:
    """A string schema with optional length limits."""
    schema: dict[str, Any] = {'type': 'string', **extra}
    if max_length is not None:
        schema['maxLength'] = max_length
    if min_length is not None:
        schema['minLength'] = min_length
    return schema


def integer(minimum: int | None = None, maximum: int | None = None, **extra: Any) -> dict[str, Any]:
    """An integer schema with optional bounds."""
    schema: dict[str, Any] = {'type': 'integer', **extra}
    if minimum is not None:
        schema['minimum'] = minimum
    if maximum is not None:
        schema['maximum'] = maximum
    return schema


def query(name: str, schema: dict[str, Any], description: str = '', required: bool = False) -> dict[str, Any]:
    """A query string parameter."""
    param = {'name': name, 'in': 'query', 'required': required, 'schema': schema}
    if description:
        param['description'] = description
    return param


def json_content(schema: dict[str, Any]) -> dict[str, Any]:
    """A content map with one application/json schema."""
    return {'application/json': {'schema': schema}}


def operation(summary: str, *, tags: list[str] | None = None, body: dict[str, Any] | None = None,
              body_required: bool = True, response: dict[str, Any] | None = None, status: int = 200,
              params: list[dict[str, Any]] | None = None, errors: tuple[int, ...] = (400,),
              description: str = '', response_schema: dict[str, Any] | None = None,
              example: Any = None) -> dict[str, Any]:
    """An Operation object of a JSON endpoint answering ``{is_ok: true, **response}``.

    ``response`` maps the answer's properties (besides is_ok and cid) to their schemas; pass
    ``response_schema`` instead for an answer of another shape. ``errors`` are the 4xx/5xx
    statuses the endpoint answers on purpose, each with the error envelope. ``example`` is a
    request body that works (fuzzers start from it).
    """
    if response_schema is None:
        props = {'is_ok': {'const': True}, 'cid': STR, **(response or {})}
        response_schema = obj(props, required=['is_ok', *(response or {})], additional=True)
    op: dict[str, Any] = {'summary': summary, 'responses': {
        str(status): {'description': 'OK' if status < 300 else 'Created', 'content': json_content(response_schema)}}}
    if description:
        op['description'] = description
    if tags:
        op['tags'] = list(tags)
    if params:
        op['parameters'] = list(params)
    if body is not None:
        op['requestBody'] = {'required': body_required, 'content': json_content(body)}
        if example is not None:
            op['requestBody']['content']['application/json']['example'] = example
    for code in errors:
        op['responses'][str(code)] = _error_response(code)
    return op


def _error_response(code: int | str) -> dict[str, Any]:
    text = _ERROR_TEXT.get(code, 'Error') if isinstance(code, int) else 'Client error'
    return {'description': text, 'content': json_content({'$ref': '#/components/schemas/Error'})}


# The document


def _path_fields(uri_template: str) -> tuple[str, list[dict[str, Any]]]:
    """The OpenAPI path of a falcon template (converters dropped) and its path parameters."""
    params = []
    for m in _FIELD.finditer(uri_template):
        schema = INT if m.group(2) == 'int' else ({'type': 'number'} if m.group(2) == 'float' else STR)
        params.append({'name': m.group(1), 'in': 'path', 'required': True, 'schema': dict(schema)})
    return _FIELD.sub(lambda m: '{' + m.group(1) + '}', uri_template), params


def _security_for(resource: Any) -> tuple[list[dict[str, list[str]]] | None, str]:
    policy = getattr(resource, 'auth', ADMIN)
    if policy == ADMIN:
        return [{'adminAuth': []}], 'admin'
    if policy == CALLER:
        return [{'basicAuth': []}], 'pubsub'
    return None, 'runtime'


def _fallback(resource: Any, method: str) -> dict[str, Any]:
    doc = (type(resource).__doc__ or type(resource).__name__).strip().splitlines()[0]
    return {'summary': doc, 'description': 'Not documented in detail by its resource.',
            'responses': {'200': {'description': 'OK', 'content': json_content(ANY)}}}


def _complete(op: dict[str, Any], path: str, method: str, path_params: list[dict[str, Any]],
              resource: Any) -> dict[str, Any]:
    op = copy.deepcopy(op)
    declared = {p.get('name') for p in op.get('parameters', []) if p.get('in') == 'path'}
    missing = [p for p in path_params if p['name'] not in declared]
    if missing:
        op['parameters'] = missing + list(op.get('parameters', []))
    security, tag = _security_for(resource)
    op.setdefault('tags', [tag])
    responses = op.setdefault('responses', {'200': {'description': 'OK'}})
    if security is not None:
        op.setdefault('security', security)
    if op.get('security'):
        responses.setdefault('401', _error_response(401))
    responses.setdefault('4XX', _error_response('4XX'))
    op.setdefault('operationId', f'{method}_' + re.sub(r'[^A-Za-z0-9]+', '_', path).strip('_'))
    return op


def _channel_paths(router: ChannelRouter) -> dict[str, dict[str, Any]]:
    paths: dict[str, dict[str, Any]] = {}
    for channel in sorted(router.channels.values(), key=lambda c: c.name):
        if not channel.is_active:
            continue
        _path, params = _path_fields(channel.url_path)
        body_types = {'json': json_content(ANY), 'form': {'application/x-www-form-urlencoded': {'schema': obj(
            additional=STR)}}, 'text': {'text/plain': {'schema': STR}}}[channel.data_format]
        for method in sorted(m.lower() for m in channel.methods) or CHANNEL_ANY_METHODS:
            op: dict[str, Any] = {
                'summary': f'Channel {channel.name}: invokes service {channel.service}', 'tags': ['channels'],
                'operationId': f'channel_{re.sub(r"[^A-Za-z0-9]+", "_", channel.name)}_{method}',
                'parameters': params,
                'responses': {'200': {'description': "The service's response", 'content': json_content(ANY)},
                              '4XX': _error_response('4XX')}}
            if method in ('post', 'put', 'patch'):
                op['requestBody'] = {'required': False, 'content': body_types}
            if channel.security:
                op['security'] = [{'basicAuth': []}]
                op['responses']['401'] = _error_response(401)
            # Two channels may share a path with different methods: later ones add theirs.
            paths.setdefault(channel.url_path, {}).setdefault(method, op)
    return paths


def build_document(app: falcon.App, router: ChannelRouter) -> dict[str, Any]:
    """The OpenAPI 3.1 document of an app: every routed resource, plus the REST channels of router."""
    paths: dict[str, dict[str, Any]] = {}
    for uri_template, resource in routed_resources(app):
        if getattr(resource, 'openapi_hidden', False):
            continue
        path, path_params = _path_fields(uri_template)
        specs = getattr(type(resource), 'openapi', None) or {}
        for method in _HTTP_METHODS:
            if not callable(getattr(resource, f'on_{method}', None)):
                continue
            op = specs.get(method) or _fallback(resource, method)
            paths.setdefault(path, {})[method] = _complete(op, path, method, path_params, resource)
    for path, ops in _channel_paths(router).items():
        paths.setdefault(path, ops)
    return {
        'openapi': '3.1.0',
        'info': {'title': 'Conduit', 'version': _version(),
                 'description': 'Services, REST channels and a durable publish/subscribe broker. '
                                '/admin needs the admin credentials; /pubsub and channels with security '
                                'need a Basic Auth definition.'},
        'paths': paths,
        'components': {
            'schemas': {'Error': ERROR},
            'securitySchemes': {
                'adminAuth': {'type': 'http', 'scheme': 'basic', 'description': 'The [admin] credentials'},
                'basicAuth': {'type': 'http', 'scheme': 'basic', 'description': 'A Basic Auth security definition'},
            },
        },
    }


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version('conduit')
    except PackageNotFoundError:
        return '0'


class OpenApiResource:
    """GET /openapi.json: this document."""

    openapi = {'get': operation('The OpenAPI document of every HTTP endpoint', tags=['runtime'], errors=(),
                                response_schema=obj({'openapi': STR, 'info': obj(additional=True),
                                                     'paths': obj(additional=True),
                                                     'components': obj(additional=True)},
                                                    required=['openapi', 'paths'], additional=True))}

    def __init__(self, app: falcon.App, router: Callable[[], ChannelRouter], auth: str = ADMIN) -> None:
        """router: the channel router now (it is replaced whole when channels change)."""
        self._app = app
        self._router = router
        #: ADMIN unless http.openapi_public: the document names every channel, topic path and parameter.
        self.auth = auth

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = build_document(self._app, self._router())
