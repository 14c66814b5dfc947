"""What the dashboard works with: given by the falcon app (runtime.http.app) to every page and route."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from runtime.config import Settings
    from runtime.http.admin.parts import AdminParts
    from runtime.http.auth import SignInThrottle
    from runtime.http.dashboard.gate import SessionGate
    from runtime.http.signin_log import FailedSignInLog
    from runtime.observability.metrics import Metrics
    from runtime.security.basic_auth import SecurityRegistry
    from runtime.security.dashboard_sessions import SessionStore


@dataclass(frozen=True)
class DashboardParts:
    """The collaborators of the dashboard's pages, sign-in and API mirror."""

    settings: Settings
    #: What the admin API works with (the API mirror's resources are made with it; pages may read through it).
    admin: AdminParts
    sessions: SessionStore
    gate: SessionGate
    #: The admin and viewer credentials (definitions named ADMIN_DEFINITION and VIEWER_DEFINITION).
    credentials: SecurityRegistry
    throttle: SignInThrottle
    failures_log: FailedSignInLog
    metrics: Metrics
