"""One server per configuration: ``conduit start`` claims its pidfile's lock before anything else.

The master takes an exclusive ``flock`` on ``<pidfile>.lock`` and keeps it for its whole life (the
kernel drops it when the master is gone, even after ``kill -9``; workers close their inherited copy,
``release_in_worker``), then checks that its bind address is free, waiting a few seconds as gunicorn
does for the workers of a server killed a moment ago to let go of it. Only then may it migrate
the database or apply object files: a second ``conduit start`` of a running configuration exits
with "already running" having touched nothing.
"""

from __future__ import annotations

import errno
import fcntl
import socket
import time
from pathlib import Path
from typing import IO

from runtime.errors import ConduitError

#: The lock file of this process, held open until the process ends.
_held: IO[str] | None = None

#: How often, one second apart, the bind address is tried before it is reported in use.
BIND_ATTEMPTS = 5


class AlreadyRunning(ConduitError):
    """Another server of this configuration runs (or another process listens on its address)."""


def _pid_in(path: Path) -> str:
    try:
        return path.read_text(encoding='utf-8').strip() or '?'
    except OSError:
        return '?'


def claim(pidfile: Path, bind: str) -> None:
    """Take this configuration's lock and check its address is free; AlreadyRunning otherwise."""
    global _held
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    lock_path = pidfile.with_name(pidfile.name + '.lock')
    handle = open(lock_path, 'a+', encoding='utf-8')  # noqa: SIM115 - held until the process ends
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        handle.close()
        if e.errno in (errno.EAGAIN, errno.EACCES):
            raise AlreadyRunning(f'already running: another server holds {lock_path} '
                                 f'(pid {_pid_in(pidfile)}); nothing was changed') from None
        raise
    try:
        _check_address(bind)
    except AlreadyRunning:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
        handle.close()
        raise
    _held = handle


def release_in_worker() -> None:
    """Close a forked worker's copy of the lock, so that only the master holds it."""
    global _held
    if _held is not None:
        _held.close()  # the master's own descriptor keeps the lock
        _held = None


def _check_address(bind: str) -> None:
    host, _, port = bind.rpartition(':')
    host = host.strip('[]') or '0.0.0.0'
    try:
        infos = socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
    except (OSError, ValueError):
        return  # gunicorn reports a bad address in its own words
    family, kind, proto, _, address = infos[0]
    for attempt in range(BIND_ATTEMPTS):
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(address)
                return
            except OSError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        if attempt < BIND_ATTEMPTS - 1:
            time.sleep(1.0)
    raise AlreadyRunning(f'already running? {bind} is in use by another process; nothing was changed')
