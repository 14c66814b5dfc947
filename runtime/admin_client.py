"""A small client of the admin API, used by the CLI (stdlib only, so the CLI starts fast).

Nothing here may import the server stack (runtime.core, SQLAlchemy, gevent): every CLI command
that talks to a running server would pay for loading it.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.request
from typing import Any

from runtime.config import Settings
from runtime.errors import ConduitError, ConfigError


class AdminCallFailed(ConduitError):
    """The admin API answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        self.status = status
        super().__init__(message)


def base_url(settings: Settings) -> str:
    """The URL the server listens on, as seen from this host."""
    host, _, port = settings.server.bind.rpartition(':')
    if host in ('', '0.0.0.0', '[::]'):
        host = '127.0.0.1'
    scheme = 'https' if settings.server.certfile else 'http'
    return f'{scheme}://{host}:{port}'


def for_cli(obj: dict[str, Any], timeout: float = 30.0) -> AdminClient:
    """The client of a CLI invocation (its ``ctx.obj``): its settings, and its --url if one was given."""
    return AdminClient(obj['settings'], timeout=timeout, url=obj.get('url'))


def is_up(url: str, timeout: float = 5.0) -> bool:
    """Whether a Conduit server answers at url (GET /health, which needs no credentials)."""
    context = ssl._create_unverified_context() if url.startswith('https') else None
    try:
        with urllib.request.urlopen(url.rstrip('/') + '/health', timeout=timeout, context=context) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as e:
        return e.code == 503  # up, but its database does not answer
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _admin_password(settings: Settings) -> str:
    """The admin password: configured, else the one the server generated into its file."""
    if settings.admin.password:
        return settings.admin.password
    path = settings.path(settings.admin.password_file)
    try:
        return path.read_text(encoding='utf-8').strip()
    except FileNotFoundError:
        raise ConfigError('admin.password', f'not set, and {path} does not exist (start the server once, or run '
                                            'from its project directory, or give --config or '
                                            'CONDUIT_ADMIN_PASSWORD)') from None


class AdminClient:
    """Calls /admin endpoints with the admin credentials."""

    def __init__(self, settings: Settings, timeout: float = 30.0, url: str | None = None) -> None:
        self._url = (url or base_url(settings)).rstrip('/')
        creds = f'{settings.admin.username}:{_admin_password(settings)}'.encode()
        self._auth = 'Basic ' + base64.b64encode(creds).decode()
        self._timeout = timeout
        self._ssl = ssl._create_unverified_context() if self._url.startswith('https') else None

    def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        """One request; the decoded JSON answer, or AdminCallFailed with the server's details."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self._url + path, data=data, method=method,
                                     headers={'Authorization': self._auth, 'Content-Type': 'application/json',
                                              # The audit log records the change's source as 'cli'.
                                              'X-Conduit-Client': 'cli'})
        try:
            with urllib.request.urlopen(req, timeout=self._timeout, context=self._ssl) as resp:
                return json.loads(resp.read() or b'{}')
        except urllib.error.HTTPError as e:
            try:
                details = json.loads(e.read()).get('details', e.reason)
            except ValueError:
                details = e.reason
            raise AdminCallFailed(f'{e.code}: {details}', e.code) from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, 'reason', e)
            raise AdminCallFailed(f'cannot reach the server at {self._url}: {reason}') from None
