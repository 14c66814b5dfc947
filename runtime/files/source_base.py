"""What every file source shares: the listing entry, the ``Source`` protocol, and the path rules.

A source is a directory, local or on an SFTP server, that Conduit reads files from (inbound
channels) or writes files to (file subscribers). Every method takes paths relative to the source's
root, '/'-separated. ``clean_path`` is the one gate they all pass through: an absolute path, a
'..' component, a NUL or a backslash raises ``ValueError``, so that no name a sender chose and no
rendered template can make a source touch anything outside its root.

This module exists apart from ``runtime.files.sources`` so that both source kinds
(``sources.LocalSource``, ``sftp.SftpSource``) build on it without importing each other.
"""

from __future__ import annotations

import secrets
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import BinaryIO, Protocol

#: What marks a name as a temporary file of ``write_atomic`` (``.<name>.conduit-tmp-<random>``).
TEMP_MARK = '.conduit-tmp-'

#: Characters a relative path may not contain: NUL ends C strings; a backslash is a separator on
#: some SFTP servers (Windows ones) and would let '..\\' through.
_FORBIDDEN = ('\x00', '\\')


@dataclass(frozen=True)
class Entry:
    """A file seen in a listing."""

    path: str  # relative to the source's root directory, '/'-separated ('sub/a.csv')
    name: str  # last component
    size: int
    mtime: float  # seconds since epoch


class Source(Protocol):
    """Where files are read from or written to: a local directory or an SFTP directory."""

    root: str
    label: str

    def list(self, recursive: bool, skip_dirs: Collection[str] = ()) -> list[Entry]:
        """Regular files under the root, sorted by path; SourceMissing when the root does not exist."""

    def exists(self, path: str) -> bool:
        """Whether anything exists at path."""

    def stat(self, path: str) -> Entry | None:
        """The file at path, or None when there is none."""

    def open_read(self, path: str) -> BinaryIO:
        """A buffered binary stream of the file (FileNotFoundError when it is gone); the caller closes it."""

    def rename(self, src: str, dst: str) -> bool:
        """Atomically rename src to dst; False when src is gone or dst exists (dst is never overwritten)."""

    def replace(self, src: str, dst: str) -> None:
        """Atomically rename src to dst, replacing dst if it exists."""

    def remove(self, path: str) -> None:
        """Remove the file at path; a missing file is fine."""

    def make_root(self) -> None:
        """Create the root directory itself and its missing parents (links on the configured path followed)."""

    def makedirs(self, path: str) -> None:
        """Create the directory path and its missing parents (like ``mkdir -p``); LinkRefused at a link."""

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Write the file under a temporary name beside it, then replace path with it; LinkRefused at a link."""

    def close(self) -> None:
        """Release connections and handles; the source may be used again afterwards."""


def clean_path(path: str, *, allow_root: bool = False) -> str:
    """path normalised ('a//./b' -> 'a/b'); ValueError if it is absolute, has '..', NUL or a backslash.

    The root itself ('' or '.') is accepted only with allow_root.
    """
    if not isinstance(path, str):
        raise ValueError(f'a source path must be a string, not {type(path).__name__}')
    if any(c in path for c in _FORBIDDEN):
        raise ValueError(f'source path {path!r} contains a NUL or a backslash')
    if path.startswith('/'):
        raise ValueError(f'source path {path!r} is absolute; paths are relative to the source directory')
    parts = [p for p in path.split('/') if p not in ('', '.')]
    if '..' in parts:
        raise ValueError(f'source path {path!r} leaves the source directory')
    if not parts and not allow_root:
        raise ValueError(f'source path {path!r} names the source directory itself, not a file')
    return '/'.join(parts)


def split_path(path: str) -> tuple[str, str]:
    """(directory, name) of a cleaned path; directory is '' at the root."""
    directory, _, name = path.rpartition('/')
    return directory, name


def temp_name(path: str) -> str:
    """A fresh temporary name beside path: ``dir/.<name>.conduit-tmp-<random>``."""
    directory, name = split_path(path)
    temp = f'.{name}{TEMP_MARK}{secrets.token_hex(6)}'
    return f'{directory}/{temp}' if directory else temp


def is_utf8_name(name: str) -> bool:
    """Whether a name read from a directory is valid text (names that are not UTF-8 are skipped)."""
    try:
        name.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return True
