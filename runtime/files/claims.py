"""Claim names: how a server marks a file as its own before processing it.

Servers that poll the same directory must never both process a file. Each claims a file by
renaming it in place, ``a.csv`` -> ``a.csv.conduit-claim.<owner>.<unix time>``; a rename is atomic,
so exactly one of them wins (``Source.rename`` never overwrites). The claimed name says who took the
file and when, which is all another server needs to decide whether the claim is stale:

- it is older than the channel's claim timeout (its owner died or hangs), or
- its owner runs on this very host and its process no longer exists (a restarted worker takes back
  its predecessor's files at once instead of waiting for the timeout).

The owner is ``<host>_<pid>``: the host name with every character outside ``[A-Za-z0-9-]`` replaced
by '-', then the process id. Two machines with the same host name would each see the other's
claims as "on this host"; a live pid of the other machine then keeps the claim until the timeout,
and a pid that does not run here lets it be taken early. Hosts sharing a directory must therefore
have distinct host names (containers: set one each).

Ages compare the claimer's clock with the checker's: servers sharing a directory need clocks in
step to well within the claim timeout (NTP), or a live claim may be taken over early.

Names that Conduit itself makes in a directory — claims, parked files
(``a.csv.conduit-parked.<unix time>``: its move was refused), ``write_atomic``'s temporary files and
``.error.json`` reports — are never taken as new files (``is_internal``).
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

from runtime.files.source_base import TEMP_MARK

#: What separates a file's own name from its claim.
CLAIM_MARK = '.conduit-claim.'

#: What marks a parked file: one whose move (after action or error directory) was refused. It is
#: never taken again, by any server, until an operator renames it back to its name.
PARKED_MARK = '.conduit-parked.'

#: The suffix of the report written next to a file that failed.
ERROR_REPORT_SUFFIX = '.error.json'

#: Longest host part of an owner, so that claimed names stay well under the 255-byte name limit.
MAX_HOST_CHARS = 64

_CLAIM = re.compile(r'^(?P<original>.+)' + re.escape(CLAIM_MARK) + r'(?P<owner>[A-Za-z0-9_-]+)\.(?P<at>[0-9]{1,12})',
                    re.DOTALL)
_NOT_HOST = re.compile(r'[^A-Za-z0-9-]')


@dataclass(frozen=True)
class Claim:
    """A claimed file's original name, who claimed it and when (whole seconds since the epoch)."""

    original: str
    owner: str
    at: int

    @property
    def host(self) -> str:
        """The host part of the owner."""
        return self.owner.rpartition('_')[0]

    @property
    def pid(self) -> int | None:
        """The process id part of the owner, None if it is not a number."""
        pid = self.owner.rpartition('_')[2]
        return int(pid) if pid.isdigit() else None


def this_host() -> str:
    """This machine's host name as it appears in owners."""
    return _owner_host(socket.gethostname())


def _owner_host(host: str) -> str:
    return _NOT_HOST.sub('-', host)[:MAX_HOST_CHARS] or 'host'


def this_owner() -> str:
    """The owner id of this process: ``<host>_<pid>``."""
    return owner_of(socket.gethostname(), os.getpid())


def owner_of(host: str, pid: int) -> str:
    """A worker's owner id in claimed names: ``<host>_<pid>``, the host made safe for a file name."""
    return f'{_owner_host(host)}_{pid}'


def claim_name(name: str, owner: str, now: float) -> str:
    """The name a file is renamed to when owner claims it at now."""
    if not re.fullmatch(r'[A-Za-z0-9_-]+', owner):
        raise ValueError(f'claim owner {owner!r} may hold only letters, digits, "_" and "-"')
    return f'{name}{CLAIM_MARK}{owner}.{int(now)}'


def parse_claim(name: str) -> Claim | None:
    """The claim a name stands for, or None if it is not a claimed name."""
    m = _CLAIM.fullmatch(name)
    if m is None:
        return None
    return Claim(m.group('original'), m.group('owner'), int(m.group('at')))


def is_claim(name: str) -> bool:
    """Whether name is a claimed name."""
    return parse_claim(name) is not None


def _runs(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it runs
        return True
    except (OSError, OverflowError):  # a pid out of range
        return False
    return True


def is_stale(claim: Claim, now: float, timeout_secs: float) -> bool:
    """Whether a claim may be taken over: older than timeout_secs, or its owner's process here is gone."""
    if now - claim.at > timeout_secs:
        return True
    pid = claim.pid
    return claim.host == this_host() and pid is not None and pid > 0 and not _runs(pid)


def is_internal(name: str) -> bool:
    """Whether a name (or path) is one Conduit made: a claim, a parked file, a temporary file or an error report."""
    name = name.rpartition('/')[2]
    return TEMP_MARK in name or PARKED_MARK in name or name.endswith(ERROR_REPORT_SUFFIX) or is_claim(name)
