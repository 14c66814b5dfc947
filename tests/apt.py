"""Installing a Debian package that tests need, once, however many test processes ask at the same time.

``make test`` runs several pytest processes. Two that find the same package missing must not run
apt-get at once: the second failed on dpkg's lock ("Could not get lock /var/lib/dpkg/lock-frontend"),
and with it every browser test of its file. ``install`` takes a lock of the suite's own first (an
flock on a file in the temporary directory), looks again whether the package is there (the process
that held the lock may have just installed it), and has apt-get wait for dpkg's lock should anything
else hold it. Only Debian's packages, through apt-get: nothing is downloaded from anywhere else.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

#: The suite's own lock around apt-get.
LOCK_FILE = Path(tempfile.gettempdir()) / 'conduit-tests-apt.lock'

#: How long one apt-get step, and the wait for the lock, may take.
STEP_TIMEOUT_SECS = 900


def install(packages: Sequence[str], present: Callable[[], bool], *, recommends: bool = True) -> str | None:
    """Install packages unless present() says they are there; None when they are, else why not."""
    if present():
        return None
    apt = shutil.which('apt-get')
    if apt is None:
        return f'apt-get is missing (install {" ".join(packages)})'
    if os.geteuid() != 0:
        return f'only root may install {" ".join(packages)}'
    with LOCK_FILE.open('a') as lock:
        deadline = time.monotonic() + STEP_TIMEOUT_SECS
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    return f'another test process held {LOCK_FILE} for {STEP_TIMEOUT_SECS} s'
                time.sleep(0.5)
        try:
            return _install(apt, packages, present, recommends)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _install(apt: str, packages: Sequence[str], present: Callable[[], bool], recommends: bool) -> str | None:
    if present():  # installed by the process that held the lock
        return None
    env = {**os.environ, 'DEBIAN_FRONTEND': 'noninteractive'}
    wait = ['-o', f'DPkg::Lock::Timeout={STEP_TIMEOUT_SECS}']
    add = [apt, *wait, 'install', '-y', '-qq', *([] if recommends else ['--no-install-recommends']), *packages]
    reason = ''
    # The package lists may be empty or stale on a fresh machine: update them if the first try fails.
    for steps in ([add], [[apt, *wait, 'update', '-qq'], add]):
        for args in steps:
            try:
                done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=STEP_TIMEOUT_SECS,
                                      stdin=subprocess.DEVNULL, check=False)
            except (OSError, subprocess.TimeoutExpired) as e:
                return f'{" ".join(args)} could not run: {e}'
            if done.returncode != 0:
                reason = f'{" ".join(args)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}'
                break
        else:
            if present():
                return None
            reason = f'apt-get install {" ".join(packages)} succeeded, but what the tests need is still missing'
    return reason
