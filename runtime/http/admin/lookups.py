"""Whether a named security definition or service exists, for the admin families that refer to them.

Both ask beyond this worker's copy: another worker may have made the object a moment ago.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select

from runtime.db.blocking import run_transaction
from runtime.db.models import BasicAuthDef
from runtime.service_catalog import recorded_names

if TYPE_CHECKING:
    from runtime.core import Runtime


def security_exists(runtime: Runtime, name: str) -> bool:
    """Whether a security definition exists, asking the database.

    Not this worker's copy: the definition may have been made a moment ago through another worker.
    """
    if runtime.security.get(name) is not None:
        return True
    return run_transaction(runtime.engine, lambda c: c.execute(
        select(BasicAuthDef.id).where(BasicAuthDef.name == name)).first(), write=False) is not None


def service_known(runtime: Runtime, name: str) -> bool:
    """Whether a service is deployed: in this worker, or recorded by another a moment ago."""
    return runtime.store.has(name) or name in recorded_names(runtime.engine)
