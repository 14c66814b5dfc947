"""Which services exist, as far as a process that has not imported them can tell.

The master process applies the object files before any worker has loaded a service, and
``conduit objects apply`` runs without a server; both still refuse a channel or job naming a
service that does not exist. They read the names from the service modules' source without running
it (the ``Service`` subclasses of each module in ``services/`` and the hot-deploy directory, named
by their ``name = '...'`` or by the module and class names, as the loader names them) and from the
deployments recorded in the database. A worker adds the services it has loaded. A class counts
when a base's name ends in ``Service`` or is such a class of the same module: erring on the side
of a name that is not deployed keeps a valid file from being refused.
"""

from __future__ import annotations

import ast
import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from sqlalchemy import Engine, select

from runtime.db.models import Deployment
from runtime.service.base import derive_name

_log = logging.getLogger(__name__)


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ''


def names_in_source(source: str, module_name: str) -> set[str]:
    """The service names a module's source defines (classes deriving from Service in it)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()
    service_classes: set[str] = set()
    names = set()
    for node in tree.body:
        # A base named *Service (Service, SparkService, an imported base of the user's) or a class of
        # this module that is one: without running the code, a name too many beats a false refusal.
        if not isinstance(node, ast.ClassDef) or not any(
                _base_name(b).endswith('Service') or _base_name(b) in service_classes for b in node.bases):
            continue
        service_classes.add(node.name)
        name = derive_name(module_name, node.name)
        for stmt in node.body:
            if (isinstance(stmt, ast.Assign) and any(isinstance(t, ast.Name) and t.id == 'name' for t in stmt.targets)
                    and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)):
                name = stmt.value.value
        names.add(name)
    return names


def names_in_dirs(dirs: Iterable[Path]) -> set[str]:
    """Service names the modules of some directories define."""
    found: set[str] = set()
    for directory in dirs:
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob('*.py')):
            if path.name.startswith('_'):
                continue
            try:
                found |= names_in_source(path.read_text(encoding='utf-8'), path.stem)
            except (OSError, UnicodeDecodeError) as e:
                _log.warning('%s not read for its service names: %s', path, e)
    return found


def recorded_names(engine: Engine) -> set[str]:
    """Service names of the modules deployed through the admin API or another server."""
    with engine.connect() as conn:
        rows = conn.execute(select(Deployment.kind, Deployment.service_names).where(Deployment.kind == 'deploy')).all()
    found: set[str] = set()
    for row in rows:
        try:
            found.update(str(n) for n in json.loads(row.service_names))
        except (ValueError, TypeError):
            continue
    return found


def catalog(engine: Engine, dirs: Iterable[Path], loaded: Callable[[str], bool] | None = None
            ) -> Callable[[str], bool]:
    """A check of whether a service exists: loaded here, defined in dirs, or recorded as deployed.

    The directories and the table are read now, once: call this again for a later application.
    """
    names = names_in_dirs(dirs) | recorded_names(engine)

    def exists(name: str) -> bool:
        return name in names or (loaded is not None and loaded(name))

    return exists
