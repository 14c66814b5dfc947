"""``admin_client``: falcon's ``TestClient`` over a runtime's real app, signed in as the admin.

HTTP behaviour (channels, security, the admin API, pub/sub over REST) without gunicorn: the app
is ``Runtime.make_app`` of a started runtime (``runtime_factory``), so requests go
through the same middleware, authentication and error mapping as a server's, on the runtime's
database.

    def test_channels_are_listed(runtime_factory):
        client = admin_client(runtime_factory())
        assert client.simulate_get('/admin/channels').status_code == 200
        assert client.as_user('nobody', 'wrong').simulate_get('/admin/channels').status_code == 401
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import falcon
import falcon.testing

from runtime.security.admin_credentials import admin_password

if TYPE_CHECKING:
    from runtime.core import Runtime


def basic_auth(username: str, password: str) -> str:
    """The value of an Authorization header with these Basic Auth credentials."""
    return 'Basic ' + base64.b64encode(f'{username}:{password}'.encode()).decode('ascii')


class AppClient(falcon.testing.TestClient):
    """A TestClient sending one user's Basic Auth credentials with every request."""

    __test__ = False

    def __init__(self, app: falcon.App, username: str | None = None, password: str = '',
                 headers: dict[str, str] | None = None) -> None:
        headers = dict(headers or {})
        if username is not None:
            headers['Authorization'] = basic_auth(username, password)
        super().__init__(app, headers=headers)
        self.username = username

    def as_user(self, username: str, password: str) -> AppClient:
        """A client of the same app signed in as another user."""
        return AppClient(self.app, username, password)

    def anonymous(self) -> AppClient:
        """A client of the same app sending no credentials."""
        return AppClient(self.app)


def admin_client(runtime: Runtime, **app_options: Any) -> AppClient:
    """A TestClient of the runtime's falcon app with the admin credentials set by default."""
    settings = runtime.settings
    return AppClient(runtime.make_app(**app_options), settings.admin.username, admin_password(settings, create=True))
