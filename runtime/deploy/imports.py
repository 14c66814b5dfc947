"""How hot-deployed modules import each other: by plain name, from the sources the server runs.

A module deployed as ``shop_utils.py`` is importable as ``import shop_utils`` by every other
deployed module. The import is served from the source this worker runs (recorded in the database),
never from the pick-up directory, so a server started later on the same database, without the
files, resolves the same names. The finder sits last on ``sys.meta_path`` and a module name that
the standard library, an installed distribution or anything on ``sys.path`` already answers to is
refused, so a deployed file can never shadow (or be shadowed by) another module.

Dependencies are read from the ``import`` statements of each source (``ast``), which is what
lets the deployer reload the dependents of a helper that changed and load a set of modules in
dependency order. Imports computed at run time (``importlib.import_module(name)``) still work but
are not tracked.
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType

from runtime.errors import DeploymentError


@dataclass(frozen=True)
class ModuleSource:
    """The source of one deployed module and the file it came from."""

    source: str
    file_name: str
    digest: str


def imported_names(source: str) -> set[str]:
    """Top-level module names a source imports with absolute import statements (anywhere in it)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return set()  # compiling it will report the error with its line
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split('.', 1)[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split('.', 1)[0])
    return names


def dependents(changed: Iterable[str], sources: Mapping[str, ModuleSource]) -> set[str]:
    """Modules of sources that import one of changed, directly or through others (changed excluded)."""
    imports = {name: imported_names(s.source) for name, s in sources.items()}
    closure = set(changed)
    grew = True
    while grew:
        grew = False
        for name, names in imports.items():
            if name not in closure and names & closure:
                closure.add(name)
                grew = True
    return closure - set(changed)


def dependency_order(sources: Mapping[str, ModuleSource]) -> list[str]:
    """Module names with every module after the ones it imports; ties, and cycles, in name order."""
    deps = {name: imported_names(s.source) & sources.keys() - {name} for name, s in sources.items()}
    order: list[str] = []
    done: set[str] = set()
    while len(done) < len(deps):
        ready = sorted(n for n in deps if n not in done and deps[n] <= done)
        if not ready:
            # A cycle: start it at its first name; Python's own rules for partial modules apply.
            ready = [min(n for n in deps if n not in done)]
        for name in ready:
            order.append(name)
            done.add(name)
    return order


class DeployedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers ``import NAME`` for deployed modules, from their recorded source."""

    def __init__(self) -> None:
        #: What each deployed module name runs in this process.
        self.live: dict[str, ModuleSource] = {}
        #: Sources being loaded right now (a deployment in progress); they win over live ones.
        self.pending: dict[str, ModuleSource] = {}
        #: (module name, exception) for each module whose execution failed, innermost first.
        self.failures: list[tuple[str, BaseException]] = []

    def source_of(self, name: str) -> ModuleSource | None:
        """The source an import of name runs now, if it is a deployed module."""
        return self.pending.get(name) or self.live.get(name)

    def find_spec(self, fullname: str, path: object = None,
                  target: object = None) -> importlib.machinery.ModuleSpec | None:
        """A spec for a deployed top-level module name, else None (the next finder's turn)."""
        if path is not None:
            return None
        found = self.source_of(fullname)
        if found is None:
            return None
        return importlib.util.spec_from_loader(fullname, self, origin=found.file_name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        """The default module object."""
        return None

    def exec_module(self, module: ModuleType) -> None:
        """Compile and run the module's source in it; a failure is remembered for the error message."""
        found = self.source_of(module.__name__)
        if found is None:
            raise ImportError(f'no deployed module {module.__name__!r}', name=module.__name__)
        module.__file__ = found.file_name
        try:
            exec(compile(found.source, found.file_name, 'exec'), module.__dict__)
        except BaseException as e:
            self.failures.append((module.__name__, e))
            raise

    def owns(self, module: object) -> bool:
        """Whether a module object was loaded by this finder."""
        spec = getattr(module, '__spec__', None)
        return spec is not None and spec.loader is self


#: The one finder of this process: sys.modules is process-wide, so deployed names are too.
FINDER = DeployedModuleFinder()


def install() -> DeployedModuleFinder:
    """Put the finder last on sys.meta_path (once) and return it."""
    if FINDER not in sys.meta_path:
        sys.meta_path.append(FINDER)
    return FINDER


def check_name(name: str, file_name: str) -> None:
    """Refuse a module name that another module of this process already answers to."""
    hint = f'rename {file_name}'
    if name in sys.builtin_module_names or name in sys.stdlib_module_names:
        raise DeploymentError(file_name, f'module name {name!r} is taken by the standard library; {hint}')
    current = sys.modules.get(name)
    if current is not None and not FINDER.owns(current):
        where = getattr(current, '__file__', None) or 'an imported module'
        raise DeploymentError(file_name, f'module name {name!r} is taken by {where}; {hint}')
    spec = _spec_elsewhere(name)
    if spec is not None:
        where = spec.origin if spec.origin not in (None, 'namespace') else (
            ', '.join(spec.submodule_search_locations or []) or 'a package on sys.path')
        raise DeploymentError(file_name, f'module name {name!r} is taken by {where} (installed or on '
                                         f'sys.path); {hint}')


def _spec_elsewhere(name: str) -> importlib.machinery.ModuleSpec | None:
    """What an import of name finds without the deployed modules (editable installs have finders of their own)."""
    for finder in sys.meta_path:
        if finder is FINDER or not hasattr(finder, 'find_spec'):
            continue
        try:
            spec = finder.find_spec(name, None)
        except Exception:  # a third-party finder that fails on a name it does not know: not taken by it
            continue
        if spec is not None:
            return spec
    return None
