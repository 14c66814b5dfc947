"""The admin API under /admin: its own credentials, one resource class per kind of object."""

from __future__ import annotations

import hmac
import os
from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import BadRequest, ConduitError, DeploymentError, Unauthorized
from runtime.http.body import parse_json, read_body
from runtime.security import parse_basic_header

if TYPE_CHECKING:
    from runtime.core import Runtime

#: Realm of the admin API's Basic Auth challenge.
ADMIN_REALM = 'Conduit admin'


class AdminResource:
    """Base of every admin resource: AdminAuth guards instances of it."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime


class AdminAuth:
    """Middleware: checks the admin credentials (constant-time) before any admin resource runs."""

    def __init__(self, username: str, password: str) -> None:
        self._username = username.encode()
        self._password = password.encode()

    def process_resource(self, req: falcon.Request, resp: falcon.Response, resource: Any, params: Any) -> None:
        if not isinstance(resource, AdminResource):
            return
        creds = parse_basic_header(req.get_header('Authorization'))
        if creds is None:
            raise Unauthorized(ADMIN_REALM)
        user_ok = hmac.compare_digest(creds[0].encode(), self._username)
        password_ok = hmac.compare_digest(creds[1].encode(), self._password)
        if not (user_ok and password_ok):
            raise Unauthorized(ADMIN_REALM)


def _json_body(req: falcon.Request, runtime: Runtime) -> Any:
    return parse_json(read_body(req, runtime.settings.http.max_body_size))


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
        payload = _json_body(req, self._runtime)
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
        body = _json_body(req, self._runtime)
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
        resp.media = {'is_ok': True, 'pid': os.getpid(), 'services': len(rt.store.names()),
                      'channels': len(rt.router.channels), 'database': rt.engine.url.get_backend_name(),
                      'demo': rt.demo}


def add_routes(app: falcon.App, runtime: Runtime) -> None:
    """Mount the admin resources (AdminAuth, installed as middleware, guards them)."""
    routes = {
        '/admin/status': StatusResource(runtime),
        '/admin/services': ServicesResource(runtime),
        '/admin/services/{name}': ServiceResource(runtime),
        '/admin/services/{name}/invoke': InvokeResource(runtime),
        '/admin/deploy': DeployResource(runtime),
    }
    for path, resource in routes.items():
        app.add_route(path, resource)



