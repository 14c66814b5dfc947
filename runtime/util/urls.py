"""URLs as logs, errors and the admin API show them: without what may be a secret."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit


def shown_target(url: str) -> str:
    """A target URL as logs, errors and the admin API show it: never a password, query or fragment."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return '(invalid URL)'
    user = unquote(parts.username or '')
    host = parts.hostname or ''
    host = f'[{host}]' if ':' in host else host
    netloc = f'{user + "@" if user else ""}{host}{f":{port}" if port else ""}'
    return f'{parts.scheme}://{netloc}{parts.path}'
