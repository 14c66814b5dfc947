"""Declarative objects from ``config/objects/*.yaml``, in the sections of Zato's enmasse files.

The files are applied at start and again whenever they change, idempotently. Every object belongs
to the file that declared it (its ``owner`` column): an application of a set of files creates and
updates the objects those files declare, and deletes only objects that an earlier application of
*those files* created and that they no longer declare. It never touches objects made through the
admin API or the CLI (``origin='api'``, detached ones too), nor objects another file outside the set
declared (another server's config directory, the demo's files): a file declaring such an object is
skipped for it, with a warning naming the owner. Objects marked ``origin='config'`` with no owner
(stored before owners were recorded) are adopted by the first file that declares them and are
otherwise left alone. A set of files that fails validation is rejected whole, with a message naming
the file, section and object, and the previous configuration stays in force.

``plan()`` gives the same application as a list of changes (create, update, delete, skip) without
changing anything: it runs in a transaction that is rolled back.

Passwords may be written as ``${CONDUIT_SECRET_...}`` references (``runtime.security.secret_refs``: no other
environment variable may be named); they are resolved when the files are applied and only a hash
is stored. Each section is handled by a ``SectionHandler`` of the area it declares: security
definitions, REST channels, pub/sub, permissions, the scheduler and file channels each have theirs
(``runtime.core.make_objects_applier`` adds them in order). Keys and sections of Zato's enmasse files that
Conduit does not use are accepted and listed in one warning (``runtime.objects.zato_keys``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Connection, Engine, insert, select, update

from runtime.cluster.sync import bump, lock
from runtime.db.engine import transaction
from runtime.errors import ConfigError
from runtime.objects import zato_keys
from runtime.observability.audit import record_file_changes
from runtime.security import secret_refs, user_names

_log = logging.getLogger(__name__)

#: Sync key locked by every application (serialising them) and bumped when objects changed.
SYNC_KEY = 'objects'
SECURITY_KEY = 'security'
CHANNELS_KEY = 'channels'

#: What an application of files does to one object.
CREATE, UPDATE, DELETE, SKIP = 'create', 'update', 'delete', 'skip'


@dataclass(frozen=True)
class Change:
    """One object an application of files creates, updates, deletes, or leaves to its owner (skip)."""

    action: str
    kind: str
    name: str
    #: The file that declares it (for a delete: the file that declared it).
    file: str
    #: What changed (update) or why it is left alone (skip).
    detail: str = ''

    def as_dict(self) -> dict[str, str]:
        """As the CLI prints it with --json."""
        return asdict(self)


class Scope:
    """What one application of files may change: the objects of those files, and nothing else."""

    def __init__(self, files: Iterable[str], dirs: Iterable[str],
                 service_exists: Callable[[str], bool] | None = None,
                 reserved_usernames: tuple[str, ...] = user_names.RESERVED_USERNAMES) -> None:
        self.files = set(files)
        self.dirs = set(dirs)
        #: Whether a service a channel or job names exists (None: not checked, e.g. no catalog).
        self.service_exists = service_exists
        #: User names no definition may look like (the server's admin and viewer).
        self.reserved_usernames = reserved_usernames
        self.changes: list[Change] = []

    def owns(self, owner: str) -> bool:
        """Whether the file that declared an object belongs to this application."""
        return bool(owner) and (owner in self.files or os.path.dirname(owner) in self.dirs)

    def record(self, action: str, kind: str, name: str, file: str, detail: str = '') -> None:
        """Note one change."""
        self.changes.append(Change(action, kind, name, file, detail))

    def may_take(self, kind: str, name: str, origin: str, owner: str, file: str) -> bool:
        """Whether file may write over an existing object; if not, the skip is noted and logged."""
        if origin == 'config' and (not owner or owner == file or self.owns(owner)):
            return True
        if origin == 'config':
            why = f'it is declared by {owner}'
        elif origin == 'service':
            why = 'it belongs to a service'
        else:
            why = 'it is managed through the admin API or the CLI (made or detached there)'
        self.record(SKIP, kind, name, file, why)
        _log.warning('%s: %s %r left alone: %s', file, kind, name, why)
        return False

    def upsert(self, conn: Connection, kind: str, table: Any, key: str, value: Any, values: dict[str, Any],
               file: str, label: str | None = None) -> bool:
        """Create or update one declared object by its key column; False if it belongs to someone else."""
        label = label if label is not None else str(value)
        column = getattr(table, key)
        row = conn.execute(select(table).where(column == value)).first()
        if row is None:
            conn.execute(insert(table).values(**{key: value}, **values, origin='config', owner=file))
            self.record(CREATE, kind, label, file)
            return True
        if not self.may_take(kind, label, row.origin, row.owner, file):
            return False
        changed = sorted(k for k, v in values.items() if getattr(row, k) != v)
        if row.origin != 'config' or row.owner != file:
            changed.append('owner')
        if changed:
            conn.execute(update(table).where(column == value).values(**values, origin='config', owner=file))
        if changed:
            self.record(UPDATE, kind, label, file, ', '.join(changed))
        return True

    def claim(self, conn: Connection, kind: str, table: Any, where: Any, label: str, file: str) -> bool:
        """Before a handler's own write: False if the existing object belongs to someone else."""
        row = conn.execute(select(table.origin, table.owner).where(where)).first()
        return row is None or self.may_take(kind, label, row.origin, row.owner, file)

    def set_owner(self, conn: Connection, table: Any, where: Any, file: str) -> None:
        """Mark an object the handler wrote as declared by file."""
        conn.execute(update(table).where(where).values(origin='config', owner=file))

    def stale(self, conn: Connection, table: Any) -> list[Any]:
        """Rows this application's files declared earlier (to be deleted unless declared again)."""
        rows = conn.execute(select(table).where(table.origin == 'config', table.owner != '')).all()
        return [r for r in rows if self.owns(r.owner)]


@dataclass
class SectionHandler:
    """Applies one section of the files: items is every item of that section, from every file."""

    section: str
    apply: Callable[[Connection, list[dict[str, Any]], Scope], None]
    #: Sync keys to bump when this section was applied.
    sync_keys: tuple[str, ...] = ()


def resolve_secret(value: Any, where: str) -> str:
    """A password as written, or the ``${CONDUIT_SECRET_...}`` variable it references (runtime.security.secret_refs)."""
    if not isinstance(value, str):
        raise ConfigError(where, 'password must be a string')
    if secret_refs.is_reference(value):
        return secret_refs.resolve(value, 'password', where)
    return value


def _describe_yaml_error(e: yaml.YAMLError) -> str:
    """What is wrong and where, without PyYAML's quote of the offending line (it may hold a password)."""
    if not isinstance(e, yaml.MarkedYAMLError):
        return type(e).__name__
    parts = []
    for text, mark in ((e.context, e.context_mark), (e.problem, e.problem_mark)):
        if text:
            parts.append(f'{text} (line {mark.line + 1}, column {mark.column + 1})' if mark else text)
    return '; '.join(parts) or type(e).__name__


def require(item: dict[str, Any], key: str, where: str) -> Any:
    """An item's value of key; ConfigError naming key when it is missing or empty."""
    value = item.get(key)
    if value is None or value == '':
        raise ConfigError(where, f'{key!r} is required')
    return value


def check_unique(items: list[dict[str, Any]], section: str) -> None:
    """ConfigError naming the first name declared twice in a section's items."""
    seen: set[str] = set()
    for item in items:
        name = item['name']
        if name in seen:
            raise ConfigError(f'{item["_file"]} [{section}]', f'{name!r} is declared twice')
        seen.add(name)


class ObjectsApplier:
    """Reads the object files and applies them through the registered section handlers."""

    def __init__(self, engine: Engine, dirs: Iterable[Path], files: Iterable[Path] | None = None,
                 service_catalog: Callable[[], Callable[[str], bool]] | None = None,
                 actor: str = 'object files',
                 reserved_usernames: tuple[str, ...] = user_names.RESERVED_USERNAMES) -> None:
        self._engine = engine
        #: User names no security definition may look like (the server's admin and viewer).
        self.reserved_usernames = reserved_usernames
        self.dirs = [Path(d).resolve() for d in dirs]
        #: Explicit files (``conduit objects apply FILE...``): then only they are the scope, not the dirs.
        self._explicit = None if files is None else [Path(f).resolve() for f in files]
        #: Makes the check of whether a service exists, once per application (None: not checked).
        self.service_catalog = service_catalog
        #: Who the audit log names for the changes of an application.
        self.actor = actor
        #: The sections this applier applies, in the order they were added (a section may name what
        #: an earlier one declares: channels name security definitions).
        self.handlers: dict[str, SectionHandler] = {}
        self._warned: set[str] = set()
        self._ignored = zato_keys.Ignored()
        self._mtimes: dict[Path, int] = {}
        #: The changes of the last application that wrote anything.
        self.last_changes: list[Change] = []

    def add_handler(self, handler: SectionHandler) -> None:
        """Handle one more section (later handlers run after earlier ones)."""
        self.handlers[handler.section] = handler

    def files(self) -> list[Path]:
        """Every object file, in a fixed order."""
        if self._explicit is not None:
            return list(self._explicit)
        found: list[Path] = []
        for d in self.dirs:
            if d.is_dir():
                found.extend(sorted(p for p in d.iterdir() if p.suffix in ('.yaml', '.yml') and p.is_file()))
        return found

    def _scope(self, files: list[Path]) -> Scope:
        dirs = [] if self._explicit is not None else [str(d) for d in self.dirs]
        exists = self.service_catalog() if self.service_catalog is not None else None
        return Scope((str(f) for f in files), dirs, exists, self.reserved_usernames)

    def _scope_key(self) -> str:
        """The sync key holding the digest of this set of files (one per set: servers may differ)."""
        paths = self._explicit if self._explicit is not None else self.dirs
        ident = hashlib.sha256('\0'.join(sorted(str(p) for p in paths)).encode()).hexdigest()[:24]
        return f'{SYNC_KEY}:{ident}'

    def _read(self, files: list[Path]) -> tuple[str, dict[str, list[dict[str, Any]]]]:
        digest = hashlib.sha256()
        sections: dict[str, list[dict[str, Any]]] = {}
        ignored = zato_keys.Ignored()
        for path in files:
            try:
                text = path.read_text(encoding='utf-8')
            except OSError as e:
                raise ConfigError(str(path), f'cannot be read: {e.strerror or e}') from None
            digest.update(str(path).encode() + b'\0' + text.encode() + b'\0')
            # Referenced ${CONDUIT_SECRET_...} values take part in the hash, so changing one re-applies the files.
            for name in secret_refs.referenced_names(text):
                digest.update(f'{name}={os.environ.get(name, "")}\0'.encode())
            try:
                doc = yaml.safe_load(text) or {}
            except yaml.YAMLError as e:
                raise ConfigError(str(path), f'not valid YAML: {_describe_yaml_error(e)}') from None
            if not isinstance(doc, dict):
                raise ConfigError(str(path), 'must be a mapping of section names to lists of objects')
            for section, items in doc.items():
                if items is None:
                    continue
                if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                    raise ConfigError(f'{path} [{section}]', 'must be a list of objects')
                if section not in self.handlers:
                    if zato_keys.is_zato_section(section):
                        ignored.sections.add(section)
                    elif section not in self._warned:
                        self._warned.add(section)
                        _log.warning('%s: section [%s] is not supported by this server; ignored', path, section)
                    continue
                sections.setdefault(section, []).extend(
                    {**zato_keys.accept(section, i, str(path), ignored), '_file': str(path)} for i in items)
        self._ignored = ignored
        return digest.hexdigest(), sections

    def apply(self) -> list[str]:
        """Apply the files if they changed since they were last applied; returns the sync keys bumped.

        A ConfigError is final until the files change again; any other failure (the database) leaves
        the files marked as changed, so that the next ``changed_on_disk()`` tries again.
        """
        files = self.files()
        mtimes = self._stat(files)
        try:
            keys = self._apply(files)
        except ConfigError:
            self._mtimes = mtimes
            raise
        self._mtimes = mtimes
        if keys is None:
            return []
        _log.info('applied %d object file(s): %s', len(files), ', '.join(str(f) for f in files) or 'none')
        for change in self.last_changes:
            _log.info('%s %s %r (%s)%s', change.action, change.kind, change.name, change.file,
                      f': {change.detail}' if change.detail else '')
        return keys

    def plan(self) -> list[Change]:
        """What applying the files now would change, without changing anything."""
        files = self.files()
        digest, sections = self._read(files)
        scope = self._scope(files)
        try:
            with transaction(self._engine, write=True) as conn:
                self._run_handlers(conn, sections, scope)
                raise _RollBack
        except _RollBack:
            pass
        return scope.changes

    def _run_handlers(self, conn: Connection, sections: dict[str, list[dict[str, Any]]], scope: Scope) -> list[str]:
        keys: list[str] = []
        for section, handler in self.handlers.items():
            handler.apply(conn, sections.get(section, []), scope)
            keys.extend(handler.sync_keys)
        return keys

    def _apply(self, files: list[Path]) -> list[str] | None:
        """The sync keys bumped, or None when the database already holds these files."""
        digest, sections = self._read(files)
        scope = self._scope(files)
        scope_key = self._scope_key()
        with transaction(self._engine, write=True) as conn:
            # Every worker watches the same files: the lock makes the second one wait for the first
            # and then find the files applied, instead of inserting the same objects again.
            lock(conn, SYNC_KEY)
            if lock(conn, scope_key) == digest:
                return None
            keys = self._run_handlers(conn, sections, scope)
            for key in keys:
                bump(conn, key)
            bump(conn, scope_key, digest)
            bump(conn, SYNC_KEY)
            record_file_changes(conn, self.actor, scope.changes, time.time())
        self.last_changes = scope.changes
        zato_keys.warn(self._ignored)  # once per set of files applied, not per worker that reads them
        return keys

    @staticmethod
    def _stat(files: list[Path]) -> dict[Path, int]:
        return {f: f.stat().st_mtime_ns for f in files if f.exists()}

    def changed_on_disk(self) -> bool:
        """Whether any object file was added, removed or modified since the last apply."""
        return self._stat(self.files()) != self._mtimes


class _RollBack(Exception):
    """Ends a dry run's transaction without committing it."""
