"""The services pages: the list with usage (/dashboard/services) and one service (/dashboard/services/{name}).

The list and the usage come from the API mirror (``/stats/services``, ``/services/{name}/source``,
``/services/{name}/usage``); one service's page is rendered with what the worker's service store
knows of it (input, output, methods, documentation), and an unknown name is a 404 page naming it.
The invoke form is rendered for admins only; it posts to the mirror of ``/admin/services/{name}/invoke``.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static


class ServicesPage(DashboardPage):
    """GET /dashboard/services: deployed services with invocations, errors, mean and p99 of the last hour."""

    template = 'services.html'
    title = 'Services'
    nav = 'services'
    scripts = ('services.js',)


class ServicePage(DashboardPage):
    """GET /dashboard/services/{name}: a service's source, input/output, users, usage and invoke form."""

    template = 'service.html'
    title = 'Service'
    nav = 'services'
    scripts = ('service.js',)

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        info = self.parts.admin.store.info(params['name'])  # ServiceNotFound: a 404 page naming it
        cls = info.service_class
        return {'title': f'Service {info.name}', 'service': {
            'name': info.name, 'module': info.module_name, 'doc': (cls.__doc__ or '').strip(),
            'input': list(cls._required_input), 'input_optional': list(cls._optional_input),
            'output': list(cls._required_output), 'methods': sorted(cls._verbs),
            'deployed_at': info.deployed_at.isoformat(timespec='seconds')}}


for _name in ('services.js', 'service.js'):
    register_static(_name)
