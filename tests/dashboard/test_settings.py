"""[dashboard] settings: defaults, environment overrides, and the values refused with a message naming the key."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from runtime.config import load_settings
from runtime.errors import ConfigError
from runtime.security.admin_credentials import viewer_password

pytestmark = pytest.mark.unit


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / 'config').mkdir(exist_ok=True)
    path = tmp_path / 'config' / 'server.toml'
    path.write_text(text)
    return path


def test_defaults_and_overrides(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, ''), env={})
    dash = settings.dashboard
    assert (dash.enabled, dash.viewer_username, dash.viewer_password, dash.viewer_password_file) == (
        True, 'viewer', '', 'var/viewer.password')
    assert (dash.session_ttl_secs, dash.idle_timeout_secs) == (28800.0, 3600.0)
    settings = load_settings(_write(tmp_path, '[dashboard]\nsession_ttl_secs = 600\n'),
                             env={'CONDUIT_DASHBOARD_ENABLED': 'false', 'CONDUIT_DASHBOARD_IDLE_TIMEOUT_SECS': '120'})
    assert settings.dashboard.session_ttl_secs == 600.0 and settings.dashboard.idle_timeout_secs == 120.0
    assert settings.dashboard.enabled is False


@pytest.mark.parametrize('text, key', [
    ('[dashboard]\nsession_ttl_secs = 10\n', 'session_ttl_secs'),
    ('[dashboard]\nidle_timeout_secs = -1\n', 'idle_timeout_secs'),
    ('[dashboard]\nviewer_username = "admin"\n', 'viewer_username'),
    ('[dashboard]\nviewer_username = "a:b"\n', 'viewer_username'),
    ('[dashboard]\nviewer_username = ""\n', 'viewer_username'),
    ('[dashboard]\nviewer_password = "a\\u0000b"\n', 'viewer_password'),
    ('[dashboard]\nno_such_key = 1\n', 'no_such_key'),
])
def test_bad_values_are_refused_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(_write(tmp_path, text), env={})
    assert key in str(caught.value)


def test_the_viewer_password_is_generated_once_into_a_private_file(tmp_path: Path) -> None:
    settings = load_settings(_write(tmp_path, ''), env={})
    with pytest.raises(ConfigError):
        viewer_password(settings)  # not yet generated, and not asked to
    first = viewer_password(settings, create=True)
    path = tmp_path / 'var' / 'viewer.password'
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600 and len(first) >= 20
    assert viewer_password(settings, create=True) == first == viewer_password(settings)
    settings.dashboard.viewer_password = 'configured'
    assert viewer_password(settings) == 'configured'
