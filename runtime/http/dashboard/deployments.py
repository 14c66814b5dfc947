"""The deployments page (/dashboard/deployments): the history, uploading a module, undeploying a service.

The history comes from the mirror of ``/admin/deployments``; an upload posts ``{file_name, source}``
to the mirror of ``/admin/deploy`` and an undeployment sends ``DELETE`` to the mirror of
``/admin/services/{name}`` after a confirmation, so both are audited with the dashboard user. The
forms are rendered for admins only.
"""

from __future__ import annotations

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static


class DeploymentsPage(DashboardPage):
    """GET /dashboard/deployments: deployment history, upload and undeploy."""

    template = 'deployments.html'
    title = 'Deployments'
    nav = 'deployments'
    scripts = ('deployments.js',)


register_static('deployments.js')
