"""The passwords of the admin API and the dashboard's viewer: configured, or generated once into a private file.

The server writes each file at its first start (0600, whatever the umask); the HTTP layer and the
CLI read them. Nothing here needs the rest of the runtime.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from runtime.config import Settings
from runtime.errors import ConfigError
from runtime.util.datafiles import create_private_file, private_dir


def admin_password(settings: Settings, create: bool = False) -> str:
    """The admin API password: configured, else read from (or, with create, written to) its file."""
    if settings.admin.password:
        return settings.admin.password
    return _file_password(settings.path(settings.admin.password_file), 'admin.password', create)


def viewer_password(settings: Settings, create: bool = False) -> str:
    """The dashboard viewer's password: configured, else read from (or, with create, written to) its file."""
    if settings.dashboard.viewer_password:
        return settings.dashboard.viewer_password
    return _file_password(settings.path(settings.dashboard.viewer_password_file), 'dashboard.viewer_password',
                          create)


def _file_password(path: Path, key: str, create: bool) -> str:
    if path.exists():
        return path.read_text(encoding='utf-8').strip()
    if not create:
        raise ConfigError(key, f'not set, and {path} does not exist yet (start the server once)')
    private_dir(path.parent)
    password = secrets.token_urlsafe(18)
    create_private_file(path)  # 0600 before the password is in it, whatever the umask
    path.write_text(password + '\n', encoding='utf-8')
    return password
