"""A real OpenSSH server on loopback for the SFTP tests: ``SshServer`` and the fixtures ``sshd``, ``sshd_module``.

The server is Debian's ``/usr/sbin/sshd`` (package ``openssh-server``, installed with apt-get when
missing), run in the foreground as the test's own user from a temporary directory that holds
everything it needs: its config, a fresh ed25519 host key, ``authorized_keys`` with a fresh ed25519
client key, its pid file and log, and ``sftp/``, the directory tests read and write (``root``).
It listens on 127.0.0.1 only, on a free port kept across ``restart()`` together with the host key,
so that a client that pinned the key before the restart must reconnect to the same server.

Sessions may run nothing but SFTP (``ForceCommand internal-sftp``), starting in ``root``; no
forwarding, no TTY. Logins are by key only: OpenSSH's password authentication goes through PAM
or the system's shadow passwords, i.e. a real account password, which a test must not set on the
machine. Password handling on the client side is therefore tested on its parameters only
(``tests/files/test_sftp.py``).

What a test uses:

- ``host``, ``port``, ``username`` (the current user), ``root`` (a ``Path``);
- ``host_key_line``: the server's public key, ``ssh-ed25519 AAAA...``, for pinning;
  ``known_hosts(path)`` writes a known_hosts file that names it;
- ``client_key_text``: the client's private key (OpenSSH format), the value of a
  ``${CONDUIT_SECRET_...}`` variable; ``secret_env`` maps that variable's name to it (pass it to
  a server process) and ``params()`` gives ready ``SftpParams`` with the variable set in
  ``os.environ`` of this process;
- ``start()``, ``stop()`` (every session ends with it), ``restart()``, ``close()``.

When sshd is missing and cannot be installed (not root, or apt fails) the fixtures fail under CI
(the CI variable set) and skip elsewhere, naming the reason.
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests import apt

if TYPE_CHECKING:
    from runtime.files.sftp import SftpParams

SSHD = '/usr/sbin/sshd'
SSH_KEYGEN = '/usr/bin/ssh-keygen'

#: How long sshd may take to answer its first connection.
START_TIMEOUT_SECS = 15.0

#: How long apt-get may take to install openssh-server.
INSTALL_TIMEOUT_SECS = 300


def _skip_or_fail(reason: str) -> None:
    if os.environ.get('CI'):
        pytest.fail(f'the SFTP tests need OpenSSH\'s sshd in CI: {reason}')
    pytest.skip(f'no OpenSSH sshd: {reason}')


def ensure_sshd() -> None:
    """Install openssh-server when sshd is missing; fail (CI) or skip the test when that cannot be done."""
    failed = apt.install(['openssh-server'], lambda: os.path.exists(SSHD) and os.path.exists(SSH_KEYGEN),
                         recommends=False)
    if failed:
        _skip_or_fail(failed)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _keygen(path: Path, comment: str) -> None:
    subprocess.run([SSH_KEYGEN, '-q', '-t', 'ed25519', '-N', '', '-C', comment, '-f', str(path)], check=True,
                   capture_output=True, stdin=subprocess.DEVNULL)


def make_key(path: Path) -> str:
    """Generate an ed25519 key pair at path (and path.pub); its public key line 'ssh-ed25519 AAAA...'."""
    _keygen(path, 'conduit-test')
    return ' '.join(path.with_name(path.name + '.pub').read_text().split()[:2])


def _children(pid: int) -> list[int]:
    """The processes whose parent is pid (sshd's per-connection processes), read from /proc."""
    found = []
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open(f'/proc/{entry}/stat', 'rb') as f:
                stat = f.read()
        except OSError:
            continue
        # The command name in parentheses may hold spaces: the fields after its closing ')' are fixed.
        fields = stat[stat.rfind(b')') + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry))
    return found


class SshServer:
    """An OpenSSH server serving SFTP on 127.0.0.1 from a temporary directory (see the module docstring)."""

    def __init__(self, base: Path | None = None) -> None:
        ensure_sshd()
        self.dir = Path(tempfile.mkdtemp(prefix='conduit-sshd-', dir=base))
        self.root = self.dir / 'sftp'
        self.root.mkdir()
        self.host = '127.0.0.1'
        self.port = _free_port()
        self.username = pwd.getpwuid(os.getuid()).pw_name
        self.host_key_line = make_key(self.dir / 'ssh_host_ed25519_key')
        client_key = self.dir / 'client_key'
        (self.dir / 'authorized_keys').write_text(make_key(client_key) + '\n')
        self.client_key_text = client_key.read_text()
        #: The variable that holds client_key_text; unique, so that servers of one process do not mix.
        self.key_variable = f'CONDUIT_SECRET_TEST_SFTP_KEY_{uuid.uuid4().hex[:8].upper()}'
        self.log_path = self.dir / 'sshd.log'
        self._write_config()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Any = None

    def _write_config(self) -> None:
        lines = [
            f'Port {self.port}',
            f'ListenAddress {self.host}',
            f'HostKey {self.dir / "ssh_host_ed25519_key"}',
            f'PidFile {self.dir / "sshd.pid"}',
            f'AuthorizedKeysFile {self.dir / "authorized_keys"}',
            'PermitRootLogin prohibit-password',
            'PubkeyAuthentication yes',
            'PasswordAuthentication no',
            'KbdInteractiveAuthentication no',
            'UsePAM no',
            'StrictModes no',
            'AllowTcpForwarding no',
            'AllowAgentForwarding no',
            'X11Forwarding no',
            'PermitTTY no',
            'LoginGraceTime 30',
            'MaxStartups 50',
            'MaxSessions 50',
            'Subsystem sftp internal-sftp',
            f'ForceCommand internal-sftp -d {self.root}',
        ]
        (self.dir / 'sshd_config').write_text('\n'.join(lines) + '\n')

    # What a test hands a client

    @property
    def secret_env(self) -> dict[str, str]:
        """The environment variable holding the client key, for a server process's environment."""
        return {self.key_variable: self.client_key_text}

    @property
    def key_reference(self) -> str:
        """The ``${CONDUIT_SECRET_...}`` reference to the client key."""
        return '${' + self.key_variable + '}'

    def params(self, **overrides: Any) -> SftpParams:
        """SftpParams for this server (key auth, pinned host key); sets the key's variable in os.environ."""
        from runtime.files.sftp import SftpParams

        os.environ.update(self.secret_env)
        values: dict[str, Any] = dict(host=self.host, port=self.port, username=self.username,
                                      private_key_ref=self.key_reference, host_key=self.host_key_line,
                                      timeout_secs=5.0)
        values.update(overrides)
        return SftpParams(**values)

    def known_hosts(self, path: Path) -> Path:
        """Write a known_hosts file naming this server and its host key; path."""
        path.write_text(f'[{self.host}]:{self.port} {self.host_key_line}\n')
        return path

    # Life cycle

    @property
    def running(self) -> bool:
        """Whether the listening sshd process runs."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> SshServer:
        """Start sshd and wait until it answers with its banner."""
        if self.running:
            return self
        if os.geteuid() == 0:
            os.makedirs('/run/sshd', mode=0o755, exist_ok=True)  # sshd's privilege separation directory
        self._log = open(self.log_path, 'ab')
        self._proc = subprocess.Popen([SSHD, '-D', '-e', '-f', str(self.dir / 'sshd_config')], stdin=subprocess.DEVNULL,
                                      stdout=self._log, stderr=self._log)
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(f'sshd exited with {self._proc.returncode}: {self.log_tail()}')
            try:
                with socket.create_connection((self.host, self.port), timeout=1) as s:
                    if s.recv(64).startswith(b'SSH-'):
                        return self
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f'sshd did not answer on port {self.port} within {START_TIMEOUT_SECS:g} s: '
                                   f'{self.log_tail()}')
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop sshd and end every session it serves (clients see their connections break)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            sessions = self._sessions(proc.pid)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pid in sessions:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def _sessions(self, pid: int) -> list[int]:
        # Each connection has its own process (and a child of it after authentication).
        found, pending = [], [pid]
        while pending:
            for child in _children(pending.pop()):
                found.append(child)
                pending.append(child)
        return found

    def restart(self) -> SshServer:
        """Stop and start again on the same port, with the same host key and keys."""
        self.stop()
        return self.start()

    def close(self) -> None:
        """Stop, forget the key variable and remove the directory."""
        self.stop()
        os.environ.pop(self.key_variable, None)
        shutil.rmtree(self.dir, ignore_errors=True)

    def log_tail(self, lines: int = 20) -> str:
        """The end of sshd's log, for failure messages."""
        try:
            return '\n'.join(self.log_path.read_text(errors='replace').splitlines()[-lines:])
        except OSError:
            return '(no log)'

    def __enter__(self) -> SshServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@pytest.fixture
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A started SSH server for one test."""
    with SshServer(tmp_path_factory.mktemp('sshd')) as server:
        yield server


@pytest.fixture(scope='module')
def sshd_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A started SSH server shared by a test module (tests must not stop it, or must start it again)."""
    with SshServer(tmp_path_factory.mktemp('sshd')) as server:
        yield server
