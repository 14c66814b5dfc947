"""The admin API of services: list, show, invoke, undeploy and hot-deploy them, and the worker's status."""

from __future__ import annotations

import os
from typing import Any

import falcon

from runtime.errors import BadRequest, ConduitError, DeploymentError, ObjectInUse
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.body import read_json
from runtime.http.openapi import ANY, BOOL, INT, STR, TIME, arr, obj, operation, query, string


def _service_dict(info: Any) -> dict[str, Any]:
    cls = info.service_class
    return {'name': info.name, 'module': info.module_name, 'source_file': info.source_file,
            'deployed_at': info.deployed_at.isoformat(), 'input': list(cls._required_input),
            'input_optional': list(cls._optional_input), 'output': list(cls._required_output),
            'methods': sorted(cls._verbs), 'doc': (cls.__doc__ or '').strip()}


class _ServiceResource(AdminResource):
    """A resource of services: the services of this worker, and the deployer that changes them everywhere."""

    def __init__(self, parts: AdminParts) -> None:
        self._parts = parts


class ServicesResource(_ServiceResource):
    """GET /admin/services: every deployed service."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {'is_ok': True, 'services': [_service_dict(i) for i in self._parts.store.list()]}


class ServiceResource(_ServiceResource):
    """GET /admin/services/{name}: one service; DELETE: undeploy it everywhere."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'service': _service_dict(self._parts.store.info(name))}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        force = req.get_param_as_bool('force') or False
        self._parts.store.info(name)  # 404 before anything else
        users = self._parts.channel_admin.service_users(name)
        if users and not force:
            raise ServiceInUse(name, users)
        self._parts.hot_deployer.undeploy(name)
        resp.media = {'is_ok': True, 'undeployed': name, 'now_pointing_nowhere': users}


class ServiceInUse(ObjectInUse):
    """Undeploying a service that channels, jobs or subscriptions name, without force."""

    def __init__(self, name: str, users: list[str]) -> None:
        super().__init__('service', name, users)
        self.args = (f'service {name!r} is used by {", ".join(users)}; undeploying it would leave them '
                     f'pointing nowhere. Change or delete them first, or force it (force=true, --force)',)


class InvokeResource(_ServiceResource):
    """POST /admin/services/{name}/invoke: run a service with the body as its payload."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        payload = read_json(req)
        timeout = req.get_param_as_float('timeout', min_value=0.001)
        try:
            response = self._parts.invoker.invoke(name, payload, timeout=timeout, cid=req.context.cid)
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


#: Most modules one deployment may carry.
MAX_DEPLOY_MODULES = 100


def _deploy_entry(entry: Any, where: str) -> tuple[str, str, str]:
    """(module name, source, base file name) of one module of a deployment body."""
    if not isinstance(entry, dict):
        raise BadRequest(f'{where or "body"} must be a JSON object with file_name and source')
    file_name, source = entry.get('file_name'), entry.get('source')
    if not isinstance(file_name, str) or not file_name.endswith('.py'):
        raise BadRequest(f"'{where}file_name' must be the name of a .py file")
    if not isinstance(source, str):
        raise BadRequest(f"'{where}source' must be the module's source text")
    # Only the base name counts: a path in it must not reach outside the pick-up directory.
    base = os.path.basename(file_name.replace('\\', '/'))
    return base[:-3], source, base


class DeployResource(_ServiceResource):
    """POST /admin/deploy {file_name, source} or {modules: [...]}: hot-deploy modules on every worker.

    Several modules are deployed together, all or none: a helper and the services that use it can
    change in one step.
    """

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_json(req)
        if not isinstance(body, dict):
            raise BadRequest('body must be a JSON object with file_name and source, or with modules')
        if 'modules' in body:
            entries = body['modules']
            if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_DEPLOY_MODULES:
                raise BadRequest(f"'modules' must be a list of 1 to {MAX_DEPLOY_MODULES} objects "
                                 f"with file_name and source")
            parsed = [_deploy_entry(e, f'modules[{i}].') for i, e in enumerate(entries)]
        else:
            parsed = [_deploy_entry(body, '')]
        modules: dict[str, tuple[str, str]] = {}
        for name, source, base in parsed:
            if name in modules:
                raise BadRequest(f'module {name!r} ({base}) is given twice')
            modules[name] = (source, base)
        try:
            deployed = self._parts.hot_deployer.deploy_many(modules)
        except DeploymentError as e:
            raise BadRequest(str(e)) from None
        resp.media = {'is_ok': True, 'services': [n for name, _, _ in parsed for n in deployed.services[name]],
                      'reloaded': deployed.reloaded}


class StatusResource(_ServiceResource):
    """GET /admin/status: what this worker runs."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        parts = self._parts
        resp.media = {'is_ok': True, 'pid': os.getpid(), 'master_pid': os.getppid(),
                      'services': len(parts.store.names()), 'channels': parts.channel_count(),
                      'database': parts.database, 'demo': parts.demo}


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
    'delete': operation('Undeploy a service from every worker; refused (409) while channels, jobs or subscriptions '
                        'use it, unless forced', tags=_A, errors=(404, 409),
                        params=[query('force', BOOL, 'Undeploy even though others use it; the answer lists them')],
                        response={'undeployed': STR, 'now_pointing_nowhere': arr(STR)}),
}
InvokeResource.openapi = {'post': operation(
    'Invoke a service with the body as its payload', tags=_A, errors=(400, 404, 500, 504), body=ANY,
    body_required=False, params=[query('timeout', {'type': 'number', 'minimum': 0.001}, 'Seconds before it is '
                                                                                       'stopped (504)')],
    description="A service that raises answers 500 naming the exception: the caller is an operator.",
    response={'response': ANY})}
_MODULE = obj({'file_name': string(255, 4, pattern=r'\.py$'), 'source': STR}, required=['file_name', 'source'])
DeployResource.openapi = {'post': operation(
    'Hot-deploy a module on every worker', tags=_A, errors=(400,),
    description='Either one module (file_name and source) or several deployed together, all or none (modules). '
                'reloaded names the files of live modules that import a deployed one and ran again with it.',
    body={'oneOf': [_MODULE, obj({'modules': arr(_MODULE, minItems=1, maxItems=MAX_DEPLOY_MODULES)},
                                 required=['modules'])]},
    response={'services': arr(STR), 'reloaded': arr(STR)})}
