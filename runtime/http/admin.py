"""The admin API under /admin: its own credentials, one resource class per kind of object."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import BadRequest, ConduitError, DeploymentError
from runtime.http.auth import ADMIN, AdminNotFound
from runtime.http.body import read_json
from runtime.http.openapi import ANY, BOOL, INT, STR, TIME, arr, obj, operation, query, string

if TYPE_CHECKING:
    from runtime.core import Runtime

#: Every admin route lives under this prefix; the rest of it is served by AdminNotFound.
ADMIN_PREFIX = '/admin'


class AdminResource:
    """Base of every admin resource: routed ones need the admin credentials (runtime.http.auth)."""

    auth = ADMIN

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime




def _service_dict(info: Any) -> dict[str, Any]:
    cls = info.service_class
    return {'name': info.name, 'module': info.module_name, 'source_file': info.source_file,
            'deployed_at': info.deployed_at.isoformat(), 'input': list(cls._required_input),
            'input_optional': list(cls._optional_input), 'output': list(cls._required_output),
            'methods': sorted(cls._verbs), 'doc': (cls.__doc__ or '').strip()}


class ServicesResource(AdminResource):
    """GET /admin/services: every deployed service."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {'is_ok': True, 'services': [_service_dict(i) for i in self._runtime.store.list()]}


class ServiceResource(AdminResource):
    """GET /admin/services/{name}: one service; DELETE: undeploy it everywhere."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'service': _service_dict(self._runtime.store.info(name))}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self._runtime.hot_deployer.undeploy(name)
        resp.media = {'is_ok': True, 'undeployed': name}


class InvokeResource(AdminResource):
    """POST /admin/services/{name}/invoke: run a service with the body as its payload."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        payload = read_json(req)
        timeout = req.get_param_as_float('timeout', min_value=0.001)
        try:
            response = self._runtime.invoker.invoke(name, payload, timeout=timeout, cid=req.context.cid)
        except ConduitError:
            raise
        except Exception as e:
            # The caller is an authenticated operator: tell them what the service raised.
            raise _ServiceFailed(name, e) from e
        resp.media = {'is_ok': True, 'cid': req.context.cid, 'response': response}


class _ServiceFailed(ConduitError):
    http_status = 500

    def __init__(self, name: str, exc: Exception) -> None:
        super().__init__(f'service {name!r} raised {type(exc).__name__}: {exc}')


class DeployResource(AdminResource):
    """POST /admin/deploy {file_name, source}: hot-deploy a module on every worker."""

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_json(req)
        if not isinstance(body, dict):
            raise BadRequest('body must be a JSON object with file_name and source')
        file_name, source = body.get('file_name'), body.get('source')
        if not isinstance(file_name, str) or not file_name.endswith('.py'):
            raise BadRequest("'file_name' must be the name of a .py file")
        if not isinstance(source, str):
            raise BadRequest("'source' must be the module's source text")
        # Only the base name counts: a path in it must not reach outside the pick-up directory.
        base = os.path.basename(file_name.replace('\\', '/'))
        try:
            names = self._runtime.hot_deployer.deploy(base[:-3], source, base)
        except DeploymentError as e:
            raise BadRequest(str(e)) from None
        resp.media = {'is_ok': True, 'services': names}


class StatusResource(AdminResource):
    """GET /admin/status: what this worker runs."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        rt = self._runtime
        resp.media = {'is_ok': True, 'pid': os.getpid(), 'master_pid': os.getppid(), 'services': len(rt.store.names()),
                      'channels': len(rt.router.channels), 'database': rt.engine.url.get_backend_name(),
                      'demo': rt.demo}


def add_routes(app: falcon.App, runtime: Runtime) -> None:
    """Mount the admin resources, and AdminNotFound under every other admin path."""
    routes = {
        '/admin/status': StatusResource(runtime),
        '/admin/services': ServicesResource(runtime),
        '/admin/services/{name}': ServiceResource(runtime),
        '/admin/services/{name}/invoke': InvokeResource(runtime),
        '/admin/deploy': DeployResource(runtime),
    }
    # Imported here: admin_jobs subclasses AdminResource from this module.
    from runtime.http.admin_jobs import routes as job_routes
    routes.update(job_routes(runtime))
    from runtime.http.admin_spark import routes as spark_routes
    routes.update(spark_routes(runtime))
    from runtime.http.admin_permissions import routes as permission_routes
    routes.update(permission_routes(runtime))
    from runtime.http.admin_pubsub import routes as pubsub_routes
    routes.update(pubsub_routes(runtime))
    from runtime.http.admin_objects import routes as object_routes
    routes.update(object_routes(runtime))
    for path, resource in routes.items():
        if not path.startswith(ADMIN_PREFIX + '/') or not isinstance(resource, AdminResource):
            raise ValueError(f'admin route {path} must be an AdminResource under {ADMIN_PREFIX}/')
        app.add_route(path, resource)
    # Unknown admin paths answer 404 only after the admin credentials, like known ones.
    not_found = AdminNotFound()
    app.add_route(ADMIN_PREFIX, not_found)
    app.add_route(ADMIN_PREFIX + '/{rest:path}', not_found)


# OpenAPI operations of the resources above (read by runtime.http.openapi).

_SERVICE = obj({'name': STR, 'module': STR, 'source_file': STR, 'deployed_at': TIME, 'input': arr(STR),
                'input_optional': arr(STR), 'output': arr(STR), 'methods': arr(STR), 'doc': STR},
               required=['name'], additional=True)
_A = ['admin: services']
StatusResource.openapi = {'get': operation(
    'What this worker runs', tags=_A, errors=(),
    response={'pid': INT, 'master_pid': INT, 'services': INT, 'channels': INT, 'database': STR, 'demo': BOOL})}
ServicesResource.openapi = {'get': operation('List deployed services', tags=_A, errors=(),
                                             response={'services': arr(_SERVICE)})}
ServiceResource.openapi = {
    'get': operation('A deployed service', tags=_A, errors=(404,), response={'service': _SERVICE}),
    'delete': operation('Undeploy a service from every worker', tags=_A, errors=(404,), response={'undeployed': STR}),
}
InvokeResource.openapi = {'post': operation(
    'Invoke a service with the body as its payload', tags=_A, errors=(400, 404, 500, 504), body=ANY,
    body_required=False, params=[query('timeout', {'type': 'number', 'minimum': 0.001}, 'Seconds before it is '
                                                                                       'stopped (504)')],
    description="A service that raises answers 500 naming the exception: the caller is an operator.",
    response={'response': ANY})}
DeployResource.openapi = {'post': operation(
    'Hot-deploy a module on every worker', tags=_A, errors=(400,),
    body=obj({'file_name': string(255, 4, pattern=r'\.py$'), 'source': STR}, required=['file_name', 'source']),
    response={'services': arr(STR)})}

