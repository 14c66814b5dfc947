"""Hot deployment: service modules loaded from source at run time, the same in every worker.

A module is compiled and executed into a fresh module object, its ``Service`` subclasses are
validated, and only if all of that succeeds are they registered (replacing older versions) and
recorded in the ``conduit_deployment`` table. A module that fails leaves what was deployed before
untouched, and the log line names the file, the line and the error.

Deployed modules import each other by plain name (``runtime.deploy.imports``). When a module
changes, every live module that imports it is run again against the new version, in dependency
order, in the same all-or-nothing step: if one of them fails with the new version, the change is
rejected and everything stays as it was.

Every worker polls ``hot-deploy/`` (a stat per file, cheap and gevent-friendly; inotify would
need a thread per worker and does not see network filesystems). A file is loaded once its size
and mtime have been the same on ``stable_polls`` polls in a row, so a half-written file is never
imported. Other workers and servers learn of a deployment through the table (see
``runtime.cluster.sync``), so everyone runs the same code, including servers started later.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import re
import sys
import sysconfig
import traceback
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import gevent
import gevent.lock
from sqlalchemy import Connection, Engine, select

from runtime.cluster.sync import bump
from runtime.db.engine import transaction
from runtime.db.models import Deployment
from runtime.deploy.imports import ModuleSource, check_name, dependency_order, dependents, install
from runtime.errors import ConduitError, DeploymentError
from runtime.service.base import Service

if TYPE_CHECKING:
    from runtime.config import Settings
    from runtime.service.store import ServiceStore

_log = logging.getLogger(__name__)

#: Sync key bumped with every deployment row.
SYNC_KEY = 'deployments'

_MODULE_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


#: Where a wheel installs the built-in services, under an installation scheme's data directory.
SHIPPED_SERVICES = Path('share', 'conduit', 'services')

#: services_dir when nobody configured it.
DEFAULT_SERVICES_DIR = 'services'

#: The demo's services, a directory inside the services directory: deployed only in demo mode.
DEMO_SERVICES_DIR = 'demo'


def services_directory(settings: Settings) -> Path:
    """The directory of services deployed at start.

    Outside a checkout (the package installed from a wheel, the server started in an empty
    directory) the default ``services/`` does not exist: the built-in services installed with the
    package are used instead. A services_dir set on purpose is used as it is.
    """
    configured = settings.path(settings.hot_deploy.services_dir)
    if configured.is_dir() or settings.hot_deploy.services_dir != DEFAULT_SERVICES_DIR:
        return configured
    for scheme in (sysconfig.get_default_scheme(), sysconfig.get_preferred_scheme('user')):
        shipped = Path(sysconfig.get_path('data', scheme)) / SHIPPED_SERVICES
        if shipped.is_dir():
            return shipped
    return configured


def services_directories(settings: Settings, demo: bool) -> list[Path]:
    """The directories of services deployed at start: services/, and services/demo/ in demo mode."""
    directory = services_directory(settings)
    return [directory, directory / DEMO_SERVICES_DIR] if demo else [directory]


@dataclass
class _FileState:
    size: int
    mtime_ns: int
    stable: int = 0
    done: bool = False


def source_hash(source: str) -> str:
    """The SHA-256 of a module's source."""
    return hashlib.sha256(source.encode('utf-8')).hexdigest()


def _error_line(exc: BaseException, file_name: str) -> int | None:
    if isinstance(exc, SyntaxError) and exc.filename == file_name:
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == file_name:
            line = frame.lineno
    return line


@dataclass
class _Loaded:
    """Modules a load brought live, and the ones it rejected."""

    modules: dict[str, list[type[Service]]] = field(default_factory=dict)
    failed: dict[str, DeploymentError] = field(default_factory=dict)


@dataclass
class Deployed:
    """What a deployment brought live: services by module, and the dependents that ran again."""

    services: dict[str, list[str]]
    #: Files of live modules that import a deployed one (directly or not) and were run again with it.
    reloaded: list[str] = field(default_factory=list)


class HotDeployer:
    """Loads service modules from source and keeps this worker in step with the table.

    Which module answers to a service name is decided by the latest event naming it: a deployment
    of a module defining it (``services/`` at start, then every recorded one, in order) or an
    undeployment of the name. Reloading a module because a helper it imports changed is not an
    event: it never brings back an undeployed service.
    """

    def __init__(self, store: ServiceStore, engine: Engine) -> None:
        self._store = store
        self._engine = engine
        self._files: dict[Path, _FileState] = {}
        self._finder = install()
        #: module name -> the source this worker runs.
        self._live: dict[str, ModuleSource] = {}
        #: module name -> its prepared service classes, by service name.
        self._classes: dict[str, dict[str, type[Service]]] = {}
        #: service name -> the module that answers to it, or None once undeployed.
        self._owner: dict[str, str | None] = {}
        #: Files of the pick-up directory rejected in their current content, retried with later changes.
        self._rejected: dict[Path, str] = {}
        self._last_row_id = 0
        # Module code may yield (I/O at import time): one load at a time in this worker, since a load
        # swaps entries of sys.modules and the finder's pending sources.
        self._lock = gevent.lock.RLock()

    # Loading

    def _load(self, new: dict[str, ModuleSource], atomic: bool) -> _Loaded:
        """Run new sources, and again every live module that imports one of them, in dependency order.

        Atomic: if any module fails, nothing changes and the first failure is raised. Otherwise each
        failing module (and whatever imports it) keeps its previous version and is reported.
        """
        result = _Loaded()
        for name, src in sorted(new.items()):
            try:
                if not _MODULE_NAME.match(name):
                    raise DeploymentError(src.file_name, f'{name!r} is not a valid module name '
                                                         f'(letters, digits and _, not starting with a digit)')
                check_name(name, src.file_name)
            except DeploymentError as e:
                if atomic:
                    raise
                result.failed[name] = e
        new = {n: s for n, s in new.items() if n not in result.failed}
        sources = {**self._live, **new}
        affected = new.keys() | dependents(new, sources)
        batch = {n: sources[n] for n in affected}
        previous = {n: sys.modules.pop(n) for n in affected if n in sys.modules}
        finder = self._finder
        finder.pending.update(batch)
        finder.failures.clear()
        try:
            for name in dependency_order(batch):
                try:
                    module = sys.modules.get(name) or importlib.import_module(name)
                    result.modules[name] = self._store.prepare_module(module, name)
                except BaseException as e:
                    if isinstance(e, (KeyboardInterrupt, gevent.GreenletExit)):
                        raise
                    result.failed[name] = self._failure(name, batch[name], e)
                    sys.modules.pop(name, None)
                    if atomic:
                        break
        except BaseException:
            self._restore(affected, previous)
            raise
        finally:
            finder.pending.clear()
            finder.failures.clear()
        if result.failed and atomic:
            self._restore(affected, previous)
            raise next(iter(result.failed.values()))
        for name in result.failed:
            if name in previous:
                sys.modules[name] = previous[name]
        for name, classes in result.modules.items():
            self._live[name] = finder.live[name] = batch[name]
            self._classes[name] = {cls.name: cls for cls in classes}
        return result

    def _failure(self, name: str, src: ModuleSource, exc: BaseException) -> DeploymentError:
        """The error of a module that failed, naming the file (and line) where it went wrong."""
        if isinstance(exc, DeploymentError):
            return exc
        culprit = next((n for n, e in self._finder.failures if e is exc), name)
        culprit_src = self._finder.source_of(culprit) or src
        reason = str(exc) if isinstance(exc, ConduitError) else f'{type(exc).__name__}: {exc}'
        line = _error_line(exc, culprit_src.file_name)
        if culprit != name:
            where = f'{culprit_src.file_name}:{line}' if line else culprit_src.file_name
            return DeploymentError(src.file_name, f'importing {culprit!r} failed: {where}: {reason}',
                                   _error_line(exc, src.file_name))
        return DeploymentError(src.file_name, reason, line)

    @staticmethod
    def _restore(names: Iterable[str], previous: dict[str, ModuleType]) -> None:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(previous)

    def _claim(self, loaded: _Loaded) -> None:
        """Make every module of an explicit deployment the owner of the services it defines."""
        for name, classes in loaded.modules.items():
            for cls in classes:
                self._owner[cls.name] = name

    def _register_owned(self, names: Iterable[str]) -> None:
        """Bring the service store in line with the owners of these service names."""
        store = self._store
        for name in names:
            if name not in self._owner:
                continue
            module = self._owner[name]
            cls = self._classes.get(module, {}).get(name) if module is not None else None
            if cls is None:
                if module is None and store.has(name):
                    store.unregister(name)
                    _log.info('undeployed %s', name)
                continue
            if not store.has(name) or store.get(name) is not cls:
                store.register_all([cls], module, self._live[module].file_name)

    def _names_of(self, modules: Iterable[str]) -> set[str]:
        return {n for m in modules for n in self._classes.get(m, {})}

    def load_source(self, module_name: str, source: str, file_name: str) -> list[str]:
        """Import a module from source and register its services; DeploymentError if anything fails."""
        new = {module_name: ModuleSource(source, file_name, source_hash(source))}
        return self._deploy_here(new).services[module_name]

    def _deploy_here(self, new: dict[str, ModuleSource]) -> Deployed:
        with self._lock:
            loaded = self._load(new, atomic=True)
            self._claim(_Loaded({n: c for n, c in loaded.modules.items() if n in new}))
            self._register_owned(self._names_of(loaded.modules))
        reloaded = sorted(self._live[name].file_name for name in loaded.modules.keys() - new.keys())
        for file_name in reloaded:
            _log.info('reloaded %s: a module it imports changed', file_name)
        for name, classes in loaded.modules.items():
            if name in new and not classes:
                _log.info('%s defines no Service subclass: loaded as a helper module', new[name].file_name)
        return Deployed({name: [cls.name for cls in loaded.modules[name]] for name in new}, reloaded)

    def load_file(self, path: Path) -> list[str]:
        """Load one file from disk (used for the built-in services/ directory)."""
        source = path.read_text(encoding='utf-8')
        return self.load_source(path.stem, source, str(path))

    def load_directories(self, directories: Iterable[Path]) -> None:
        """Load every module of some directories in dependency order; a broken one is logged and skipped."""
        new: dict[str, ModuleSource] = {}
        for path in (p for d in directories for p in sorted(d.glob('*.py'))):
            if path.name.startswith('_'):
                continue
            if path.stem in new:
                # Modules import each other by plain name: two files of one name cannot both be live.
                _log.error('cannot deploy %s: module %r is deployed from %s', path, path.stem, new[path.stem].file_name)
                continue
            try:
                source = path.read_text(encoding='utf-8')
            except (OSError, UnicodeDecodeError) as e:
                _log.error('cannot deploy %s: cannot read it: %s', path, e)
                continue
            new[path.stem] = ModuleSource(source, str(path), source_hash(source))
        with self._lock:
            loaded = self._load(new, atomic=False)
            self._claim(loaded)
            self._register_owned(self._names_of(loaded.modules))
        for name, classes in loaded.modules.items():
            _log.info('deployed %s from %s', ', '.join(c.name for c in classes) or 'nothing', new[name].file_name)
        for e in loaded.failed.values():
            _log.error('%s', e)

    # Deploying (this worker saw a new file, or the admin API received one)

    def deploy(self, module_name: str, source: str, file_name: str) -> list[str]:
        """Load a module here and record it so that every other worker loads it too."""
        return self.deploy_many({module_name: (source, file_name)}).services[module_name]

    def deploy_many(self, modules: dict[str, tuple[str, str]]) -> Deployed:
        """Deploy modules together (all or none): loaded here, then recorded for everyone else."""
        new = {name: ModuleSource(src, file_name, source_hash(src)) for name, (src, file_name) in modules.items()}
        # Recorded under the lock: a sync poll in between would read the rows before this one and
        # load the last recorded version over the one just deployed.
        with self._lock:
            deployed = self._deploy_here(new)
            names = deployed.services
            self._record([('deploy', name, new[name].file_name, new[name].source, names[name])
                          for name in sorted(new)])
        for name in sorted(new):
            _log.info('deployed %s from %s', ', '.join(names[name]) or 'nothing', new[name].file_name)
        return deployed

    def undeploy(self, service_name: str) -> None:
        """Remove a service here and record that every other worker removes it too."""
        with self._lock:
            module_name = self._store.info(service_name).module_name
            self._store.unregister(service_name)
            self._owner[service_name] = None
            self._record([('undeploy', module_name, '', '', [service_name])])
        _log.info('undeployed %s', service_name)

    def _record(self, rows: list[tuple[str, str, str, str, list[str]]]) -> None:
        with transaction(self._engine, write=True) as conn:
            # First, so that the row lock serialises workers recording at the same moment.
            bump(conn, SYNC_KEY)
            for kind, module_name, file_name, source, names in rows:
                digest = source_hash(source) if source else ''
                if kind == 'deploy' and _recorded_already(conn, module_name, digest, names):
                    continue  # another worker (watching the same directory) recorded this very source
                conn.execute(Deployment.__table__.insert().values(
                    kind=kind, module_name=module_name, file_name=file_name, source=source, source_hash=digest,
                    service_names=json.dumps(names)))

    # Following the table

    def apply_recorded(self) -> None:
        """Apply deployment rows this worker has not seen yet: the latest event of each name wins."""
        with self._lock:
            self._apply_recorded()

    def _apply_recorded(self) -> None:
        with self._engine.connect() as conn:
            rows = conn.execute(select(Deployment).where(Deployment.id > self._last_row_id)
                                .order_by(Deployment.id)).all()
        if not rows:
            return
        wanted: dict[str, ModuleSource] = {}
        touched: set[str] = set()
        for row in rows:
            self._last_row_id = row.id
            names = json.loads(row.service_names)
            touched.update(names)
            if row.kind == 'undeploy':
                for name in names:
                    self._owner[name] = None
            else:
                wanted[row.module_name] = ModuleSource(row.source, row.file_name, row.source_hash)
                for name in names:
                    self._owner[name] = row.module_name
        changed = {n: s for n, s in wanted.items()
                   if n not in self._live or self._live[n].digest != s.digest}
        loaded = self._load(changed, atomic=False)
        for name in loaded.modules:
            _log.info('deployed %s from %s (recorded)', name, self._live[name].file_name)
        for e in loaded.failed.values():
            _log.error('recorded deployment failed here: %s', e)
        self._register_owned(touched | self._names_of(loaded.modules))

    # Watching the pick-up directory

    def poll_directory(self, directory: Path, stable_polls: int) -> None:
        """One poll of the pick-up directory: deploy files that changed and are now stable."""
        seen = set()
        ready = []
        for path in sorted(directory.glob('*.py')):
            seen.add(path)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            state = self._files.get(path)
            if state is None or (state.size, state.mtime_ns) != (st.st_size, st.st_mtime_ns):
                self._files[path] = _FileState(st.st_size, st.st_mtime_ns)
                continue
            if state.done:
                continue
            state.stable += 1
            if state.stable >= stable_polls:
                state.done = True
                ready.append(path)
        for path in list(self._files):
            if path not in seen:
                del self._files[path]  # deleting a file does not undeploy, as in Zato
        if ready:
            self._deploy_files(ready, again_after_undeploy=True)

    def _wants(self, path: Path, source: str, again_after_undeploy: bool) -> bool:
        """Whether a file of the pick-up directory differs from what this worker runs.

        A file written after one of its services was undeployed is deployed again; at start, an
        unchanged file does not undo an undeployment.
        """
        live = self._live.get(path.stem)
        if live is None or live.digest != source_hash(source):
            return True
        return again_after_undeploy and any(self._owner.get(n) != path.stem for n in self._classes.get(path.stem, {}))

    def _deploy_files(self, paths: list[Path], again_after_undeploy: bool) -> None:
        """Deploy changed files together, with the ones rejected earlier (a helper and its user may
        have to change together); if that fails, each on its own, so one broken file blocks no other."""
        batch: dict[Path, str] = {}
        for path in paths:
            try:
                source = path.read_text(encoding='utf-8')
            except (OSError, UnicodeDecodeError) as e:
                _log.error('cannot deploy %s: cannot read it: %s', path, e)
                continue
            if self._wants(path, source, again_after_undeploy):
                batch[path] = source
        if not batch:
            return
        for path, digest in list(self._rejected.items()):
            try:
                source = path.read_text(encoding='utf-8')
            except (OSError, UnicodeDecodeError):
                source = ''
            if path not in batch and source and source_hash(source) == digest:
                batch[path] = source
            elif path not in batch:
                del self._rejected[path]
        try:
            self.deploy_many({p.stem: (src, str(p)) for p, src in batch.items()})
            for path in batch:
                self._rejected.pop(path, None)
            return
        except DeploymentError as e:
            if len(batch) == 1:
                _log.error('%s; the previous version stays live', e)
                path, source = next(iter(batch.items()))
                self._rejected[path] = source_hash(source)
                return
        for path, source in sorted(batch.items()):
            try:
                self.deploy(path.stem, source, str(path))
                self._rejected.pop(path, None)
            except DeploymentError as e:
                _log.error('%s; the previous version stays live', e)
                self._rejected[path] = source_hash(source)

    def deploy_directory_now(self, directory: Path) -> None:
        """At start: deploy every file of the pick-up directory that differs from what runs."""
        directory.mkdir(parents=True, exist_ok=True)
        paths = sorted(directory.glob('*.py'))
        for path in paths:
            st = path.stat()
            self._files[path] = _FileState(st.st_size, st.st_mtime_ns, done=True)
        self._deploy_files(paths, again_after_undeploy=False)

    def watch(self, directory: Path, interval: float, stable_polls: int) -> None:
        """Poll the pick-up directory forever (run in a greenlet)."""
        while True:
            try:
                self.poll_directory(directory, stable_polls)
            except Exception:
                _log.exception('hot-deploy poll of %s failed', directory)
            gevent.sleep(interval)


def _recorded_already(conn: Connection, module_name: str, digest: str, names: list[str]) -> bool:
    """Whether the latest event of this module and of each of its services is this very deployment."""
    same = conn.execute(select(Deployment.id).where(Deployment.module_name == module_name,
                                                    Deployment.kind == 'deploy')
                        .order_by(Deployment.id.desc()).limit(1)).scalar()
    if same is None:
        return False
    if conn.execute(select(Deployment.source_hash).where(Deployment.id == same)).scalar() != digest:
        return False
    later = conn.execute(select(Deployment.module_name, Deployment.service_names)
                         .where(Deployment.id > same)).all()
    wanted = set(names)
    return not any(row.module_name == module_name or wanted & set(json.loads(row.service_names)) for row in later)
