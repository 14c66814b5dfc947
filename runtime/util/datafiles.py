"""Data files and directories the runtime creates: owner-only (0600 / 0700), whatever the umask.

The database, the message archive, overflow logs, the admin password file and Spark job logs
hold messages and secrets. The process umask (often 022) would leave them readable by every
local user, so they are created here with explicit modes and set again with ``chmod`` (a
restrictive umask such as 0277 would otherwise leave the owner unable to write).

Only what this module creates is given those modes: an existing file or directory — the
operator's own database, a shared ``var/`` — keeps the mode it has.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

#: Mode of every data directory the runtime creates.
PRIVATE_DIR_MODE = 0o700

#: Mode of every data file the runtime creates.
PRIVATE_FILE_MODE = 0o600

_APPEND_FLAGS = os.O_WRONLY | os.O_APPEND | getattr(os, 'O_CLOEXEC', 0)


def private_dir(path: Path) -> Path:
    """Make a directory and its missing parents, each new one 0700; existing ones are left as they are."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR_MODE)
        except FileExistsError:
            continue  # made meanwhile by another worker, which set its mode
        os.chmod(directory, PRIVATE_DIR_MODE)
    return path


def create_private_file(path: Path) -> bool:
    """Create an empty file 0600 unless one exists; True when this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, 'O_CLOEXEC', 0), PRIVATE_FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)
    return True


def open_private_append(path: Path) -> BinaryIO:
    """Open a file for appending (binary); a file this call creates is 0600."""
    try:
        fd = os.open(path, _APPEND_FLAGS | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    except FileExistsError:
        fd = os.open(path, _APPEND_FLAGS)
    else:
        try:
            os.fchmod(fd, PRIVATE_FILE_MODE)
        except BaseException:
            os.close(fd)
            raise
    return os.fdopen(fd, 'ab')
