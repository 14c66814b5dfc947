"""REST channel definitions and the router that maps a request path to one of them.

A channel maps a URL path template (``/api/customer/{id}``) and a set of methods to a service.
The router keeps static paths in a dict and templates in a list ordered most specific first
(more literal characters first), and is replaced as a whole when channels change, so a request
always sees one consistent set.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from runtime.errors import ConfigError
from runtime.service.base import HTTP_VERBS

#: Data formats a channel may declare.
DATA_FORMATS = ('json', 'form', 'text')

#: Path prefixes owned by the runtime itself.
RESERVED_PREFIXES = ('/admin', '/pubsub', '/health', '/metrics', '/openapi.json')

_PARAM = re.compile(r'\{([A-Za-z_][A-Za-z0-9_]*)\}')


@dataclass
class Channel:
    """One REST channel."""

    name: str
    service: str
    url_path: str
    methods: frozenset[str] = frozenset()
    data_format: str = 'json'
    security: str = ''
    is_active: bool = True
    _regex: re.Pattern[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f'channel {self.name!r}'
        if not self.name:
            raise ConfigError('channel', 'name is required')
        if not self.service:
            raise ConfigError(where, 'service is required')
        if not self.url_path.startswith('/'):
            raise ConfigError(where, f'url_path must start with "/", not {self.url_path!r}')
        if any(self.url_path == p or self.url_path.startswith(p + '/') for p in RESERVED_PREFIXES):
            raise ConfigError(where, f'url_path {self.url_path!r} is reserved by the runtime')
        bad = [m for m in self.methods if m not in HTTP_VERBS]
        if bad:
            raise ConfigError(where, f'unknown method {bad[0]!r}; use one of {", ".join(HTTP_VERBS)}')
        if self.data_format not in DATA_FORMATS:
            raise ConfigError(where, f'data_format must be one of {", ".join(DATA_FORMATS)}, '
                                     f'not {self.data_format!r}')
        self._regex = _compile(self.url_path, where) if '{' in self.url_path else None

    @property
    def literal_len(self) -> int:
        """How many literal characters the template has (more is more specific)."""
        return len(_PARAM.sub('', self.url_path))

    def match(self, path: str) -> dict[str, str] | None:
        """Path parameters if path matches this channel's template, else None."""
        if self._regex is None:
            return {} if path == self.url_path else None
        m = self._regex.match(path)
        return m.groupdict() if m else None


def _compile(template: str, where: str) -> re.Pattern[str]:
    parts, pos, seen = ['^'], 0, set()
    for m in _PARAM.finditer(template):
        parts.append(re.escape(template[pos:m.start()]))
        name = m.group(1)
        if name in seen:
            raise ConfigError(where, f'url_path repeats the parameter {{{name}}}')
        seen.add(name)
        parts.append(f'(?P<{name}>[^/]+)')
        pos = m.end()
    rest = template[pos:]
    if '{' in rest or '}' in rest:
        raise ConfigError(where, f'url_path {template!r} has a malformed {{parameter}}')
    parts.append(re.escape(rest) + '$')
    return re.compile(''.join(parts))


def parse_methods(value: str | list[str] | None) -> frozenset[str]:
    """Methods from a config value: 'GET', 'GET,POST', a list, or empty for any."""
    if not value:
        return frozenset()
    items = value.split(',') if isinstance(value, str) else value
    return frozenset(str(m).strip().upper() for m in items if str(m).strip())


class ChannelRouter:
    """Finds the channel for a path and method."""

    def __init__(self, channels: list[Channel] | None = None) -> None:
        active = [c for c in channels or [] if c.is_active]
        self._static: dict[str, list[Channel]] = {}
        for c in active:
            if c._regex is None:
                self._static.setdefault(c.url_path, []).append(c)
        self._templates = sorted((c for c in active if c._regex is not None), key=lambda c: -c.literal_len)
        self.channels = {c.name: c for c in channels or []}

    def find(self, path: str) -> tuple[list[Channel], dict[str, str]]:
        """Every channel of the first matching path, and its path parameters."""
        found = self._static.get(path)
        if found:
            return found, {}
        for c in self._templates:
            params = c.match(path)
            if params is not None:
                same = [t for t in self._templates if t.url_path == c.url_path]
                return same, params
        return [], {}
