"""The dashboard's Jinja2 templates: loaded from this package, every value HTML-escaped unless marked safe.

Templates live in ``runtime/http/dashboard/templates`` and ship in the wheel. Undefined
variables raise, so a page that forgets one fails its test instead of showing an empty space.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from runtime.http.dashboard.static import static_url


@cache
def environment() -> Environment:
    """The one template environment of this process."""
    env = Environment(loader=PackageLoader('runtime.http.dashboard', 'templates'), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals['static_url'] = static_url
    return env


def render(template: str, **context: Any) -> str:
    """A template rendered with context."""
    return environment().get_template(template).render(**context)
