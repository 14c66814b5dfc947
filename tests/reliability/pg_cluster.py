"""A throwaway PostgreSQL server of the tests' own, so that a test can stop and start a real one.

The machine's PostgreSQL serves the rest of the suite (and other projects); stopping it would break
them. This cluster is made with the same installation's ``initdb`` in a temporary directory, on a
free loopback port, and removed afterwards.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.live_server import free_port


def find_bindir() -> Path | None:
    """The directory holding initdb and pg_ctl, or None when PostgreSQL's server tools are missing."""
    if explicit := os.environ.get('CONDUIT_TEST_PG_BIN'):
        return Path(explicit)
    if initdb := shutil.which('initdb'):
        return Path(initdb).parent
    # Debian keeps the server tools out of PATH, one directory per major version.
    found = [p for p in Path('/usr/lib/postgresql').glob('*/bin/initdb') if p.parts[4].isdigit()]
    return max(found, key=lambda p: int(p.parts[4])).parent if found else None


class PgCluster:
    """initdb, start, stop (in any of pg_ctl's modes) and start again; `url` stays valid throughout."""

    def __init__(self, bindir: Path, host: str = '127.0.0.1', allow: str = '', settings: str = '') -> None:
        self.bindir = bindir
        #: The address it listens on; clients from the network ``allow`` (CIDR) may connect with trust too.
        self.host = host
        self.allow = allow
        #: More server options (``-c name=value ...``).
        self.settings = settings
        self.port = free_port()
        # Not pytest's tmp_path: as root the server runs as `postgres`, which cannot enter root's 0700 tree.
        self.base = Path(tempfile.mkdtemp(prefix='conduit-pg-'))
        self.data = self.base / 'data'
        self.log = self.base / 'server.log'
        self._as = ['runuser', '-u', 'postgres', '--'] if os.geteuid() == 0 else []
        if self._as:
            try:
                shutil.chown(self.base, 'postgres')
            except LookupError:
                shutil.rmtree(self.base)
                raise RuntimeError('initdb refuses to run as root, and there is no user `postgres`') from None

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the cluster's `postgres` database."""
        return f'postgresql://postgres@{self.host}:{self.port}/postgres'

    def _run(self, tool: str, *args: str) -> None:
        cmd = [*self._as, str(self.bindir / tool), *args]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            log = self.log.read_text()[-2000:] if self.log.exists() else ''
            raise RuntimeError(f'{tool} {" ".join(args)} failed ({done.returncode}): {done.stderr.strip()}\n{log}')

    def init(self) -> PgCluster:
        """Create the cluster (trust auth: loopback, and the network ``allow`` when given)."""
        self._run('initdb', '-D', str(self.data), '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync')
        if self.allow:
            with open(self.data / 'pg_hba.conf', 'a') as hba:
                hba.write(f'host all all {self.allow} trust\n')
        return self

    def start(self) -> PgCluster:
        """Start the server and wait until it accepts connections."""
        options = f'-p {self.port} -k {self.base} -c listen_addresses={self.host} {self.settings}'.strip()
        self._run('pg_ctl', '-D', str(self.data), '-o', options, '-l', str(self.log), '-w', 'start')
        return self

    def stop(self, mode: str = 'fast') -> None:
        """Stop the server: 'fast' ends the sessions and shuts down cleanly, 'immediate' is a crash."""
        self._run('pg_ctl', '-D', str(self.data), '-m', mode, '-w', 'stop')

    def remove(self) -> None:
        """Stop the server if it runs and delete the cluster."""
        if (self.data / 'postmaster.pid').exists():
            try:
                self.stop('immediate')
            except RuntimeError:
                pass
        shutil.rmtree(self.base, ignore_errors=True)
