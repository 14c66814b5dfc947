"""The dashboard's static files: an explicit whitelist served at /dashboard/static/<name>.

Only registered names are served (``register_static``; a page module registers its own files), so
no path a client sends ever reaches the file system. ``plotly.min.js`` comes from the installed
``plotly`` package (its ``package_data``), never from the repository or a CDN. Pages link to files
through ``static_url``, which adds a version (a hash of the content): such a URL is cached for a
year, any other one is revalidated.
"""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import falcon

from runtime.errors import ObjectNotFound
from runtime.http.auth import PUBLIC

#: The dashboard's own static files.
STATIC_DIR = Path(__file__).resolve().parent / 'static'

#: Content types by file suffix.
CONTENT_TYPES = {'.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
                 '.svg': 'image/svg+xml', '.png': 'image/png', '.ico': 'image/x-icon',
                 '.json': 'application/json'}

#: Cache-Control of a versioned URL.
IMMUTABLE = 'public, max-age=31536000, immutable'

#: name -> file; and name -> (content, version) once read.
_FILES: dict[str, Path] = {}
_LOADED: dict[str, tuple[bytes, str]] = {}


def _plotly_js() -> Path:
    spec = importlib.util.find_spec('plotly')
    if spec is None or spec.origin is None:
        return Path('/nonexistent/plotly.min.js')
    return Path(spec.origin).parent / 'package_data' / 'plotly.min.js'


def register_static(name: str, path: Path | None = None) -> None:
    """Serve a file as /dashboard/static/<name> (by default the file of that name in this package's static/)."""
    if '/' in name or name.startswith('.') or Path(name).suffix not in CONTENT_TYPES:
        raise ValueError(f'static file name {name!r} must be a plain name ending in one of {sorted(CONTENT_TYPES)}')
    _FILES[name] = path or STATIC_DIR / name
    _LOADED.pop(name, None)


def _load(name: str) -> tuple[bytes, str]:
    loaded = _LOADED.get(name)
    if loaded is None:
        path = _FILES.get(name)
        if path is None:
            raise ObjectNotFound('static file', name)
        try:
            content = path.read_bytes()
        except OSError:
            raise ObjectNotFound('static file', name) from None
        loaded = _LOADED[name] = (content, hashlib.sha256(content).hexdigest()[:12])
    return loaded


def static_url(name: str) -> str:
    """The versioned URL of a registered static file."""
    return f'/dashboard/static/{name}?v={_load(name)[1]}'


class StaticResource:
    """GET /dashboard/static/{name}: a whitelisted file, no session needed (the sign-in form uses them)."""

    auth = PUBLIC
    openapi_hidden = True
    dashboard = True

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        content, version = _load(name)
        resp.content_type = CONTENT_TYPES[Path(name).suffix]
        resp.set_header('Cache-Control', IMMUTABLE if req.get_param('v') == version else 'no-cache')
        resp.etag = f'"{version}"'
        if req.get_header('If-None-Match') == resp.etag:
            resp.status = falcon.HTTP_304
            return
        resp.data = content

    def on_head(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self.on_get(req, resp, name)
        resp.data = None
        resp.content_length = len(_load(name)[0])


for _name in ('dashboard.js', 'dashboard.css'):
    register_static(_name)
register_static('plotly.min.js', _plotly_js())
