"""The fault harness: publish under load while something breaks, then check the invariants.

Invariants: every acknowledged publication is delivered at least once; nothing is
delivered that was not published; duplicates stay bounded by the in-flight batches. Publications
go through the admin API (``test.publish``), so an acknowledgement is an HTTP 200 that carries
the msg_id; the handler (``test.record``) appends each number it sees to a file.
"""

from __future__ import annotations

import random
import textwrap
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import requests

from tests.live_server import LiveServer

#: Server settings that keep waits short and crash recovery quick.
FAST_PUBSUB = '''
[pubsub]
delivery_batch_size = 20
wait_non_sock_err = 0.05
wait_sock_err = 0.05
lease_ttl_secs = 2.0
lease_renew_secs = 0.3
poll_interval_secs = 0.05
'''

SERVICES = textwrap.dedent('''
    import os
    from runtime import Service

    OUT = os.environ['CONDUIT_TEST_OUT']


    class Record(Service):
        """Appends the number of each message it receives."""

        name = 'test.record'

        def handle(self):
            with open(OUT, 'a') as f:
                f.write(f"{self.request.payload['n']}\\n")


    class Publish(Service):
        """Publishes one number to test.record and answers with the msg_id."""

        name = 'test.publish'

        def handle(self):
            self.response.payload = {'msg_id': self.publish('test.record', {'n': self.request.payload['n']})}
''')


@dataclass
class Tally:
    """What the publisher saw and what the subscriber got."""

    attempted: set[int] = field(default_factory=set)
    acknowledged: set[int] = field(default_factory=set)
    refused: int = 0
    errors: Counter[int] = field(default_factory=Counter)
    delivered: Counter[int] = field(default_factory=Counter)

    @property
    def lost(self) -> set[int]:
        """Acknowledged but never delivered."""
        return self.acknowledged - set(self.delivered)

    @property
    def phantom(self) -> set[int]:
        """Delivered but never even attempted."""
        return set(self.delivered) - self.attempted

    @property
    def duplicates(self) -> int:
        """Deliveries beyond the first of each message."""
        return sum(c - 1 for c in self.delivered.values())

    def summary(self) -> str:
        """One line of counts, printed by every run."""
        return (f'published={len(self.attempted)} acknowledged={len(self.acknowledged)} '
                f'delivered={len(self.delivered)} duplicates={self.duplicates} lost={len(self.lost)} '
                f'phantom={len(self.phantom)} errors={dict(self.errors)}')


def prepare(server: LiveServer) -> None:
    """Deploy the harness services into a server that is not started yet."""
    (server.hot_deploy / 'harness.py').write_text(SERVICES)


class Publisher(threading.Thread):
    """Publishes increasing numbers until stopped, recording what was acknowledged."""

    def __init__(self, server: LiveServer, tally: Tally, service: str = 'test.publish', pause: float = 0.0,
                 first: int = 0) -> None:
        super().__init__(daemon=True)
        self._server = server
        self._tally = tally
        #: The service that publishes each number (its subscriber records it).
        self._service = service
        #: Seconds between two publications (0: as fast as the server answers).
        self._pause = pause
        #: The first number: publishers sharing a tally count from far apart.
        self._first = first
        self._halt = threading.Event()
        self._session = requests.Session()

    def run(self) -> None:
        n = self._first
        while not self._halt.is_set():
            self._tally.attempted.add(n)
            try:
                r = self._session.post(f'{self._server.url}/admin/services/{self._service}/invoke', json={'n': n},
                                       auth=self._server.admin, timeout=5)
                if r.status_code == 200:
                    self._tally.acknowledged.add(n)
                else:
                    self._tally.errors[r.status_code] += 1
            except requests.RequestException:
                self._tally.refused += 1
                time.sleep(0.05)
            n += 1
            if self._pause:
                time.sleep(self._pause)

    def stop(self) -> None:
        """Stop after the request in flight."""
        self._halt.set()
        self.join(30)


def read_delivered(out: Path, tally: Tally) -> None:
    """Load the subscriber's file into the tally."""
    tally.delivered = Counter(int(x) for x in out.read_text().split()) if out.exists() else Counter()


def wait_all_delivered(out: Path, tally: Tally, timeout: float = 120.0) -> None:
    """Wait until every acknowledged number was delivered (or the timeout)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        read_delivered(out, tally)
        if not tally.lost:
            return
        time.sleep(0.2)


def kill_loop(server: LiveServer, kills: int, tally: Tally, seed: int = 1, acks_between: int = 25,
              timeout: float = 60.0) -> int:
    """SIGKILL the server at random points under load and restart it; returns the kills done.

    Each kill waits until the publishers got `acks_between` more acknowledgements since the last
    start, and after the last start too: the load a run proves does not depend on the machine's speed.
    """
    rng = random.Random(seed)
    for _ in range(kills):
        _wait_acknowledged(tally, acks_between, timeout)
        time.sleep(rng.uniform(0.0, 1.0))
        server.kill()
        time.sleep(rng.uniform(0.0, 0.5))
        server.start()
    _wait_acknowledged(tally, acks_between, timeout)
    return kills


def _wait_acknowledged(tally: Tally, more: int, timeout: float) -> None:
    """Wait until `more` publications beyond those acknowledged now are acknowledged (or the timeout)."""
    goal = len(tally.acknowledged) + more
    deadline = time.monotonic() + timeout
    while len(tally.acknowledged) < goal and time.monotonic() < deadline:
        time.sleep(0.05)
