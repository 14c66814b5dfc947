"""The base of every admin resource, and the prefix every admin route lives under."""

from __future__ import annotations

from typing import Any

from runtime.http.admin.parts import AdminParts
from runtime.http.auth import ADMIN

__all__ = ['ADMIN_PREFIX', 'AdminParts', 'AdminResource']

#: Every admin route lives under this prefix; the rest of it is served by AdminNotFound.
ADMIN_PREFIX = '/admin'


class AdminResource:
    """Base of every admin resource: routed ones need the admin credentials (runtime.http.auth).

    Each is made with the admin API's parts (``AdminParts``) and keeps the ones it uses.
    Writes pass through ``runtime.http.admin.audit.AdminWrites``, which reads ``managed``,
    ``audit_action`` and ``audited`` (set for every resource in ``runtime.http.admin.routes``).
    """

    auth = ADMIN
    #: The stored object this resource writes (an audit.Managed), if any.
    managed: Any = None
    #: The audit log's name of what a write does, when it is not a create, update or delete.
    audit_action = ''
    #: False for a resource whose writes change nothing (they are not audited).
    audited = True

    def __init__(self, parts: AdminParts) -> None:
        # Every resource is made alike (runtime.http.admin.routes); each family keeps the parts it uses.
        pass
