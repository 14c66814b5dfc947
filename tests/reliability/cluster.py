"""Three Conduit hosts in network namespaces on one PostgreSQL server, and what their subscribers recorded.

Each host (``cluster_net.Host``) runs a real server with two workers inside its namespace
(``ip netns exec``); the PostgreSQL server of the test's own (``pg_cluster.PgCluster``) listens on
the bridge. Every host has a hot-deploy directory of its own, as separate machines would: a
module dropped on one host reaches the others through the database, which is what the
hot-deploy scenario proves.

The services the hosts run record, in files every host can write (the namespaces share the file
system), which host and process did what and when: ``test.record`` one line per delivered
message (``n host pid start end``), ``test.tick`` one line per scheduled firing
(``fire_time host pid at``). The checks read those files: messages lost or delivered twice, a
subscription delivered by two processes at once (overlapping intervals), a firing run twice.
"""

from __future__ import annotations

import itertools
import os
import textwrap
import threading
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import requests

from tests.live_server import LiveServer
from tests.reliability.cluster_net import ClusterNet
from tests.reliability.harness import Tally
from tests.reliability.pg_cluster import PgCluster

#: The lease TTL of the cluster's servers: a cut host's deliveries move within this plus 2 s.
LEASE_TTL_SECS = 2.0

#: [database] dead_client_secs of the cluster's servers: a cut host's connections fail after this
#: (CONDUIT_TEST_DEAD_CLIENT_SECS=0 shows the cluster without it).
DEAD_CLIENT_SECS = float(os.environ.get('CONDUIT_TEST_DEAD_CLIENT_SECS', '2'))

#: The hosts that run a Conduit server (the net may have more, for other tests).
SERVER_HOSTS = ('a', 'b', 'c')

#: Seconds between two firings of the scheduled job.
TICK_SECS = 1.0

#: [database] settings, as environment variables (LiveServer writes the section itself).
DATABASE_ENV = {'CONDUIT_DATABASE_POOL_SIZE': '4', 'CONDUIT_DATABASE_DEAD_CLIENT_SECS': str(DEAD_CLIENT_SECS)}

CONFIG = f'''
[pubsub]
delivery_batch_size = 20
wait_non_sock_err = 0.05
wait_sock_err = 0.05
lease_ttl_secs = {LEASE_TTL_SECS}
lease_renew_secs = 0.3
poll_interval_secs = 0.05
[scheduler]
poll_interval_secs = 0.1
heartbeat_secs = 0.5
'''

SERVICES = textwrap.dedent('''
    import os
    import time

    from runtime import Service

    HOST = os.environ['CONDUIT_TEST_HOST']


    def append(path, line):
        with open(path, 'a') as f:
            f.write(line + '\\n')


    class Record(Service):
        """Records the number of each message it receives, who delivered it and when."""

        name = 'test.record'

        def handle(self):
            start = time.time()
            time.sleep(0.002)  # a delivery takes a moment: two at once would overlap visibly
            append(os.environ['CONDUIT_TEST_OUT'],
                   f"{self.request.payload['n']} {HOST} {os.getpid()} {start:.6f} {time.time():.6f}")


    class Publish(Service):
        """Publishes one number to test.record and answers with the msg_id."""

        name = 'test.publish'

        def handle(self):
            self.response.payload = {'msg_id': self.publish('test.record', {'n': self.request.payload['n']})}


    class Tick(Service):
        """Records each firing of the scheduled job: its fire time, where it ran and when."""

        name = 'test.tick'

        def handle(self):
            append(os.environ['CONDUIT_TEST_TICKS'],
                   f"{self.request.raw_request['fire_time']} {HOST} {os.getpid()} {time.time():.6f}")
''')


@dataclass(frozen=True)
class Delivery:
    """One message handled by test.record."""

    n: int
    host: str
    pid: int
    start: float
    end: float

    @property
    def who(self) -> tuple[str, int]:
        """The process that delivered it."""
        return self.host, self.pid


@dataclass(frozen=True)
class Firing:
    """One run of the scheduled job."""

    fire_time: str
    host: str
    pid: int
    at: float


def read_deliveries(path: Path) -> list[Delivery]:
    """Every delivery recorded so far, in the order of their start."""
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 5:  # a line being written is skipped until it is whole
            found.append(Delivery(int(parts[0]), parts[1], int(parts[2]), float(parts[3]), float(parts[4])))
    return sorted(found, key=lambda d: d.start)


def read_firings(path: Path) -> list[Firing]:
    """Every firing of the scheduled job recorded so far."""
    if not path.exists():
        return []
    rows = (line.split() for line in path.read_text().splitlines())
    return [Firing(p[0], p[1], int(p[2]), float(p[3])) for p in rows if len(p) == 4]


def overlaps(deliveries: list[Delivery]) -> list[tuple[Delivery, Delivery]]:
    """Pairs of deliveries of the one subscription by two processes at the same time."""
    found = []
    latest: dict[tuple[str, int], Delivery] = {}  # each process's delivery that ends last so far
    for d in deliveries:
        for who, other in latest.items():
            if who != d.who and other.end > d.start:
                found.append((other, d))
        if d.who not in latest or latest[d.who].end < d.end:
            latest[d.who] = d
    return found


class ClusterPublisher:
    """``streams`` publishers of increasing numbers through the hosts in ``targets`` (round robin) until stopped."""

    def __init__(self, targets: list[LiveServer], tally: Tally, streams: int = 4) -> None:
        #: Replaced by the test (never cut hosts): read anew for every publication.
        self.targets = targets
        self._tally = tally
        self._numbers = itertools.count()
        self._halt = threading.Event()
        self._threads = [threading.Thread(target=self._publish, daemon=True) for _ in range(streams)]

    def start(self) -> None:
        """Start publishing."""
        for t in self._threads:
            t.start()

    def _publish(self) -> None:
        session = requests.Session()
        while not self._halt.is_set():
            n = next(self._numbers)
            server = self.targets[n % len(self.targets)]
            self._tally.attempted.add(n)
            try:
                r = session.post(f'{server.url}/admin/services/test.publish/invoke', json={'n': n},
                                 auth=server.admin, timeout=5)
                if r.status_code == 200:
                    self._tally.acknowledged.add(n)
                else:
                    self._tally.errors[r.status_code] += 1
            except requests.RequestException:
                self._tally.refused += 1
                time.sleep(0.05)

    def stop(self) -> None:
        """Stop after the requests in flight."""
        self._halt.set()
        for t in self._threads:
            t.join(30)


class Cluster:
    """The network, the database and one server per host; ``close`` removes everything."""

    def __init__(self, base: Path, net: ClusterNet, pg: PgCluster) -> None:
        self.net = net
        self.pg = pg
        self.out = base / 'deliveries.txt'
        self.ticks = base / 'ticks.txt'
        self.servers: dict[str, LiveServer] = {}
        for name in SERVER_HOSTS:
            host = net.hosts[name]
            server = LiveServer(base / name, pg.url, workers=2, extra_config=CONFIG, host=host.address,
                                command_prefix=host.exec_prefix,
                                env={'CONDUIT_TEST_HOST': name, 'CONDUIT_TEST_OUT': str(self.out),
                                     'CONDUIT_TEST_TICKS': str(self.ticks), **DATABASE_ENV})
            (server.hot_deploy / 'cluster_services.py').write_text(SERVICES)
            self.servers[name] = server

    def deliverer(self) -> str | None:
        """The host that delivered the last message recorded."""
        found = read_deliveries(self.out)
        return found[-1].host if found else None

    def close(self) -> None:
        """Stop every server (killed if it does not stop: a cut host cannot say goodbye)."""
        for server in self.servers.values():
            try:
                server.stop(timeout=10)
            except Exception:
                server.kill()


@dataclass
class CutFigures:
    """What one cut of a delivering host measured."""

    host: str
    takeover_secs: float | None
    taken_by: str | None
    #: Lease renewals the cut host saw fail while cut (its log's warnings).
    failed_renewals: int = 0


def tick_figures(firings: list[Firing]) -> tuple[int, int, int]:
    """(firings, fire times run more than once, fire times missed) between the first and the last firing."""
    counts = Counter(f.fire_time for f in firings)
    duplicates = sum(c - 1 for c in counts.values())
    times = sorted(datetime.fromisoformat(t).timestamp() for t in counts)
    # An interval job's fire times are TICK_SECS apart; a gap of k ticks means k-1 were missed (coalesced).
    missed = sum(max(0, round((b - a) / TICK_SECS) - 1) for a, b in itertools.pairwise(times))
    return len(counts), duplicates, missed
