"""The runtime imports one way: no cycle anywhere in runtime/, and only the server, the CLI and the test kit
import the composition root (runtime.core); no family of admin resources or CLI commands imports another;
areas live in packages (seven modules at the top of runtime/); falcon and runtime.http are imported only
by the HTTP layer and those that build or start it.

Imports are read from the source with ``ast``, every one of them: at module level, under
``if TYPE_CHECKING:`` and inside functions. A function-local import still ties two modules
together; moving an import into a function must not be a way to hide a cycle.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / 'runtime'

#: Packages that must be free of import cycles among their own modules.
ACYCLIC_PACKAGES = ('runtime.http.admin', 'runtime.cli')

#: The composition root, and the modules that may import it: it builds every other part.
ROOT = 'runtime.core'
ROOT_USERS = ('runtime.server', 'runtime.cli', 'runtime.testing')

def module_files(root: Path = RUNTIME) -> dict[str, Path]:
    """Every module under root by dotted name (a package by its own name, for its __init__.py)."""
    modules = {}
    for path in sorted(root.rglob('*.py')):
        parts = list(path.relative_to(root.parent).with_suffix('').parts)
        if parts[-1] == '__init__':
            parts.pop()
        modules['.'.join(parts)] = path
    return modules


def _target(name: str, known: dict[str, Path]) -> str | None:
    """The known module a dotted name refers to: itself, or the nearest enclosing module."""
    while name and name not in known:
        name = name.rpartition('.')[0]
    return name or None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The known modules a module imports anywhere in its source (module level, TYPE_CHECKING, functions)."""
    package = module if path.name == '__init__.py' else module.rpartition('.')[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')[:len(package.split('.')) - node.level + 1]
                base = '.'.join(anchor + ([base] if base else []))
            # ``from package import name``: name may be a submodule, or an attribute of the package.
            names = [f'{base}.{alias.name}' if f'{base}.{alias.name}' in known else base for alias in node.names]
        else:
            continue
        for name in names:
            target = _target(name, known)
            if target is not None and target != module:
                found.add(target)
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the known modules it imports."""
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]], scope: Iterable[str] | None = None) -> list[list[str]]:
    """The import cycles among the modules in scope (all of graph by default): each a sorted strongly connected set."""
    nodes = set(graph if scope is None else scope)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        # Tarjan's algorithm; the graphs are a few hundred modules, well within the recursion limit.
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ()) & nodes):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(nodes):
        if node not in index:
            visit(node)
    return sorted(found)


def _in_package(module: str, package: str) -> bool:
    return module == package or module.startswith(package + '.')


def test_the_admin_api_and_cli_packages_have_no_import_cycle() -> None:
    modules = module_files()
    graph = import_graph(modules)
    for package in ACYCLIC_PACKAGES:
        members = [m for m in modules if _in_package(m, package)]
        assert len(members) > 3, f'{package} is not a package of modules any more'
        assert cycles(graph, members) == [], f'import cycles in {package}'


def test_only_the_server_cli_and_test_kit_import_the_composition_root() -> None:
    modules = module_files()
    graph = import_graph(modules)
    assert graph['runtime.server'] >= {ROOT}, 'the import graph does not see the server build the runtime'
    importers = sorted(m for m, imported in graph.items()
                       if ROOT in imported and not any(_in_package(m, user) for user in ROOT_USERS))
    assert importers == [], f'modules importing {ROOT}: {importers}'


def test_the_runtime_has_no_import_cycle() -> None:
    graph = import_graph(module_files())
    assert len(graph) > 50, 'the runtime package was not read'
    assert cycles(graph) == [], 'import cycles in runtime/ (python tests/project/test_import_structure.py lists them)'


def test_the_cycle_finder_sees_function_local_and_type_checking_imports(tmp_path: Path) -> None:
    package = tmp_path / 'runtime'
    package.mkdir()
    (package / '__init__.py').write_text('')
    (package / 'a.py').write_text('from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runtime.b import B\n')
    (package / 'b.py').write_text('def f():\n    from runtime import c\n')
    (package / 'c.py').write_text('from . import a\n')
    (package / 'd.py').write_text('import runtime.a\n')
    modules = module_files(package)
    graph = import_graph(modules)
    assert graph['runtime.a'] == {'runtime.b'} and graph['runtime.b'] == {'runtime.c'}
    assert cycles(graph) == [['runtime.a', 'runtime.b', 'runtime.c']]


def test_only_the_route_list_knows_the_admin_resource_families() -> None:
    """runtime.http.admin.routes imports every family; no other admin module imports one."""
    modules = module_files()
    graph = import_graph(modules)
    families = {m for m in graph['runtime.http.admin.routes'] if _in_package(m, 'runtime.http.admin')
                and m not in ('runtime.http.admin.base', 'runtime.http.admin.input')}
    assert {'runtime.http.admin.services', 'runtime.http.admin.pubsub', 'runtime.http.admin.queues'} <= families
    for module, imported in graph.items():
        if _in_package(module, 'runtime.http.admin') and module != 'runtime.http.admin.routes':
            assert not imported & families, f'{module} imports a family of resources: {sorted(imported & families)}'


def test_only_the_cli_package_knows_every_command_group() -> None:
    """runtime.cli (its __init__) adds every command module's commands; no command module imports another."""
    modules = module_files()
    graph = import_graph(modules)
    commands = {m for m in graph['runtime.cli'] if _in_package(m, 'runtime.cli') and m != 'runtime.cli.root'}
    assert {'runtime.cli.server', 'runtime.cli.topics', 'runtime.cli.queues'} <= commands
    for module, imported in graph.items():
        if _in_package(module, 'runtime.cli') and module not in ('runtime.cli', 'runtime.cli.__main__'):
            assert not imported & commands, f'{module} imports a command module: {sorted(imported & commands)}'


#: The modules runtime/ keeps at its top, beside its area packages: the public face, the root, and what
#: every area needs or the CLI imports alone.
TOP_LEVEL = {'runtime', 'runtime.core', 'runtime.config', 'runtime.errors', 'runtime.server', 'runtime.client',
             'runtime.admin_client'}

#: Who may import falcon: the HTTP layer, the test kit (falcon's TestClient over the app), and the root
#: (which builds the app and names its type).
FALCON_USERS = ('runtime.http', 'runtime.testing', ROOT)

#: Who may import the HTTP layer: nothing below it (the root builds it; the server, CLI and test kit start it).
HTTP_USERS = ('runtime.http', ROOT, 'runtime.server', 'runtime.cli', 'runtime.testing')


def external_imports_of(path: Path) -> set[str]:
    """The top-level names of every absolute import in a module's source (module level, TYPE_CHECKING, functions)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.partition('.')[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.partition('.')[0])
    return found


def test_runtime_keeps_its_areas_in_packages() -> None:
    top = {m for m, path in module_files().items() if path.parent == RUNTIME}
    assert top == TOP_LEVEL, f'modules at the top of runtime/ (put new ones in their area package): {sorted(top)}'


def test_falcon_is_imported_only_by_the_http_layer() -> None:
    users = sorted(m for m, path in module_files().items()
                   if 'falcon' in external_imports_of(path) and not any(_in_package(m, u) for u in FALCON_USERS))
    assert users == [], f'falcon imported outside runtime/http: {users}'


def test_nothing_below_the_http_layer_imports_it() -> None:
    graph = import_graph(module_files())
    users = sorted(m for m, imported in graph.items()
                   if any(_in_package(i, 'runtime.http') for i in imported)
                   and not any(_in_package(m, u) for u in HTTP_USERS))
    assert users == [], f'modules below HTTP importing runtime.http: {users}'


#: The core of pub/sub: it asks a subscriber kind through its plug-in (runtime.pubsub.kinds) and never
#: imports a kind's module, the file transfer package or the HTTP layer.
PUBSUB_CORE = ('runtime.pubsub.registry', 'runtime.pubsub.catalog', 'runtime.pubsub.broker', 'runtime.pubsub.sweeper',
               'runtime.pubsub.statements', 'runtime.pubsub.options', 'runtime.pubsub.kinds',
               'runtime.pubsub.delivery', 'runtime.pubsub.leases', 'runtime.pubsub.queue_sql')

#: The subscriber kinds' package, and what of it any module may import: the registration and the protocol.
KINDS_PACKAGE = 'runtime.pubsub.subscribers'
KINDS_PUBLIC = (KINDS_PACKAGE, KINDS_PACKAGE + '.base')

#: A kind's own transports: the endpoints its clients use (the pull kind's REST API and the service API's
#: pull, the WebSocket kind's endpoint), by design built on the kind they carry.
KIND_TRANSPORTS = {
    'runtime.http.app': {'runtime.pubsub.subscribers.websocket'},  # the hub's type, for the WebSocket route
    'runtime.http.handover': {'runtime.pubsub.subscribers.pull'},
    'runtime.http.pubsub_rest': {'runtime.pubsub.subscribers.pull'},
    'runtime.http.websocket.session': {'runtime.pubsub.subscribers.websocket'},
    'runtime.pubsub.api': {'runtime.pubsub.subscribers.pull'},
}

#: Other modules that still reach into one kind's module, and the kind modules they import. None is left;
#: a module that does is reached through ``runtime.pubsub.subscribers`` and the kind's plug-in instead.
KIND_MODULE_USERS: dict[str, set[str]] = {}


def _kind_modules_imported(imported: set[str]) -> set[str]:
    return {i for i in imported if _in_package(i, KINDS_PACKAGE) and i not in KINDS_PUBLIC}


def test_the_core_of_pubsub_imports_no_kind_no_file_transfer_and_no_http() -> None:
    graph = import_graph(module_files())
    assert all(m in graph for m in PUBSUB_CORE), 'a module of PUBSUB_CORE was renamed: update the list'
    found = {m: sorted(i for i in graph[m] if _in_package(i, 'runtime.files') or _in_package(i, 'runtime.http')
                       or i in _kind_modules_imported(graph[m]))
             for m in PUBSUB_CORE}
    assert {m: i for m, i in found.items() if i} == {}, 'the core of pub/sub imports a kind, runtime.files or HTTP'


#: The one kind the core of pub/sub names: a service's topic and its implicit subscription are the broker's own.
CORE_KIND = 'KIND_SERVICE'

#: Beside the core, the admin API's views of subscriptions and queues name no kind either: what a kind adds
#: to them (a WebSocket subscription's client, a file subscription's target) is its plug-in's ``admin_fields``.
KIND_BLIND = ('runtime.http.admin.subscription_views', 'runtime.http.admin.pubsub', 'runtime.http.admin.queues')


def test_the_core_of_pubsub_names_no_kind_but_the_service_topics_one() -> None:
    files = module_files()
    assert all(m in files for m in KIND_BLIND), 'a module of KIND_BLIND was renamed: update the list'
    named = {}
    for module in (*PUBSUB_CORE, *KIND_BLIND):
        tree = ast.parse(files[module].read_text(encoding='utf-8'))
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
        kinds = sorted(n for n in names if n.startswith('KIND_') and n != CORE_KIND)
        if kinds:
            named[module] = kinds
    assert named == {}, 'the core of pub/sub names a subscriber kind: ask its plug-in through Kinds instead'


def test_no_new_module_reaches_into_a_subscriber_kind() -> None:
    graph = import_graph(module_files())
    users = {m: _kind_modules_imported(imported) for m, imported in graph.items()
             if not _in_package(m, KINDS_PACKAGE) and m != ROOT and _kind_modules_imported(imported)}
    assert users == {**KIND_TRANSPORTS, **KIND_MODULE_USERS}, (
        'modules outside runtime/pubsub/subscribers importing a kind module changed '
        '(a kind is reached through runtime.pubsub.subscribers and its plug-in)')


if __name__ == '__main__':
    # What is left to fix, for whoever removes it: the cycles in runtime/, and the modules importing the root.
    _graph = import_graph(module_files())
    for cycle in cycles(_graph):
        print('cycle:', ' <-> '.join(cycle))
    for name in sorted(_graph):
        if ROOT in _graph[name] and not any(_in_package(name, user) for user in ROOT_USERS):
            print(f'imports {ROOT}:', name)
    for name, path in sorted(module_files().items()):
        if 'falcon' in external_imports_of(path) and not any(_in_package(name, u) for u in FALCON_USERS):
            print('imports falcon outside runtime/http:', name)
        if path.parent == RUNTIME and name not in TOP_LEVEL:
            print('a module at the top of runtime/:', name)
