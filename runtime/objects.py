"""Declarative objects from ``config/objects/*.yaml``, in the sections of Zato's enmasse files.

The files are applied at start and again whenever they change, idempotently: objects they
declare are created or updated (marked ``origin='config'``), objects an earlier version of the
files declared and this one does not are removed, and objects made through the admin API are
left alone. A set of files that fails validation is rejected whole, with a message naming the
file, section and object, and the previous configuration stays in force.

Passwords may be written as ``${CONDUIT_SECRET_...}`` references (``runtime.secret_refs``: no other
environment variable may be named); they are resolved when the files are applied and only a hash
is stored. Each section is handled by a ``SectionHandler``; the broker, scheduler
and the rest register theirs for their own sections. Keys and sections of Zato's enmasse files that
Conduit does not use are accepted and listed in one warning (``runtime.zato_keys``).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from sqlalchemy import Connection, Engine, delete, select

from runtime import secret_refs, zato_keys
from runtime.channels import Channel, parse_methods
from runtime.db.engine import transaction
from runtime.db.models import BasicAuthDef, RestChannel
from runtime.errors import ConfigError
from runtime.security import hash_password, verify_password
from runtime.sync import bump, lock

_log = logging.getLogger(__name__)

#: Sync key whose value holds the hash of the files last applied.
SYNC_KEY = 'objects'
SECURITY_KEY = 'security'
CHANNELS_KEY = 'channels'


@dataclass
class SectionHandler:
    """Applies one section of the files: items is every item of that section, from every file."""

    section: str
    apply: Callable[[Connection, list[dict[str, Any]]], None]
    #: Sync keys to bump when this section was applied.
    sync_keys: tuple[str, ...] = ()


def resolve_secret(value: Any, where: str) -> str:
    """A password as written, or the ``${CONDUIT_SECRET_...}`` variable it references (runtime.secret_refs)."""
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


def _require(item: dict[str, Any], key: str, where: str) -> Any:
    value = item.get(key)
    if value is None or value == '':
        raise ConfigError(where, f'{key!r} is required')
    return value


def _check_unique(items: list[dict[str, Any]], section: str) -> None:
    seen: set[str] = set()
    for item in items:
        name = item['name']
        if name in seen:
            raise ConfigError(f'{item["_file"]} [{section}]', f'{name!r} is declared twice')
        seen.add(name)


def apply_security(conn: Connection, items: list[dict[str, Any]]) -> None:
    """Section ``security``: Basic Auth definitions."""
    for item in items:
        where = f'{item["_file"]} [security] {item.get("name", "?")!r}'
        item['name'] = str(_require(item, 'name', where))
        kind = item.get('type', 'basic_auth')
        if kind != 'basic_auth':
            raise ConfigError(where, f'type {kind!r} is not supported; use basic_auth')
        _require(item, 'username', where)
        item['_password'] = resolve_secret(_require(item, 'password', where), where)
    _check_unique(items, 'security')
    existing = {r.name: r for r in conn.execute(select(BasicAuthDef)).all()}
    usernames = {r.username: r.name for r in existing.values()}
    for item in items:
        old = existing.get(item['name'])
        owner = usernames.get(item['username'])
        if owner is not None and owner != item['name']:
            raise ConfigError(f'{item["_file"]} [security] {item["name"]!r}',
                              f'username {item["username"]!r} is already used by {owner!r}')
        values = {'username': str(item['username']), 'realm': str(item.get('realm') or 'Conduit'),
                  'is_active': bool(item.get('is_active', True)), 'origin': 'config'}
        if old is None or not verify_password(item['_password'], old.password_hash):
            values['password_hash'] = hash_password(item['_password'])
        if old is None:
            conn.execute(BasicAuthDef.__table__.insert().values(name=item['name'], **values))
        else:
            conn.execute(BasicAuthDef.__table__.update().where(BasicAuthDef.name == item['name']).values(**values))
    conn.execute(delete(BasicAuthDef).where(BasicAuthDef.origin == 'config',
                                            BasicAuthDef.name.not_in([i['name'] for i in items])))


def apply_channels(conn: Connection, items: list[dict[str, Any]]) -> None:
    """Section ``channel_rest``: REST channels."""
    rows = []
    for item in items:
        where = f'{item["_file"]} [channel_rest] {item.get("name", "?")!r}'
        methods = parse_methods(item.get('methods', item.get('method')))
        try:
            channel = Channel(name=str(_require(item, 'name', where)), service=str(_require(item, 'service', where)),
                              url_path=str(_require(item, 'url_path', where)), methods=methods,
                              data_format=str(item.get('data_format') or 'json'),
                              security=str(item.get('security') or ''), is_active=bool(item.get('is_active', True)))
        except ConfigError as e:
            raise ConfigError(where, e.reason) from None
        item['name'] = channel.name
        rows.append(channel)
    _check_unique(items, 'channel_rest')
    known_security = {r.name for r in conn.execute(select(BasicAuthDef.name)).all()}
    for channel, item in zip(rows, items, strict=True):
        if channel.security and channel.security not in known_security:
            raise ConfigError(f'{item["_file"]} [channel_rest] {channel.name!r}',
                              f'security definition {channel.security!r} does not exist')
        values = {'service': channel.service, 'url_path': channel.url_path,
                  'methods': ','.join(sorted(channel.methods)), 'data_format': channel.data_format,
                  'security': channel.security, 'is_active': channel.is_active, 'origin': 'config'}
        exists = conn.execute(select(RestChannel.id).where(RestChannel.name == channel.name)).first()
        if exists:
            conn.execute(RestChannel.__table__.update().where(RestChannel.name == channel.name).values(**values))
        else:
            conn.execute(RestChannel.__table__.insert().values(name=channel.name, **values))
    conn.execute(delete(RestChannel).where(RestChannel.origin == 'config',
                                           RestChannel.name.not_in([c.name for c in rows])))


class ObjectsApplier:
    """Reads the object files and applies them through the registered section handlers."""

    def __init__(self, engine: Engine, dirs: Iterable[Path]) -> None:
        self._engine = engine
        self.dirs = list(dirs)
        # Order matters: channels refer to security definitions.
        self.handlers: dict[str, SectionHandler] = {}
        self.add_handler(SectionHandler('security', apply_security, (SECURITY_KEY,)))
        self.add_handler(SectionHandler('channel_rest', apply_channels, (CHANNELS_KEY,)))
        self._warned: set[str] = set()
        self._ignored = zato_keys.Ignored()
        self._mtimes: dict[Path, int] = {}

    def add_handler(self, handler: SectionHandler) -> None:
        """Handle one more section (later handlers run after earlier ones)."""
        self.handlers[handler.section] = handler

    def files(self) -> list[Path]:
        """Every object file, in a fixed order."""
        found: list[Path] = []
        for d in self.dirs:
            if d.is_dir():
                found.extend(sorted(p for p in d.iterdir() if p.suffix in ('.yaml', '.yml') and p.is_file()))
        return found

    def _read(self, files: list[Path]) -> tuple[str, dict[str, list[dict[str, Any]]]]:
        digest = hashlib.sha256()
        sections: dict[str, list[dict[str, Any]]] = {}
        ignored = zato_keys.Ignored()
        for path in files:
            text = path.read_text(encoding='utf-8')
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
        return keys

    def _apply(self, files: list[Path]) -> list[str] | None:
        """The sync keys bumped, or None when the database already holds these files."""
        digest, sections = self._read(files)
        with transaction(self._engine, write=True) as conn:
            # Every worker watches the same files: the lock makes the second one wait for the first
            # and then find the files applied, instead of inserting the same objects again.
            if lock(conn, SYNC_KEY) == digest:
                return None
            keys: list[str] = []
            for section, handler in self.handlers.items():
                handler.apply(conn, sections.get(section, []))
                keys.extend(handler.sync_keys)
            for key in keys:
                bump(conn, key)
            bump(conn, SYNC_KEY, digest)
        zato_keys.warn(self._ignored)  # once per set of files applied, not per worker that reads them
        return keys

    @staticmethod
    def _stat(files: list[Path]) -> dict[Path, int]:
        return {f: f.stat().st_mtime_ns for f in files}

    def changed_on_disk(self) -> bool:
        """Whether any object file was added, removed or modified since the last apply."""
        return self._stat(self.files()) != self._mtimes
