"""Hosts made of Linux network namespaces: a bridge, one veth link per host, and links to cut.

Each host is a network namespace with its own address on a private /24; the veth pair that links
it to the bridge is its cable. The bridge itself carries the first address of the subnet, where
the test's own PostgreSQL server listens, and through which the test reaches every host. Cutting a
host sets the bridge end of its cable down: its packets vanish without an error, as when a cable
is pulled at the switch, so that its open connections hang rather than fail.

Names are unique per run (a random tag: interface names are at most 15 characters) and
everything is removed by ``remove``, which the tests call in a ``finally``. A run killed outright
cannot: each net leaves a marker naming its process in ``MARKERS``, and the next net made removes
what belonged to processes that are gone. Needs root and iproute2 (Debian's package, installed
with apt-get when missing).
"""

from __future__ import annotations

import ipaddress
import os
import random
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests import apt

#: One file per net in use, named by its tag, holding the pid of the process that made it.
MARKERS = Path('/run/conduit-test-net')


class NetUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, no iproute2, or a sandbox refuses)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(['ip', *args], capture_output=True, text=True, timeout=30)
    if check and done.returncode != 0:
        raise RuntimeError(f'ip {" ".join(args)} failed ({done.returncode}): {done.stderr.strip()}')
    return done


def ensure_iproute2() -> None:
    """Install Debian's iproute2 if `ip` is missing (the tests run as root)."""
    failed = apt.install(['iproute2'], lambda: shutil.which('ip') is not None)
    if failed:
        raise NetUnavailable(f'`ip` (iproute2) is missing and could not be installed: {failed}')


def check_netns() -> None:
    """Raise NetUnavailable naming the reason when network namespaces cannot be made here."""
    if os.geteuid() != 0:
        raise NetUnavailable('network namespaces need root')
    ensure_iproute2()
    probe = f'cnprobe{secrets.token_hex(3)}'
    done = _ip('netns', 'add', probe, check=False)
    if done.returncode != 0:
        raise NetUnavailable(f'`ip netns add` is refused here: {done.stderr.strip()}')
    _ip('netns', 'del', probe, check=False)


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.x.y.0/24 that no interface or route of this machine uses."""
    used = _ip('-4', 'addr').stdout + _ip('-4', 'route').stdout
    rng = random.Random()
    for _ in range(100):
        net = ipaddress.IPv4Network(f'10.{rng.randint(100, 250)}.{rng.randint(0, 255)}.0/24')
        if f'10.{net.network_address.packed[1]}.{net.network_address.packed[2]}.' not in used:
            return net
    raise NetUnavailable('no free 10.x.y.0/24 subnet found')


def _remove_tagged(tag: str) -> None:
    """Delete every namespace and interface whose name starts with tag (never raises)."""
    for line in _ip('netns', 'list', check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ''
        if name.startswith(f'{tag}-'):
            _ip('netns', 'del', name, check=False)  # takes the inner ends of the cables with it
    for line in _ip('-o', 'link', check=False).stdout.splitlines():
        name = line.split(':')[1].strip().split('@')[0] if line.count(':') >= 2 else ''
        if name.startswith(tag):
            _ip('link', 'del', name, check=False)


def remove_stale() -> list[str]:
    """Remove the nets of test processes that ended without removing them; returns their tags."""
    removed = []
    for marker in MARKERS.glob('cn*') if MARKERS.is_dir() else ():
        try:
            os.kill(int(marker.read_text()), 0)
            continue  # its process still runs
        except (ProcessLookupError, ValueError):
            pass
        except PermissionError:
            continue
        _remove_tagged(marker.name)
        marker.unlink(missing_ok=True)
        removed.append(marker.name)
    return removed


@dataclass
class Host:
    """One host: its namespace, its address, and the bridge end of its cable."""

    name: str
    netns: str
    address: str
    cable: str

    @property
    def exec_prefix(self) -> list[str]:
        """Put before a command line to run it on this host."""
        return ['ip', 'netns', 'exec', self.netns]


class ClusterNet:
    """A bridge and ``names`` hosts linked to it; ``cut``/``restore`` a host's cable; ``remove`` all."""

    def __init__(self, names: tuple[str, ...] = ('a', 'b', 'c')) -> None:
        self.tag = f'cn{secrets.token_hex(3)}'
        self.subnet = _free_subnet()
        addresses = list(self.subnet.hosts())
        self.bridge = f'{self.tag}br'
        self.gateway = str(addresses[0])
        self.hosts = {n: Host(n, f'{self.tag}-{n}', str(addresses[10 + i]), f'{self.tag}{n}')
                      for i, n in enumerate(names)}
        self._made = False

    def create(self) -> ClusterNet:
        """Make the bridge, the namespaces and their cables; removes what it made if a step fails."""
        remove_stale()
        MARKERS.mkdir(parents=True, exist_ok=True)
        (MARKERS / self.tag).write_text(str(os.getpid()))
        self._made = True
        try:
            _ip('link', 'add', self.bridge, 'type', 'bridge')
            _ip('addr', 'add', f'{self.gateway}/{self.subnet.prefixlen}', 'dev', self.bridge)
            _ip('link', 'set', self.bridge, 'up')
            for h in self.hosts.values():
                inner = f'{h.cable}i'
                _ip('netns', 'add', h.netns)
                _ip('link', 'add', h.cable, 'type', 'veth', 'peer', 'name', inner)
                _ip('link', 'set', inner, 'netns', h.netns)
                _ip('link', 'set', h.cable, 'master', self.bridge)
                _ip('link', 'set', h.cable, 'up')
                _ip('-n', h.netns, 'addr', 'add', f'{h.address}/{self.subnet.prefixlen}', 'dev', inner)
                _ip('-n', h.netns, 'link', 'set', inner, 'up')
                _ip('-n', h.netns, 'link', 'set', 'lo', 'up')
        except BaseException:
            self.remove()
            raise
        return self

    def cut(self, name: str) -> None:
        """Pull a host's cable: its packets (both ways) are dropped without an error."""
        _ip('link', 'set', self.hosts[name].cable, 'down')

    def restore(self, name: str) -> None:
        """Plug the host's cable back in."""
        _ip('link', 'set', self.hosts[name].cable, 'up')

    def remove(self) -> None:
        """Delete every namespace, cable and the bridge this net made (never raises)."""
        if not self._made:
            return
        _remove_tagged(self.tag)
        (MARKERS / self.tag).unlink(missing_ok=True)
        self._made = False

    def leftovers(self) -> list[str]:
        """Interfaces and namespaces of this net still present (for the test of the cleanup)."""
        found = [line for line in _ip('-o', 'link').stdout.splitlines() if self.tag in line]
        found += [line for line in _ip('netns', 'list').stdout.splitlines() if self.tag in line]
        return found
