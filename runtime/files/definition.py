"""What an inbound file-transfer channel is: ``FileChannelDef``, its fields, and the rules they obey.

A channel watches one directory, local or on an SFTP server, and turns each complete file that
matches its patterns into publications on topics and/or invocations of a service. The definition
is the one place that says which values are acceptable: object files, the admin API and the CLI
all build it with ``FileChannelDef.from_values``, which refuses anything else with a
``ConfigError`` naming the channel and the field. What the database keeps is
``FileChannelDef.stored()`` (``as_values()`` without the name and ``is_active``, which have
columns of their own); ``FileChannelDef.from_stored`` reads it back.

Secrets are never part of a definition: an SFTP password or private key is given only as a
``${CONDUIT_SECRET_...}`` reference (``runtime.security.secret_refs``), resolved when the channel connects,
so that ``as_values()`` is safe to store, to show in the admin API and to write to the audit log.
An SFTP source must also pin the server's host key (``sftp_host_key``) or name a known_hosts
file: a channel never trusts the first key it is shown. SFTP needs paramiko, the ``sftp`` extra: without
it an SFTP channel is refused with a ``ConfigError`` naming the extra (a 400 from the admin API; a
stored one shows it as its problem and does not run), and local channels work as ever.
"""

from __future__ import annotations

import json
import math
import posixpath
from dataclasses import MISSING, dataclass, fields
from typing import Any

from runtime.errors import ConfigError, InvalidTopicName
from runtime.files.naming import INBOUND_FIELDS, check_template
from runtime.files.parsers import check_encoding
from runtime.files.sftp_params import HOST_KEY_TYPES, SftpParams, check_params, parse_host_key, require_paramiko
from runtime.pubsub.topics import normalize, validate_topic_name
from runtime.security import secret_refs

#: Sync key bumped whenever a file channel is created, changed or deleted.
FILE_CHANNELS_KEY = 'file_channels'

#: How a file's content is read.
FORMATS = ('bytes', 'text', 'json', 'jsonl', 'csv')

#: What happens to a processed file.
AFTER = ('delete', 'move', 'leave')

#: When a file counts as complete.
COMPLETE_WHEN = ('stable', 'marker')

#: One record per file, or one per element / line / row.
RECORD_MODES = ('file', 'each')

#: A service is invoked once per file or once per record.
INVOKE_PER = ('file', 'record')

#: The record mode a format has when ``records`` is left empty.
DEFAULT_RECORDS = {'bytes': 'file', 'text': 'file', 'json': 'file', 'jsonl': 'each', 'csv': 'each'}

#: Fields a ``move_to`` template may use (``runtime.files.naming`` fills them).
MOVE_FIELDS = INBOUND_FIELDS

#: Longest channel name, in characters (the name column's width).
MAX_NAME_CHARS = 200

#: Longest directory, template or file path, in characters.
MAX_PATH_CHARS = 1000

#: Most patterns and topics one channel may have.
MAX_PATTERNS = 100
MAX_TOPICS = 100

#: Bounds of the numeric fields: (low, high), both included.
_RANGES: dict[str, tuple[float, float]] = {
    'poll_interval_secs': (0.05, 86_400.0),
    'stable_polls': (1, 1000),
    'invoke_retries': (0, 100),
    'invoke_retry_wait_secs': (0.0, 3600.0),
    'batch_size': (1, 10_000),
    'max_parallel_files': (1, 64),
    'sftp_port': (1, 65_535),
}

#: Fields whose values are references to secrets: never quoted in an error.
_SECRET_FIELDS = ('sftp_password', 'sftp_private_key')


@dataclass(frozen=True)
class FileChannelDef:
    """One inbound file-transfer channel, validated (build it with ``from_values``)."""

    name: str
    #: A local directory (absolute), or the remote directory when ``sftp_host`` is set.
    directory: str
    #: fnmatch globs on the file name (not its directory).
    patterns: tuple[str, ...] = ('*',)
    recursive: bool = False
    poll_interval_secs: float = 5.0
    complete_when: str = 'stable'
    #: 'stable': size and mtime unchanged over this many polls after the file was first seen.
    stable_polls: int = 2
    #: 'marker': the file is complete once ``<name><marker_suffix>`` exists beside it.
    marker_suffix: str = '.done'
    format: str = 'json'
    #: '' means the format's default (``DEFAULT_RECORDS``).
    records: str = ''
    encoding: str = 'utf-8'
    csv_delimiter: str = ','
    topics: tuple[str, ...] = ()
    service: str = ''
    invoke_per: str = 'file'
    invoke_retries: int = 3
    invoke_retry_wait_secs: float = 1.0
    #: Records published per transaction.
    batch_size: int = 500
    max_parallel_files: int = 4
    after: str = 'delete'
    #: Path template of a moved file, relative to ``directory`` unless absolute.
    move_to: str = 'processed/{date}/{name}'
    #: Where failed files go (with their ``.error.json``), relative to ``directory`` unless absolute.
    error_dir: str = 'errors'
    #: Process a file again even when a file with the same content was processed before.
    reprocess_same: bool = False
    is_active: bool = True
    sftp_host: str = ''
    sftp_port: int = 22
    sftp_username: str = ''
    #: ``${CONDUIT_SECRET_...}`` references only.
    sftp_password: str = ''
    sftp_private_key: str = ''
    #: The server's public key line ('ssh-ed25519 AAAA...'), pinned; or a known_hosts file.
    sftp_host_key: str = ''
    sftp_known_hosts: str = ''

    @property
    def record_mode(self) -> str:
        """'file' or 'each': ``records``, or the format's default when it is empty."""
        return self.records or DEFAULT_RECORDS[self.format]

    @property
    def is_sftp(self) -> bool:
        """Whether the directory is on an SFTP server."""
        return bool(self.sftp_host)

    @property
    def sftp(self) -> SftpParams | None:
        """How to reach the SFTP server (references, not secrets), or None for a local directory."""
        if not self.sftp_host:
            return None
        return SftpParams(host=self.sftp_host, port=self.sftp_port, username=self.sftp_username,
                          password_ref=self.sftp_password, private_key_ref=self.sftp_private_key,
                          host_key=self.sftp_host_key, known_hosts=self.sftp_known_hosts)

    @property
    def label(self) -> str:
        """Where the channel reads from, as logs name it (never a secret)."""
        if self.sftp_host:
            return f'sftp://{self.sftp_username}@{self.sftp_host}:{self.sftp_port}/{self.directory.lstrip("/")}'
        return self.directory

    @classmethod
    def from_values(cls, values: dict[str, Any], where: str) -> FileChannelDef:
        """A checked definition from plain values (an object file's item, an admin API body).

        Fields left out take their defaults; an unknown field, a value of the wrong type or out of
        range, a plain password, an unsafe path and a wildcard topic are refused with a ConfigError
        naming where and the field.
        """
        if not isinstance(values, dict):
            raise ConfigError(where, 'a file channel must be a mapping of field names to values')
        known = {f.name for f in fields(cls)}
        unknown = sorted(str(k) for k in values if k not in known)
        if unknown:
            shown = ', '.join(repr(k[:60]) for k in unknown[:10]) + (', ...' if len(unknown) > 10 else '')
            raise ConfigError(where, f'unknown field(s): {shown}; known: {", ".join(sorted(known))}')
        check = _Checker(values, where)
        name = check.text('name', required=True, max_len=MAX_NAME_CHARS)
        if name != name.strip() or any(c in name for c in '/\\'):
            raise ConfigError(where, "'name' must not contain '/' or '\\' nor start or end with whitespace")
        fmt = check.choice('format', FORMATS)
        records = check.text('records')
        if records and records not in RECORD_MODES:
            raise ConfigError(where, f"'records' must be one of {', '.join(RECORD_MODES)} or empty "
                                     f'(the default of the format), not {records!r}')
        if fmt == 'bytes' and records == 'each':
            raise ConfigError(where, "'records' must be 'file' for format bytes (bytes have no records)")
        sftp_host = check.text('sftp_host', max_len=255)
        if sftp_host:
            # Before the SFTP fields: without paramiko (the sftp extra) a host key could not even be parsed,
            # and the one thing to fix is the installation ("SFTP needs paramiko ...: pip install ...").
            require_paramiko(where)
        definition = cls(
            name=name,
            directory=_directory(check, bool(sftp_host)),
            patterns=_patterns(check),
            recursive=check.flag('recursive'),
            poll_interval_secs=check.number('poll_interval_secs'),
            complete_when=check.choice('complete_when', COMPLETE_WHEN),
            stable_polls=check.whole('stable_polls'),
            marker_suffix=_marker_suffix(check),
            format=fmt,
            records=records,
            encoding=_encoding(check),
            csv_delimiter=_csv_delimiter(check),
            topics=_topics(check),
            service=check.text('service', max_len=200),
            invoke_per=check.choice('invoke_per', INVOKE_PER),
            invoke_retries=check.whole('invoke_retries'),
            invoke_retry_wait_secs=check.number('invoke_retry_wait_secs'),
            batch_size=check.whole('batch_size'),
            max_parallel_files=check.whole('max_parallel_files'),
            after=check.choice('after', AFTER),
            move_to=_move_to(check),
            error_dir=_relative_or_absolute_path(check, 'error_dir'),
            reprocess_same=check.flag('reprocess_same'),
            is_active=check.flag('is_active'),
            sftp_host=sftp_host,
            sftp_port=check.whole('sftp_port'),
            sftp_username=check.text('sftp_username', max_len=200),
            sftp_password=check.reference('sftp_password'),
            sftp_private_key=check.reference('sftp_private_key'),
            sftp_host_key=_host_key(check),
            sftp_known_hosts=check.text('sftp_known_hosts', max_len=MAX_PATH_CHARS),
        )
        if not definition.topics and not definition.service:
            raise ConfigError(where, "give 'topics' to publish to, a 'service' to invoke, or both")
        _check_sftp(definition, where)
        return definition

    def as_values(self) -> dict[str, Any]:
        """Every field as plain JSON values (lists for tuples); only references, never secrets."""
        return {f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v for f in fields(self)}

    def stored(self) -> str:
        """The JSON the database keeps in ``conduit_file_channel.definition`` (no name, no is_active)."""
        values = self.as_values()
        del values['name'], values['is_active']
        return json.dumps(values, sort_keys=True)

    @classmethod
    def from_stored(cls, name: str, definition: str, is_active: bool, where: str | None = None) -> FileChannelDef:
        """A definition read back from its row; ConfigError when it no longer passes the checks."""
        where = where or f'file channel {name!r}'
        try:
            values = json.loads(definition)
        except ValueError:
            raise ConfigError(where, 'the stored definition is not valid JSON') from None
        if not isinstance(values, dict):
            raise ConfigError(where, 'the stored definition is not a JSON object')
        return cls.from_values({**values, 'name': name, 'is_active': is_active}, where)


#: Every field's default, for the checker.
_DEFAULTS: dict[str, Any] = {f.name: f.default for f in fields(FileChannelDef) if f.default is not MISSING}


class _Checker:
    """Reads one field at a time from plain values, with its default, refusing a wrong type."""

    def __init__(self, values: dict[str, Any], where: str) -> None:
        self.values = values
        self.where = where

    def error(self, field: str, reason: str) -> ConfigError:
        """A ConfigError naming the field."""
        return ConfigError(self.where, f'{field!r} {reason}')

    def get(self, field: str) -> Any:
        """The field's value; its default when absent or null."""
        value = self.values.get(field)
        return _DEFAULTS.get(field) if value is None else value

    def shown(self, field: str, value: Any) -> str:
        """How an error quotes a value: never a secret's, at most 60 characters of any other."""
        if field in _SECRET_FIELDS:
            return '(hidden)'
        text = repr(value)
        return text if len(text) <= 60 else text[:57] + '...'

    def text(self, field: str, required: bool = False, max_len: int = MAX_PATH_CHARS) -> str:
        """A string without control characters."""
        value = self.get(field)
        if value is None:
            value = ''
        if not isinstance(value, str):
            raise self.error(field, f'must be a string, not {type(value).__name__}')
        if required and not value:
            raise self.error(field, 'is required')
        if len(value) > max_len:
            raise self.error(field, f'must be at most {max_len} characters')
        if any(ord(c) < 32 or ord(c) == 127 for c in value):
            raise self.error(field, 'must not contain control characters')
        try:
            value.encode('utf-8')
        except UnicodeEncodeError:
            raise self.error(field, 'is not valid Unicode') from None
        return value

    def choice(self, field: str, allowed: tuple[str, ...]) -> str:
        """One of a few words."""
        value = self.get(field)
        if value not in allowed or not isinstance(value, str):
            raise self.error(field, f'must be one of {", ".join(allowed)}, not {self.shown(field, value)}')
        return value

    def flag(self, field: str) -> bool:
        """true or false."""
        value = self.get(field)
        if not isinstance(value, bool):
            raise self.error(field, f'must be true or false, not {self.shown(field, value)}')
        return value

    def whole(self, field: str) -> int:
        """A whole number within the field's range (2.0 is taken as 2)."""
        low, high = _RANGES[field]
        value = self.get(field)
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.error(field, f'must be a whole number from {int(low)} to {int(high)}, '
                                    f'not {self.shown(field, value)}')
        return value

    def number(self, field: str) -> float:
        """A finite number of seconds within the field's range."""
        low, high = _RANGES[field]
        value = self.get(field)
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                or not low <= value <= high):
            raise self.error(field, f'must be a number from {low:g} to {high:g}, not {self.shown(field, value)}')
        return float(value)

    def reference(self, field: str) -> str:
        """'' or a ``${CONDUIT_SECRET_...}`` reference (a plain secret is refused without being quoted)."""
        value = self.values.get(field)
        if value is None or value == '':
            return ''
        if not isinstance(value, str):
            raise self.error(field, 'must be a ${CONDUIT_SECRET_...} reference (a string)')
        secret_refs.reference_name(value, field, self.where)
        return value.strip()


def _safe_path(check: _Checker, field: str, value: str) -> str:
    """A path without '..' components or backslashes (a Windows separator would hide a '..')."""
    if '\\' in value:
        raise check.error(field, "must use '/' as separator, not '\\'")
    if '..' in value.split('/'):
        raise check.error(field, "must not contain '..' (a path may not climb out of its directory)")
    return value


def _directory(check: _Checker, sftp: bool) -> str:
    value = check.text('directory', required=True)
    _safe_path(check, 'directory', value)
    if not sftp and not value.startswith('/'):
        raise check.error('directory', f'must be an absolute path (it is local), not {value!r}')
    return value.rstrip('/') or '/'


def _relative_or_absolute_path(check: _Checker, field: str) -> str:
    value = check.text(field, required=True)
    _safe_path(check, field, value)
    if '{' in value or '}' in value:
        raise check.error(field, 'is a directory, not a template: it must not contain { or }')
    if posixpath.normpath(value) in ('.', '/'):
        raise check.error(field, 'must name a directory other than the channel directory or the root')
    return value


def _patterns(check: _Checker) -> tuple[str, ...]:
    value = check.get('patterns')
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not value:
        raise check.error('patterns', 'must be a non-empty list of file name globs (e.g. ["*.csv"])')
    if len(value) > MAX_PATTERNS:
        raise check.error('patterns', f'must have at most {MAX_PATTERNS} globs')
    found = []
    for item in value:
        if not isinstance(item, str) or not item:
            raise check.error('patterns', f'must hold non-empty strings, not {check.shown("patterns", item)}')
        if len(item) > 255 or any(ord(c) < 32 or ord(c) == 127 for c in item):
            raise check.error('patterns', f'has an invalid glob {check.shown("patterns", item)}: at most 255 '
                                          'characters, no control characters')
        if '/' in item or '\\' in item:
            raise check.error('patterns', f'glob {item!r} must match file names only, without / or \\ '
                                          '(use recursive for subdirectories)')
        if item not in found:
            found.append(item)
    return tuple(found)


def _topics(check: _Checker) -> tuple[str, ...]:
    value = check.get('topics')
    if isinstance(value, str):
        value = [value] if value else []
    if not isinstance(value, (list, tuple)):
        raise check.error('topics', 'must be a list of topic names')
    if len(value) > MAX_TOPICS:
        raise check.error('topics', f'must have at most {MAX_TOPICS} topics')
    found: list[str] = []
    for item in value:
        try:
            validate_topic_name(item)
        except InvalidTopicName as e:
            raise check.error('topics', f'has an invalid name: {e}') from None
        if normalize(item) in (normalize(t) for t in found):
            raise check.error('topics', f'names {item!r} twice')
        found.append(item)
    return tuple(found)


def _marker_suffix(check: _Checker) -> str:
    value = check.text('marker_suffix', max_len=100)
    if not value or value.strip('.') == '' or '/' in value or '\\' in value:
        raise check.error('marker_suffix', f'must be a file name ending such as .done (no / or \\), '
                                           f'not {value!r}')
    return value


def _encoding(check: _Checker) -> str:
    value = check.text('encoding', required=True, max_len=64)
    try:
        check_encoding(value, check.where)
    except ConfigError as e:
        raise check.error('encoding', f'is not usable: {e.reason}') from None
    return value


def _csv_delimiter(check: _Checker) -> str:
    value = check.get('csv_delimiter')
    if (not isinstance(value, str) or len(value) != 1 or value == '"' or value.isalnum()
            or (ord(value) < 32 and value != '\t') or ord(value) == 127):
        raise check.error('csv_delimiter', f'must be one character that is not a letter, digit, quote or '
                                           f'line end, not {check.shown("csv_delimiter", value)}')
    return value


def _move_to(check: _Checker) -> str:
    value = check.text('move_to', required=True)
    _safe_path(check, 'move_to', value)
    if value.endswith('/'):
        raise check.error('move_to', 'must end with a file name template such as {name}, not /')
    try:
        check_template(value, MOVE_FIELDS, check.where)
    except ConfigError as e:
        raise check.error('move_to', f'is not a usable template: {e.reason}') from None
    return value


def _host_key(check: _Checker) -> str:
    """'' or an SSH public key line: '<type> <base64 blob> [comment]', blob and type agreeing."""
    value = check.text('sftp_host_key', max_len=16_384).strip()
    if not value:
        return ''
    parts = value.split()
    usage = ("must be the server's public key line, e.g. 'ssh-ed25519 AAAAC3...' "
             '(as in /etc/ssh/ssh_host_ed25519_key.pub)')
    if len(parts) < 2 or parts[0] not in HOST_KEY_TYPES:
        raise check.error('sftp_host_key', f'{usage}; key types: {", ".join(HOST_KEY_TYPES)}')
    try:
        parse_host_key(value, check.where)
    except ConfigError as e:
        raise check.error('sftp_host_key', f'{usage}; {e.reason}') from None
    return ' '.join(parts[:2])


def _check_sftp(d: FileChannelDef, where: str) -> None:
    """SFTP fields only with a host; with one, a user, a credential and a pinned host key."""
    def error(field: str, reason: str) -> ConfigError:
        return ConfigError(where, f'{field!r} {reason}')

    if not d.sftp_host:
        for field in ('sftp_username', 'sftp_password', 'sftp_private_key', 'sftp_host_key', 'sftp_known_hosts'):
            if getattr(d, field):
                raise error(field, 'needs sftp_host (it is for SFTP channels only)')
        if d.sftp_port != 22:
            raise error('sftp_port', 'needs sftp_host (it is for SFTP channels only)')
        return
    if any(c.isspace() or c in '/@\\[]' for c in d.sftp_host.strip('[]')) or d.sftp_host.startswith('-'):
        raise error('sftp_host', f'must be a host name or address, not {d.sftp_host!r}')
    if not d.sftp_username:
        raise error('sftp_username', 'is required with sftp_host')
    if not d.sftp_password and not d.sftp_private_key:
        raise error('sftp_password', 'or sftp_private_key is required with sftp_host (a ${CONDUIT_SECRET_...} '
                                     'reference)')
    if not d.sftp_host_key and not d.sftp_known_hosts:
        raise error('sftp_host_key', "or sftp_known_hosts is required with sftp_host: the server's key is "
                                     'pinned, never accepted on first sight')
    if d.sftp_known_hosts and not d.sftp_known_hosts.startswith('/'):
        raise error('sftp_known_hosts', f'must be an absolute path, not {d.sftp_known_hosts!r}')
    params = d.sftp
    if params is not None:
        check_params(params, where)  # what the connection itself will need, in its own words
