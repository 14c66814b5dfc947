"""File sources: the directories file channels read from and file subscribers write to.

``open_source(directory, sftp)`` gives a ``LocalSource`` for a local directory, or an
``SftpSource`` (``runtime.files.sftp``) when SFTP parameters are given. Both follow the ``Source``
protocol (``runtime.files.source_base``) and behave the same:

- Paths are relative to the root; an absolute path, a '..' component, a NUL or a backslash raises
  ``ValueError`` (``clean_path``). A local source also refuses a path that would reach outside its
  root through a symbolic link inside it (a sender who can write into the directory could otherwise
  plant ``processed -> /etc`` and have moved files land there).
- ``list`` returns regular files only, sorted by path: directories are descended into when
  recursive (except ``skip_dirs``), symbolic links are neither followed nor listed (a link could
  expose any file the server can read), and names that are not valid UTF-8 are skipped with a
  warning. A root that does not exist raises ``SourceMissing``.
- ``rename`` never overwrites: it returns False when the source file is gone (another server
  claimed it first) or the target exists, so that of several servers claiming one file exactly one
  wins. A missing target directory raises ``SourceMissing`` naming it.
- ``write_atomic`` writes ``.<name>.conduit-tmp-<random>`` beside the target and renames it over the
  target, so a reader never sees half a file; the temporary file is removed if anything fails. The
  target's directory must exist (``makedirs`` first): a missing one raises ``SourceMissing`` rather
  than being created, since a missing root usually means a mount that is not there (``make_root``
  makes the root itself, for file subscribers).
- ``makedirs`` and ``write_atomic`` never follow a symbolic link below the root, even one that
  would stay inside it: a link raises ``LinkRefused`` naming it. Locally each directory is opened
  relative to the one before with O_NOFOLLOW and the file is created and renamed relative to its
  directory's descriptor, so a link swapped in while a write runs is refused too; over SFTP each
  component is checked with lstat before use (the protocol has nothing relative to an open
  directory). A link at the final name is replaced by the file (a rename replaces the link, never
  what it points to). The root itself is taken as configured: a link there is the operator's.
- A file that is gone raises ``FileNotFoundError`` from ``open_read`` and ``replace``; other
  operating-system errors (permissions) propagate as ``OSError``. Connection trouble (SFTP only)
  raises ``SourceUnavailable``.

Local renames use ``renameat2(RENAME_NOREPLACE)`` where the kernel and filesystem offer it, else a
hard link followed by an unlink of the old name (only one unlink of the same name can succeed).
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import stat as stat_mode
from collections.abc import Collection, Iterable
from typing import BinaryIO

from runtime.errors import LinkRefused, SourceMissing
from runtime.files.sftp_params import SftpParams
from runtime.files.source_base import Entry, Source, clean_path, is_utf8_name, split_path, temp_name

__all__ = ['Entry', 'LocalSource', 'Source', 'SftpParams', 'open_source']

_log = logging.getLogger(__name__)

#: Read buffer of local files.
READ_BUFFER_BYTES = 64 * 1024

#: How directories are opened to walk a path; the walk adds O_NOFOLLOW below the root.
_CLOEXEC = getattr(os, 'O_CLOEXEC', 0)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | _CLOEXEC

_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
#: errnos of renameat2 that mean "not offered here": fall back to link + unlink.
_NO_RENAMEAT2 = {errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOTSUP}


def _find_renameat2() -> object | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    return getattr(libc, 'renameat2', None)


_renameat2 = _find_renameat2()


def _rename_noreplace(src: str, dst: str) -> None:
    """Rename src to dst atomically; FileExistsError if dst exists, FileNotFoundError if src is gone."""
    global _renameat2
    if _renameat2 is not None:
        if _renameat2(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        err = ctypes.get_errno()
        if err not in _NO_RENAMEAT2:
            raise OSError(err, os.strerror(err), src, None, dst)
        if err == errno.ENOSYS:
            _renameat2 = None
    os.link(src, dst, follow_symlinks=False)
    try:
        os.unlink(src)
    except FileNotFoundError:
        # Another process linked and unlinked it first: it won; drop our spare name.
        try:
            os.unlink(dst)
        except FileNotFoundError:
            pass
        raise


class LocalSource:
    """A directory on this machine's file system."""

    def __init__(self, root: str) -> None:
        if not isinstance(root, str) or not root:
            raise ValueError('a local source needs a directory')
        self.root = root
        self.label = root
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f'LocalSource({self.root!r})'

    # Paths

    def _full(self, path: str, *, allow_root: bool = False) -> str:
        """The real path for a relative one, after checking it stays inside the root.

        The directory part is resolved (symbolic links followed) and must lie within the root's
        own resolved path. (Writing and making directories walk the path without links instead:
        ``_open_dir``.)
        """
        rel = clean_path(path, allow_root=allow_root)
        full = os.path.join(self.root, rel) if rel else self.root
        # A name directly in the root has the root itself as its directory: nothing to resolve (the
        # two realpath calls were an eighth of a small file's processing time).
        if '/' in rel:
            root_real = os.path.realpath(self.root)
            checked = os.path.realpath(os.path.dirname(full))
            if checked != root_real and not checked.startswith(root_real.rstrip('/') + '/'):
                raise ValueError(f'source path {path!r} leads outside {self.label} through a symbolic link')
        return full

    def _missing_dir(self, path: str) -> SourceMissing:
        directory = split_path(clean_path(path))[0]
        return SourceMissing(self.label, directory) if directory else SourceMissing(self.label)

    # Listing

    def list(self, recursive: bool, skip_dirs: Collection[str] = ()) -> list[Entry]:
        """Regular files under the root, sorted by path (see the module docstring)."""
        skip = {clean_path(d, allow_root=True) for d in skip_dirs}
        entries: list[Entry] = []
        try:
            with os.scandir(self.root) as it:
                found = list(it)
        except (FileNotFoundError, NotADirectoryError):
            raise SourceMissing(self.label) from None
        pending = [('', found)]
        while pending:
            prefix, found = pending.pop()
            for item in found:
                if not is_utf8_name(item.name):
                    self._warn_name(prefix, item.name)
                    continue
                rel = f'{prefix}{item.name}'
                try:
                    if item.is_dir(follow_symlinks=False):
                        if recursive and rel not in skip:
                            with os.scandir(item.path) as it:
                                pending.append((rel + '/', list(it)))
                        continue
                    if not item.is_file(follow_symlinks=False):
                        continue
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:  # removed while we looked
                    continue
                except PermissionError as e:
                    _log.warning('%s: cannot read %r, skipped: %s', self.label, rel, e.strerror)
                    continue
                entries.append(Entry(rel, item.name, st.st_size, st.st_mtime))
        entries.sort(key=lambda e: e.path)
        return entries

    def _warn_name(self, prefix: str, name: str) -> None:
        shown = prefix + name.encode('utf-8', 'backslashreplace').decode('ascii', 'replace')
        if shown not in self._warned:
            self._warned.add(shown)
            _log.warning('%s: skipping %r: its name is not valid UTF-8', self.label, shown)

    def exists(self, path: str) -> bool:
        """Whether anything (a file, directory or link) exists at path."""
        return os.path.lexists(self._full(path))

    def stat(self, path: str) -> Entry | None:
        """The regular file at path, or None when there is none (a directory or link gives None too)."""
        rel = clean_path(path)
        try:
            st = os.lstat(self._full(rel))
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat_mode.S_ISREG(st.st_mode):
            return None
        return Entry(rel, split_path(rel)[1], st.st_size, st.st_mtime)

    # Reading

    def open_read(self, path: str) -> BinaryIO:
        """A buffered binary stream of the regular file at path; links and special files are refused."""
        full = self._full(path)
        try:
            # O_NONBLOCK: opening a FIFO planted in the directory must not hang the worker.
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, 'O_CLOEXEC', 0))
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise ValueError(f'{self.label}: {path!r} is a symbolic link, not a file') from None
            raise
        try:
            if not stat_mode.S_ISREG(os.fstat(fd).st_mode):
                raise ValueError(f'{self.label}: {path!r} is not a regular file')
            os.set_blocking(fd, True)
            return os.fdopen(fd, 'rb', buffering=READ_BUFFER_BYTES)
        except BaseException:
            os.close(fd)
            raise

    # Changing

    def rename(self, src: str, dst: str) -> bool:
        """Atomically rename src to dst; False when src is gone or dst exists; never overwrites."""
        full_src, full_dst = self._full(src), self._full(dst)
        try:
            _rename_noreplace(full_src, full_dst)
        except FileExistsError:
            return False
        except FileNotFoundError:
            if os.path.lexists(full_src):
                raise self._missing_dir(dst) from None
            return False
        return True

    def replace(self, src: str, dst: str) -> None:
        """Atomically rename src to dst, replacing dst if it exists."""
        full_src, full_dst = self._full(src), self._full(dst)
        try:
            os.replace(full_src, full_dst)
        except FileNotFoundError:
            if os.path.lexists(full_src):
                raise self._missing_dir(dst) from None
            raise

    def remove(self, path: str) -> None:
        """Remove the file at path; a missing file is fine."""
        try:
            os.unlink(self._full(path))
        except FileNotFoundError:
            pass

    def make_root(self) -> None:
        """Create the root directory and its missing parents: the configured path, links on it followed."""
        os.makedirs(self.root, exist_ok=True)

    def makedirs(self, path: str) -> None:
        """Create the directory path and its missing parents; the root itself must exist; no link followed."""
        rel = clean_path(path, allow_root=True)
        os.close(self._open_dir(rel, create=True))

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Write chunks to a temporary file beside path, fsync it, and rename it over path; no link followed."""
        rel = clean_path(path)
        directory, name = split_path(rel)
        temp = split_path(temp_name(rel))[1]
        dir_fd = self._open_dir(directory, create=False)
        try:
            # O_EXCL with O_CREAT never follows a link at the temporary name; the rename below
            # replaces whatever the final name is (a link planted there is replaced, not followed).
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | _CLOEXEC, 0o666,
                         dir_fd=dir_fd)
            try:
                with os.fdopen(fd, 'wb') as f:
                    for chunk in chunks:
                        f.write(chunk)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException:
                try:
                    os.unlink(temp, dir_fd=dir_fd)
                except OSError:
                    pass
                raise
            # The rename is durable only once the directory itself is synced; some filesystems refuse it.
            try:
                os.fsync(dir_fd)
            except OSError:
                pass
        finally:
            os.close(dir_fd)

    def _open_dir(self, rel: str, *, create: bool) -> int:
        """A descriptor of directory rel below the root, reached one component at a time without links.

        Each step opens the next component relative to the descriptor of the one before with
        O_NOFOLLOW, so a link planted anywhere below the root — before the call or while it runs —
        is refused (LinkRefused), never followed. The root itself is opened as configured (an
        operator's link there is followed). create: make missing components (mkdir -p).
        """
        try:
            fd = os.open(self.root, _DIR_FLAGS)
        except (FileNotFoundError, NotADirectoryError):
            raise SourceMissing(self.label) from None
        done: list[str] = []
        try:
            for part in rel.split('/') if rel else []:
                done.append(part)
                step = self._open_child(fd, part, '/'.join(done), create)
                os.close(fd)
                fd = step
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _open_child(self, parent: int, name: str, shown: str, create: bool) -> int:
        """The descriptor of directory name in parent (made if missing and create); never through a link."""
        for _ in range(2):
            try:
                return os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=parent)
            except FileNotFoundError:
                if not create:
                    raise SourceMissing(self.label, shown) from None
                try:
                    os.mkdir(name, 0o777, dir_fd=parent)
                except FileExistsError:
                    pass  # made meanwhile, by another worker or as a planted link: the open tells
            except OSError as e:
                # O_NOFOLLOW gives ELOOP, and with O_DIRECTORY ENOTDIR, for a link.
                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    try:
                        is_link = stat_mode.S_ISLNK(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
                    except OSError:
                        is_link = False
                    if is_link:
                        raise LinkRefused(self.label, shown) from None
                    raise NotADirectoryError(errno.ENOTDIR, 'Not a directory', shown) from None
                raise
        raise SourceMissing(self.label, shown)  # made, then removed again before it could be opened

    def close(self) -> None:
        """Nothing to release for a local directory."""


def open_source(directory: str, sftp: SftpParams | None) -> Source:
    """The source for a directory: on an SFTP server when sftp is given, else on this machine."""
    if sftp is not None:
        # paramiko is loaded with the first SFTP source, not with every server (runtime.files.sftp_params).
        from runtime.files.sftp import SftpSource

        return SftpSource(directory, sftp)
    return LocalSource(directory)
