"""Whether a named security definition or service exists, for the admin families that refer to them.

Both ask beyond this worker's copy: another worker may have made the object a moment ago.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.http.admin.parts import AdminParts


def security_exists(parts: AdminParts, name: str) -> bool:
    """Whether a security definition exists, asking the database.

    Not this worker's copy: the definition may have been made a moment ago through another worker.
    """
    if parts.security.get(name) is not None:
        return True
    return parts.permission_admin.exists(name)


def service_known(parts: AdminParts, name: str) -> bool:
    """Whether a service is deployed: in this worker, or recorded by another a moment ago."""
    return parts.store.has(name) or name in parts.recorded_services()
