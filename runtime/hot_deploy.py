"""Hot deployment: service modules loaded from source at run time, the same in every worker.

A module is compiled and executed into a fresh module object, its ``Service`` subclasses are
validated, and only if all of that succeeds are they registered (replacing older versions) and
recorded in the ``conduit_deployment`` table. A module that fails leaves what was deployed before
untouched, and the log line names the file, the line and the error.

Every worker polls ``hot-deploy/`` (a stat per file, cheap and gevent-friendly; inotify would
need a thread per worker and does not see network filesystems). A file is loaded once its size
and mtime have been the same on ``stable_polls`` polls in a row, so a half-written file is never
imported. Other workers and servers learn of a deployment through the table (see
``runtime.sync``), so everyone runs the same code, including servers started later.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import traceback
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import gevent
from sqlalchemy import select

from runtime.db.engine import transaction
from runtime.db.models import Deployment
from runtime.errors import ConduitError, DeploymentError
from runtime.sync import bump

if TYPE_CHECKING:
    from runtime.core import Runtime

_log = logging.getLogger(__name__)

#: Sync key bumped with every deployment row.
SYNC_KEY = 'deployments'

#: Prefix of hot-deployed modules in sys.modules, so that a file named json.py cannot shadow json.
MODULE_PREFIX = 'conduit_deployed.'

_MODULE_NAME = re.compile(r'^[A-Za-z_][A-Za-z0-9_]*$')


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
    if isinstance(exc, SyntaxError):
        return exc.lineno
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == file_name:
            line = frame.lineno
    return line


class HotDeployer:
    """Loads service modules from source and keeps this worker in step with the table."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime
        self._files: dict[Path, _FileState] = {}
        #: module name -> hash of the source this worker runs.
        self.applied: dict[str, str] = {}
        #: Modules one of whose services was undeployed since this worker last loaded them: deploying
        #: the same source again must load them again.
        self._undeployed: set[str] = set()
        self._last_row_id = 0

    # Loading

    def load_source(self, module_name: str, source: str, file_name: str) -> list[str]:
        """Import a module from source and register its services; DeploymentError if anything fails."""
        if not _MODULE_NAME.match(module_name):
            raise DeploymentError(file_name, f'{module_name!r} is not a valid module name '
                                             f'(letters, digits and _, not starting with a digit)')
        full_name = MODULE_PREFIX + module_name
        module = types.ModuleType(full_name)
        module.__file__ = file_name
        previous = sys.modules.get(full_name)
        sys.modules[full_name] = module  # dataclasses and typing look their module up here
        try:
            code = compile(source, file_name, 'exec')
            exec(code, module.__dict__)
            classes = self._runtime.store.prepare_module(module, module_name)
        except BaseException as e:
            if previous is not None:
                sys.modules[full_name] = previous
            else:
                sys.modules.pop(full_name, None)
            if isinstance(e, (KeyboardInterrupt, gevent.GreenletExit)):
                raise
            reason = str(e) if isinstance(e, ConduitError) else f'{type(e).__name__}: {e}'
            raise DeploymentError(file_name, reason, _error_line(e, file_name)) from e
        if not classes:
            _log.warning('%s defines no Service subclass; nothing deployed', file_name)
        names = self._runtime.store.register_all(classes, module_name, file_name)
        self.applied[module_name] = source_hash(source)
        self._undeployed.discard(module_name)
        return names

    def load_file(self, path: Path) -> list[str]:
        """Load one file from disk (used for the built-in services/ directory)."""
        source = path.read_text(encoding='utf-8')
        return self.load_source(path.stem, source, str(path))

    def load_directory(self, directory: Path) -> None:
        """Load every module of a directory in name order; a broken one is logged and skipped."""
        for path in sorted(directory.glob('*.py')):
            if path.name.startswith('_'):
                continue
            try:
                names = self.load_file(path)
                _log.info('deployed %s from %s', ', '.join(names) or 'nothing', path)
            except DeploymentError as e:
                _log.error('%s', e)

    # Deploying (this worker saw a new file, or the admin API received one)

    def deploy(self, module_name: str, source: str, file_name: str) -> list[str]:
        """Load a module here and record it so that every other worker loads it too."""
        names = self.load_source(module_name, source, file_name)
        self._record('deploy', module_name, file_name, source, names)
        _log.info('deployed %s from %s', ', '.join(names) or 'nothing', file_name)
        return names

    def undeploy(self, service_name: str) -> None:
        """Remove a service here and record that every other worker removes it too."""
        module_name = self._runtime.store.info(service_name).module_name
        self._runtime.store.unregister(service_name)
        self._undeployed.add(module_name)
        # The row names the module, so that deploying the same source later is recorded (and loaded) again.
        self._record('undeploy', module_name, '', '', [service_name])
        _log.info('undeployed %s', service_name)

    def _record(self, kind: str, module_name: str, file_name: str, source: str, names: list[str]) -> None:
        digest = source_hash(source) if source else ''
        with transaction(self._runtime.engine, write=True) as conn:
            # First, so that the row lock serialises workers recording at the same moment.
            bump(conn, SYNC_KEY)
            if kind == 'deploy':
                latest = conn.execute(select(Deployment.kind, Deployment.source_hash)
                                      .where(Deployment.module_name == module_name)
                                      .order_by(Deployment.id.desc()).limit(1)).first()
                if latest is not None and latest.kind == 'deploy' and latest.source_hash == digest:
                    return  # another worker recorded this very source already
            conn.execute(Deployment.__table__.insert().values(
                kind=kind, module_name=module_name, file_name=file_name, source=source, source_hash=digest,
                service_names=json.dumps(names)))

    # Following the table

    def apply_recorded(self) -> None:
        """Apply deployment rows this worker has not seen yet, in order."""
        with self._runtime.engine.connect() as conn:
            rows = conn.execute(select(Deployment).where(Deployment.id > self._last_row_id)
                                .order_by(Deployment.id)).all()
        if not rows:
            return
        latest_deploy = {r.module_name: r.id for r in rows if r.kind == 'deploy'}
        for row in rows:
            self._last_row_id = row.id
            if row.kind == 'undeploy':
                for name in json.loads(row.service_names):
                    if self._runtime.store.has(name):
                        self._runtime.store.unregister(name)
                        _log.info('undeployed %s (recorded by another worker)', name)
                if row.module_name:
                    self._undeployed.add(row.module_name)
            elif latest_deploy.get(row.module_name) == row.id and (
                    self.applied.get(row.module_name) != row.source_hash or row.module_name in self._undeployed):
                try:
                    self.load_source(row.module_name, row.source, row.file_name)
                    _log.info('deployed %s from %s (recorded)', row.module_name, row.file_name)
                except DeploymentError as e:
                    _log.error('recorded deployment %d failed here: %s', row.id, e)

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
        for path in ready:
            self._deploy_file(path, again_after_undeploy=True)

    def _deploy_file(self, path: Path, again_after_undeploy: bool) -> None:
        """Deploy a file unless this worker runs its source already.

        A file written after one of its services was undeployed is deployed again; at start, an
        unchanged file in the pick-up directory does not undo an undeployment.
        """
        try:
            source = path.read_text(encoding='utf-8')
        except (OSError, UnicodeDecodeError) as e:
            _log.error('cannot deploy %s: cannot read it: %s', path, e)
            return
        undeployed = again_after_undeploy and path.stem in self._undeployed
        if self.applied.get(path.stem) == source_hash(source) and not undeployed:
            return
        try:
            self.deploy(path.stem, source, str(path))
        except DeploymentError as e:
            _log.error('%s; the previous version stays live', e)

    def deploy_directory_now(self, directory: Path) -> None:
        """At start: deploy every file of the pick-up directory that differs from what runs."""
        directory.mkdir(parents=True, exist_ok=True)
        for path in sorted(directory.glob('*.py')):
            st = path.stat()
            self._files[path] = _FileState(st.st_size, st.st_mtime_ns, done=True)
            self._deploy_file(path, again_after_undeploy=False)

    def watch(self, directory: Path, interval: float, stable_polls: int) -> None:
        """Poll the pick-up directory forever (run in a greenlet)."""
        while True:
            try:
                self.poll_directory(directory, stable_polls)
            except Exception:
                _log.exception('hot-deploy poll of %s failed', directory)
            gevent.sleep(interval)
