"""SFTP sources: a directory on an SFTP server, read and written through paramiko.

``SftpSource(root, params)`` follows the ``Source`` protocol exactly as ``LocalSource`` does (see
``runtime.files.sources``); this module adds what a network brings:

- **Connecting** happens at the first call, not at construction, and again at the first call
  after the connection broke. The call that finds the connection broken (or cannot make one)
  raises ``SourceUnavailable``; nothing is retried inside a call, so the poller or the delivery
  loop decides when to try again. ``timeout_secs`` bounds connecting, the SSH handshake,
  authentication, and every single SFTP request; a request that times out drops the connection
  (a late answer would otherwise be taken for the next request's).
- **The server is authenticated** before any credential is sent: its host key must equal the
  pinned ``host_key`` line, or be listed for ``[host]:port`` (``host`` for port 22) in the
  ``known_hosts`` file. An unknown or different key refuses the connection with
  ``SourceUnavailable`` saying so; keys are never added automatically.
- **Credentials** are ``${CONDUIT_SECRET_...}`` references (``runtime.security.secret_refs``), resolved at
  each connection, so that neither the database nor this object holds a secret. A private key
  is the text of an unencrypted OpenSSH or PEM key (ed25519, ECDSA, RSA). No agent and no keys from
  ``~/.ssh`` are used. Errors name the variable at most, never its value.
- **Renames**: ``rename`` is SFTP's plain RENAME, which OpenSSH (as SFTP version 3 asks) refuses
  when the target exists; claims have one winner on any server, since their targets differ and
  only one rename can take the source away. ``replace`` is the ``posix-rename@openssh.com``
  extension, which OpenSSH and most servers derived from it offer.
- **Links**: directory listings carry lstat attributes on OpenSSH, so links are not listed and
  ``open_read`` refuses one. What a path may reach beyond that is up to the server account's
  permissions (a chroot for a shared server): the source only refuses paths that leave its root
  by their spelling.

Listings read directory entries with paramiko's request primitives rather than ``listdir_attr``,
which fails on the first name that is not UTF-8; such names are skipped with a warning here, as
``LocalSource`` does. One connection serves each source, one request at a time (a lock), because
paramiko's SFTP client cannot wait for two answers at once. Streams from ``open_read`` share that
connection and fail with ``SourceUnavailable`` once it was replaced.
"""

from __future__ import annotations

import io
import logging
import posixpath
import stat as stat_mode
import threading
from collections.abc import Collection, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, BinaryIO

from runtime.errors import ConfigError, LinkRefused, SourceMissing, SourceUnavailable
from runtime.files.sftp_params import (
    PARAMIKO_MISSING,
    SftpParams,
    check_params,
    load_private_key,
    parse_host_key,
    sftp_label,
)
from runtime.files.source_base import Entry, clean_path, split_path, temp_name
from runtime.security import secret_refs

try:
    import paramiko
    from paramiko.sftp import CMD_CLOSE, CMD_NAME, CMD_OPENDIR, CMD_READDIR, SFTPError
    from paramiko.sftp_attr import SFTPAttributes
except ModuleNotFoundError as e:
    # paramiko is the optional sftp extra. Without it every SFTP definition is refused before a source is
    # opened (check_params), so only code importing this module directly gets here: tell it what to install.
    if e.name != 'paramiko':
        raise
    raise ModuleNotFoundError(f'runtime.files.sftp: {PARAMIKO_MISSING}', name='paramiko') from None

__all__ = ['SftpParams', 'SftpSource', 'check_params', 'load_private_key', 'parse_host_key', 'sftp_label']

_log = logging.getLogger(__name__)

#: Read buffer of remote files (paramiko asks for at most 32 KiB per request).
READ_BUFFER_BYTES = 64 * 1024

class _RefuseUnknown(paramiko.MissingHostKeyPolicy):
    """Refuse a server whose name is not in the known keys (never add it)."""

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        raise _UnknownHost(hostname)


class _UnknownHost(Exception):
    pass


class SftpSource:
    """A directory on an SFTP server (see the module docstring)."""

    def __init__(self, root: str, params: SftpParams) -> None:
        if not isinstance(root, str) or not root:
            raise ValueError('an SFTP source needs a directory')
        self.root = root
        self.params = params
        self.label = sftp_label(params, root)
        check_params(params, self.label)
        self._lock = threading.RLock()
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None
        #: Counts connections, so that a stream opened on an earlier one knows it is gone.
        self._generation = 0
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f'SftpSource({self.label!r})'

    # Connection

    def _remote(self, path: str, *, allow_root: bool = False) -> str:
        rel = clean_path(path, allow_root=allow_root)
        return posixpath.join(self.root, rel) if rel else self.root

    def _alive(self) -> bool:
        transport = self._client.get_transport() if self._client is not None else None
        return transport is not None and transport.is_active()

    def _drop(self) -> None:
        client, self._client, self._sftp = self._client, None, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - closing a broken connection may fail in any way
                pass

    def _credentials(self) -> tuple[str | None, paramiko.PKey | None]:
        """The password and private key the references name, read now; ConfigError names a variable at most."""
        p = self.params
        password = secret_refs.resolve(p.password_ref, 'sftp password', self.label) if p.password_ref else None
        pkey = None
        if p.private_key_ref:
            text = secret_refs.resolve(p.private_key_ref, 'sftp private key', self.label)
            pkey = load_private_key(text, f'{self.label}: sftp private key {p.private_key_ref}')
        return password, pkey

    def _new_client(self) -> paramiko.SSHClient:
        p = self.params
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_RefuseUnknown())
        if p.host_key:
            key = parse_host_key(p.host_key, self.label)
            name = p.host if p.port == 22 else f'[{p.host}]:{p.port}'
            client.get_host_keys().add(name, key.get_name(), key)
        else:
            try:
                # Read-only: paramiko writes back only the keys loaded with load_host_keys.
                client.load_system_host_keys(p.known_hosts)
            except (OSError, paramiko.SSHException, ValueError) as e:
                reason = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
                raise SourceUnavailable(self.label, f'cannot read known_hosts file {p.known_hosts}: {reason}') \
                    from None
        return client

    def _connect(self) -> paramiko.SFTPClient:
        if self._sftp is not None and self._alive():
            return self._sftp
        self._drop()
        p = self.params
        try:
            password, pkey = self._credentials()
        except ConfigError as e:
            raise SourceUnavailable(self.label, e.reason) from None
        client = self._new_client()
        t = float(p.timeout_secs)
        try:
            client.connect(p.host, p.port, username=p.username, password=password, pkey=pkey, timeout=t,
                           banner_timeout=t, auth_timeout=t, channel_timeout=t, allow_agent=False,
                           look_for_keys=False)
            sftp = client.open_sftp()
            sftp.get_channel().settimeout(t)
        except BaseException as e:
            client.close()
            raise self._refused(e) from None
        finally:
            del password, pkey
        self._client, self._sftp = client, sftp
        self._generation += 1
        _log.info('%s: connected', self.label)
        return sftp

    def _refused(self, e: BaseException) -> BaseException:
        """What a failed connection attempt raises: SourceUnavailable saying why, never with a secret."""
        p = self.params
        where = f'{p.host}:{p.port}'
        if isinstance(e, paramiko.BadHostKeyException):
            return SourceUnavailable(self.label, f'the host key of {where} does not match the expected one (it '
                                                 f'offers {e.key.get_name()} {e.key.fingerprint}); refusing to '
                                                 f'connect')
        if isinstance(e, _UnknownHost):
            return SourceUnavailable(self.label, f'{where} is not in the known_hosts file {p.known_hosts}, so its '
                                                 f'host key does not match any expected one; refusing to connect')
        if isinstance(e, paramiko.AuthenticationException):
            return SourceUnavailable(self.label, f'authentication as {p.username!r} failed')
        if isinstance(e, paramiko.ssh_exception.IncompatiblePeer):
            return SourceUnavailable(self.label, f'{where}: no common algorithms with the server (or the host key '
                                                 f'does not match: it offers no key of the expected type)')
        if isinstance(e, (paramiko.SSHException, EOFError, SFTPError, OSError)):
            return SourceUnavailable(self.label, f'cannot connect to {where}: {_why(e)}')
        return e

    @contextmanager
    def _session(self, doing: str) -> Iterator[paramiko.SFTPClient]:
        """The connected SFTP client, held alone; connection trouble inside becomes SourceUnavailable."""
        with self._lock:
            sftp = self._connect()
            try:
                yield sftp
            except (paramiko.SSHException, EOFError, SFTPError) as e:
                self._drop()
                raise SourceUnavailable(self.label, f'{doing}: {_why(e)}') from None
            except OSError as e:
                # An SFTP status error (no such file, permission denied) leaves the connection as it
                # was; a socket error or time-out does not.
                if isinstance(e, (TimeoutError, ConnectionError)) or not self._alive():
                    self._drop()
                    raise SourceUnavailable(self.label, f'{doing}: {_why(e)}') from None
                raise
            except BaseException as e:
                if not isinstance(e, Exception):
                    # Killed or timed out mid-request (a greenlet's Timeout): a packet may be half
                    # sent, so the connection cannot be trusted any more.
                    self._drop()
                raise

    # Listing

    def _readdir(self, sftp: paramiko.SFTPClient, path: str) -> list[tuple[str | None, bytes, SFTPAttributes]]:
        """(name or None if not UTF-8, raw name, lstat attributes) of each entry of a remote directory."""
        # paramiko's listdir_attr decodes names strictly and would fail on the first bad one.
        t, msg = sftp._request(CMD_OPENDIR, path)
        handle = msg.get_binary()
        found = []
        try:
            while True:
                try:
                    t, msg = sftp._request(CMD_READDIR, handle)
                except EOFError:
                    break
                if t != CMD_NAME:
                    raise SFTPError('expected a name response')
                for _ in range(msg.get_int()):
                    raw = msg.get_string()
                    msg.get_string()  # the 'ls -l' line
                    attr = SFTPAttributes._from_msg(msg)
                    if raw in (b'.', b'..'):
                        continue
                    try:
                        name: str | None = raw.decode('utf-8')
                    except UnicodeDecodeError:
                        name = None
                    found.append((name, raw, attr))
        finally:
            if self._alive():
                sftp._request(CMD_CLOSE, handle)
        return found

    def list(self, recursive: bool, skip_dirs: Collection[str] = ()) -> list[Entry]:
        """Regular files under the root, sorted by path (see runtime.files.sources)."""
        skip = {clean_path(d, allow_root=True) for d in skip_dirs}
        entries: list[Entry] = []
        with self._session('listing') as sftp:
            try:
                found = self._readdir(sftp, self.root)
            except (FileNotFoundError, NotADirectoryError):
                raise SourceMissing(self.label) from None
            pending = [('', found)]
            while pending:
                prefix, found = pending.pop()
                for name, raw, attr in found:
                    if name is None:
                        self._warn_name(prefix, raw)
                        continue
                    rel = f'{prefix}{name}'
                    mode = attr.st_mode or 0
                    if stat_mode.S_ISDIR(mode):
                        if recursive and rel not in skip:
                            try:
                                pending.append((rel + '/', self._readdir(sftp, posixpath.join(self.root, rel))))
                            except FileNotFoundError:  # removed while we looked
                                pass
                            except PermissionError:
                                _log.warning('%s: cannot read %r, skipped', self.label, rel)
                    elif stat_mode.S_ISREG(mode):
                        entries.append(Entry(rel, name, attr.st_size or 0, float(attr.st_mtime or 0)))
        entries.sort(key=lambda e: e.path)
        return entries

    def _warn_name(self, prefix: str, raw: bytes) -> None:
        shown = prefix + raw.decode('utf-8', 'backslashreplace')
        if shown not in self._warned:
            self._warned.add(shown)
            _log.warning('%s: skipping %r: its name is not valid UTF-8', self.label, shown)

    def _lstat(self, sftp: paramiko.SFTPClient, remote: str) -> SFTPAttributes | None:
        try:
            return sftp.lstat(remote)
        except FileNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        """Whether anything (a file, directory or link) exists at path."""
        remote = self._remote(path)
        with self._session('checking a path') as sftp:
            return self._lstat(sftp, remote) is not None

    def stat(self, path: str) -> Entry | None:
        """The regular file at path, or None when there is none (a directory or link gives None too)."""
        rel = clean_path(path)
        with self._session('reading file attributes') as sftp:
            attr = self._lstat(sftp, self._remote(rel))
        if attr is None or not stat_mode.S_ISREG(attr.st_mode or 0):
            return None
        return Entry(rel, split_path(rel)[1], attr.st_size or 0, float(attr.st_mtime or 0))

    # Reading

    def open_read(self, path: str) -> BinaryIO:
        """A buffered binary stream of the regular file at path; links and special files are refused."""
        remote = self._remote(path)
        with self._session('opening a file') as sftp:
            attr = self._lstat(sftp, remote)
            if attr is None:
                raise FileNotFoundError(2, 'No such file', path)
            if stat_mode.S_ISLNK(attr.st_mode or 0):
                raise ValueError(f'{self.label}: {path!r} is a symbolic link, not a file')
            if not stat_mode.S_ISREG(attr.st_mode or 0):
                raise ValueError(f'{self.label}: {path!r} is not a regular file')
            handle = sftp.open(remote, 'rb')
        return io.BufferedReader(_RemoteReader(self, handle, self._generation), READ_BUFFER_BYTES)  # type: ignore[return-value]

    # Changing

    def _missing_dir(self, path: str) -> SourceMissing:
        directory = split_path(clean_path(path))[0]
        return SourceMissing(self.label, directory) if directory else SourceMissing(self.label)

    def rename(self, src: str, dst: str) -> bool:
        """Atomically rename src to dst; False when src is gone or dst exists; never overwrites."""
        remote_src, remote_dst = self._remote(src), self._remote(dst)
        with self._session('renaming') as sftp:
            try:
                sftp.rename(remote_src, remote_dst)
            except OSError:
                if not self._alive():
                    raise
                if self._lstat(sftp, remote_src) is None:
                    return False  # another claimer took it
                if self._lstat(sftp, remote_dst) is not None:
                    return False  # the target exists
                if self._lstat(sftp, posixpath.dirname(remote_dst)) is None:
                    raise self._missing_dir(dst) from None
                raise
        return True

    def replace(self, src: str, dst: str) -> None:
        """Atomically rename src to dst, replacing dst if it exists (posix-rename@openssh.com)."""
        remote_src, remote_dst = self._remote(src), self._remote(dst)
        with self._session('renaming') as sftp:
            try:
                sftp.posix_rename(remote_src, remote_dst)
            except FileNotFoundError:
                if self._lstat(sftp, remote_src) is not None:
                    raise self._missing_dir(dst) from None
                raise

    def remove(self, path: str) -> None:
        """Remove the file at path; a missing file is fine."""
        remote = self._remote(path)
        with self._session('removing a file') as sftp:
            try:
                sftp.remove(remote)
            except FileNotFoundError:
                pass

    def make_root(self) -> None:
        """Create the root directory and its missing parents: the configured path, links on it followed."""
        with self._session('creating a directory') as sftp:
            current = '/' if self.root.startswith('/') else ''
            for part in [p for p in self.root.split('/') if p]:
                current = posixpath.join(current, part) if current else part
                try:
                    attr = sftp.stat(current)
                except FileNotFoundError:
                    try:
                        sftp.mkdir(current)
                    except OSError:
                        if not self._alive():
                            raise
                        attr = sftp.stat(current)  # made by someone else meanwhile?
                    else:
                        continue
                if not stat_mode.S_ISDIR(attr.st_mode or 0):
                    raise NotADirectoryError(20, 'Not a directory', current)

    def makedirs(self, path: str) -> None:
        """Create the directory path and its missing parents; the root itself must exist; no link followed."""
        rel = clean_path(path, allow_root=True)
        with self._session('creating a directory') as sftp:
            self._walk(sftp, rel, create=True)

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Write chunks to a temporary file beside path, then rename it over path (posix-rename); no link followed."""
        rel = clean_path(path)
        directory, name = split_path(rel)
        with self._session('writing a file') as sftp:
            where = self._walk(sftp, directory, create=False)
            remote = posixpath.join(where, name)
            temp = posixpath.join(where, split_path(temp_name(rel))[1])
            try:
                # 'x' is SSH_FXF_EXCL: O_EXCL on the server, which never follows a link at that name; the
                # rename replaces whatever the final name is (a link there is replaced, not followed).
                f = sftp.open(temp, 'wx')
            except FileNotFoundError:
                raise self._missing_dir(rel) from None
            try:
                with f:
                    f.set_pipelined(True)
                    for chunk in chunks:
                        f.write(chunk)
                sftp.posix_rename(temp, remote)
            except BaseException:
                if self._alive():
                    try:
                        sftp.remove(temp)
                    except Exception:  # noqa: BLE001 - the first error is the one to report
                        pass
                raise

    def _walk(self, sftp: paramiko.SFTPClient, rel: str, *, create: bool) -> str:
        """The remote path of directory rel below the root, each component checked with lstat first.

        A component that is a link is refused (LinkRefused), a missing one made (create) or
        SourceMissing. SFTP has no requests relative to an open directory, so this is a check
        before use: what happens between the check and the write is bounded by the server
        account's permissions. The root itself is taken as configured (an operator's link there
        is followed).
        """
        try:
            root = sftp.stat(self.root)
        except FileNotFoundError:
            raise SourceMissing(self.label) from None
        if not stat_mode.S_ISDIR(root.st_mode or 0):
            raise SourceMissing(self.label)
        current = self.root
        done: list[str] = []
        for part in rel.split('/') if rel else []:
            current = posixpath.join(current, part)
            done.append(part)
            shown = '/'.join(done)
            attr = self._lstat(sftp, current)
            if attr is None:
                if not create:
                    raise SourceMissing(self.label, shown)
                try:
                    sftp.mkdir(current)
                except OSError:
                    if not self._alive():
                        raise
                attr = self._lstat(sftp, current)  # made now, or meanwhile by someone else
                if attr is None:
                    raise SourceMissing(self.label, shown)
            mode = attr.st_mode or 0
            if stat_mode.S_ISLNK(mode):
                raise LinkRefused(self.label, shown)
            if not stat_mode.S_ISDIR(mode):
                raise NotADirectoryError(20, 'Not a directory', shown)
        return current

    def close(self) -> None:
        """Close the connection; the next call opens a new one."""
        with self._lock:
            self._drop()


class _RemoteReader(io.RawIOBase):
    """An open remote file read through its source's connection, one request at a time."""

    def __init__(self, source: SftpSource, handle: paramiko.SFTPFile, generation: int) -> None:
        super().__init__()
        self._source = source
        self._handle = handle
        self._generation = generation

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        source = self._source
        with source._lock:
            if source._generation != self._generation or not source._alive():
                source._drop()
                raise SourceUnavailable(source.label, 'reading a file: the connection broke')
            try:
                data = self._handle.read(len(buffer))
            except (paramiko.SSHException, EOFError, SFTPError, OSError) as e:
                if isinstance(e, OSError) and not isinstance(e, (TimeoutError, ConnectionError)) \
                        and source._alive():
                    raise
                source._drop()
                raise SourceUnavailable(source.label, f'reading a file: {_why(e)}') from None
            except BaseException:
                source._drop()  # killed mid-request: see SftpSource._session
                raise
        n = len(data)
        buffer[:n] = data
        return n

    def close(self) -> None:
        if not self.closed:
            with self._source._lock:
                if self._source._generation == self._generation and self._source._alive():
                    try:
                        self._handle.close()
                    except Exception:  # noqa: BLE001 - the read itself succeeded or already failed
                        pass
        super().close()


def _why(e: BaseException) -> str:
    """A failure in a few words, from paramiko's or the socket's own text (which holds no secrets)."""
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    text = str(e).strip()
    return f'{type(e).__name__}: {text}' if text else type(e).__name__
