"""``${VAR}`` secret references: which environment variables configuration may name, and reading them.

A value written whole as ``${NAME}`` stands for the environment variable ``NAME`` of the server
(object files' passwords, ``outgoing_rest`` passwords, REST push subscriptions' ``push_password``).
Only variables whose names start with ``CONDUIT_SECRET_`` may be referenced. Without that rule an
admin could point a push subscription's password at ``${DATABASE_PASSWORD}`` — or any other
variable of the server — and receive its value at a URL of their own.

References are checked where they are defined (object files, admin API: a ``ConfigError`` naming
the field and the rule) and again each time they are resolved, so that a reference stored before
the rule existed reaches no other variable either. Error texts may name the variable, never its
value::

    password = resolve('${CONDUIT_SECRET_CRM}', 'password', 'objects.yaml [security] crm')
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from runtime.errors import ConfigError

#: The prefix every referenced environment variable's name must have.
SECRET_ENV_PREFIX = 'CONDUIT_SECRET_'

#: How the rule is stated in errors.
RULE = f'only environment variables whose names start with {SECRET_ENV_PREFIX} may be referenced'

#: A whole value that references an environment variable.
_REFERENCE = re.compile(r'^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$')

#: References anywhere in a text (an object file).
_IN_TEXT = re.compile(r'\$\{([A-Za-z_][A-Za-z0-9_]*)\}')


def is_reference(value: object) -> bool:
    """Whether value is written as a ``${NAME}`` reference (allowed or not)."""
    return isinstance(value, str) and _REFERENCE.match(value.strip()) is not None


def reference_name(value: str, field: str, where: str) -> str:
    """The variable a reference names; ConfigError naming the field unless it is an allowed reference."""
    m = _REFERENCE.match(value.strip()) if isinstance(value, str) else None
    if m is None:
        # Never quote the value: it may be a plain password written where a reference belongs.
        raise ConfigError(where, f'{field} must be a ${{{SECRET_ENV_PREFIX}...}} reference to an environment '
                                 f'variable; a plain value is not accepted here')
    name = m.group(1)
    if not name.startswith(SECRET_ENV_PREFIX):
        raise ConfigError(where, f'{field} references ${{{name}}}: {RULE}')
    return name


def resolve(value: str, field: str, where: str, env: Mapping[str, str] | None = None) -> str:
    """The value of the variable an allowed reference names; ConfigError if it is not allowed or not set."""
    name = reference_name(value, field, where)
    env = os.environ if env is None else env
    if name not in env:
        raise ConfigError(where, f'{field} references ${{{name}}}, which is not set')
    return env[name]


def referenced_names(text: str) -> list[str]:
    """The allowed variables a text references anywhere, sorted and without repeats."""
    return sorted({name for name in _IN_TEXT.findall(text) if name.startswith(SECRET_ENV_PREFIX)})
