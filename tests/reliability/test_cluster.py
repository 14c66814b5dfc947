"""A cluster of three real hosts (network namespaces) on one PostgreSQL server, one of them cut off.

The host delivering a service subscription loses its link under publish load: another host takes
the delivery over within the lease TTL + 2 s, nothing acknowledged is lost, duplicates are
counted; the cut host comes back and never delivers at the same time as the new owner; a
scheduled job fires once per tick across the hosts through it all; and a module hot-deployed on
one host runs on the others. One cut here; CONDUIT_CHAOS_CLUSTER_CUTS more (`make chaos`: 6).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.live_server import REPO, LiveServer, poll
from tests.reliability.cluster import (
    DEAD_CLIENT_SECS,
    LEASE_TTL_SECS,
    SERVER_HOSTS,
    TICK_SECS,
    Cluster,
    ClusterPublisher,
    CutFigures,
    Delivery,
    overlaps,
    read_deliveries,
    read_firings,
    tick_figures,
)
from tests.reliability.cluster_net import MARKERS, ClusterNet, NetUnavailable, check_netns, remove_stale
from tests.reliability.harness import Tally
from tests.reliability.pg_cluster import PgCluster, find_bindir

#: Cuts of the delivering host per run: 1 in the suite, more with CONDUIT_CHAOS_CLUSTER_CUTS (make chaos: 6).
CUTS = int(os.environ.get('CONDUIT_CHAOS_CLUSTER_CUTS', '1'))

#: How long a cut host stays cut once another host took its delivery over.
HOLD_SECS = 3.0

#: The warning of a worker whose lease renewal failed (the cut host noticed).
RENEWAL_FAILED = 'lease refresh failed'

#: How long the load goes on once a cut host is back, before the next cut.
BACK_SECS = 3.0


def _unavailable(reason: str) -> None:
    if os.environ.get('CI'):
        pytest.fail(f'the cluster test needs {reason} in CI')
    pytest.skip(f'cluster test skipped: {reason}')


@pytest.fixture(scope='module')
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Three hosts with two workers each, host B started first so that it delivers test.record; and host x."""
    try:
        check_netns()
    except NetUnavailable as e:
        _unavailable(f'network namespaces ({e})')
    bindir = find_bindir()
    if bindir is None:
        _unavailable('PostgreSQL server tools (initdb, pg_ctl); set CONDUIT_TEST_PG_BIN')
    assert bindir is not None
    net = ClusterNet((*SERVER_HOSTS, 'x'))  # x: no server, for the dead-link test
    pg: PgCluster | None = None
    built: Cluster | None = None
    try:
        net.create()
        pg = PgCluster(bindir, host=net.gateway, allow=str(net.subnet), settings='-c max_connections=300')
        pg.init().start()
        built = Cluster(tmp_path_factory.mktemp('cluster'), net, pg)
        b = built.servers['b'].start(60)
        # The first publication makes the service subscription; B is alone to take its lease.
        b.invoke('test.publish', {'n': -1})
        poll(lambda: built.deliverer() == 'b', 30, message='host B delivering test.record')
        built.servers['a'].start(60)
        built.servers['c'].start(60)
        yield built
    finally:
        if built is not None:
            built.close()
        if pg is not None:
            pg.remove()
        net.remove()
        assert not net.leftovers(), f'network namespaces or links left behind: {net.leftovers()}'


WHERE = textwrap.dedent('''
    import os

    from runtime import Service


    class Where(Service):
        """Says which host and process ran it, and which version of this module."""

        name = 'cluster.where'

        def handle(self):
            self.response.payload = {'host': os.environ['CONDUIT_TEST_HOST'], 'pid': os.getpid(), 'version': 'VERSION'}
''')


def test_a_net_left_by_a_killed_run_is_removed_by_the_next():
    try:
        check_netns()
    except NetUnavailable as e:
        _unavailable(f'network namespaces ({e})')
    made = subprocess.run([sys.executable, '-c', textwrap.dedent('''
        import os, signal
        from tests.reliability.cluster_net import ClusterNet
        net = ClusterNet(('a',)).create()
        print(net.tag, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    ''')], capture_output=True, text=True, cwd=REPO, env={**os.environ, 'PYTHONPATH': str(REPO)}, timeout=60)
    tag = made.stdout.strip()
    assert tag.startswith('cn'), made.stderr
    assert (MARKERS / tag).exists()
    assert tag in remove_stale()
    assert not (MARKERS / tag).exists()
    assert tag not in subprocess.run(['ip', '-o', 'link'], capture_output=True, text=True).stdout
    assert tag not in subprocess.run(['ip', 'netns', 'list'], capture_output=True, text=True).stdout


def test_overlaps_are_two_processes_delivering_at_the_same_time():
    one = [Delivery(1, 'b', 10, 0.0, 1.0), Delivery(2, 'b', 10, 1.0, 2.0)]
    assert overlaps(one) == []  # one process, one message after the other
    handover = [*one, Delivery(3, 'a', 20, 2.5, 3.0), Delivery(4, 'b', 10, 3.5, 4.0)]
    assert overlaps(handover) == []  # back and forth, never at once
    late = Delivery(5, 'b', 10, 2.2, 2.8)  # B still delivering after A began
    assert overlaps(sorted([*handover, late], key=lambda d: d.start)) == [(late, handover[2])]


def _where(server: LiveServer, version: str) -> dict[str, Any] | None:
    try:
        r = server.request('POST', '/admin/services/cluster.where/invoke', json={}, auth=server.admin, timeout=5)
    except requests.RequestException:
        return None
    answer = r.json().get('response') if r.status_code == 200 else None
    return answer if answer and answer.get('version') == version else None


@pytest.mark.slow
def test_module_hot_deployed_on_one_host_runs_on_the_others(cluster, capsys):
    version = secrets.token_hex(4)
    started = time.monotonic()
    cluster.servers['a'].write_module('where.py', WHERE.replace('VERSION', version))
    reached = {}
    for name, server in cluster.servers.items():
        answer = poll(lambda s=server: _where(s, version), 60, message=f'where.py {version} on host {name}')
        reached[name] = round(time.monotonic() - started, 2)
        assert answer['host'] == name
        # Every worker of the host has it, not only the one that answered first.
        pids = {poll(lambda s=server: _where(s, version), 10, message='every worker')['pid'] for _ in range(20)}
        assert len(pids) == 2, f'host {name}: 20 calls reached {len(pids)} worker(s)'
    with capsys.disabled():
        print(f'\ncluster hot deploy: the module dropped on host a ran on each host after {reached} s')


def _healthy(server: LiveServer) -> bool:
    """Whether the server answers /health; a host just reconnected may time out once or twice first."""
    try:
        return server.request('GET', '/health', timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _wait_delivered(cluster: Cluster, tally: Tally, timeout: float) -> None:
    def done() -> bool:
        tally.delivered = Counter(d.n for d in read_deliveries(cluster.out) if d.n >= 0)
        return not tally.lost
    try:
        poll(done, timeout, interval=0.2, message='every acknowledged publication delivered')
    except AssertionError:
        pass  # reported by the assertions, with the figures


def _cut_once(cluster: Cluster, publisher: ClusterPublisher) -> CutFigures:
    """Cut the delivering host under load until another took over, for HOLD_SECS more, then bring it back."""
    victim = cluster.deliverer()
    assert victim is not None
    publisher.targets = [s for n, s in cluster.servers.items() if n != victim]
    back = cluster.servers[victim]
    failures_before = back.log().count(RENEWAL_FAILED)
    cut_at = time.time()
    cluster.net.cut(victim)
    try:
        def taken_over() -> Delivery | None:
            return next((d for d in read_deliveries(cluster.out) if d.start > cut_at and d.host != victim), None)
        try:
            first = poll(taken_over, 60, interval=0.05, message='another host delivering')
            figures = CutFigures(victim, first.start - cut_at, first.host)
        except AssertionError:
            figures = CutFigures(victim, None, None)
        time.sleep(HOLD_SECS)
    finally:
        cluster.net.restore(victim)
    figures.failed_renewals = back.log().count(RENEWAL_FAILED) - failures_before
    poll(lambda: _healthy(back), 60, message=f'host {victim} healthy again')
    time.sleep(BACK_SECS)
    return figures


@pytest.mark.slow
def test_cut_delivering_host_moves_delivery_without_loss_or_overlap(cluster, capsys):
    a = cluster.servers['a']
    r = a.request('POST', '/admin/jobs', json={'name': 'cluster.tick', 'service': 'test.tick',
                                                'job_type': 'interval_based', 'seconds': TICK_SECS},
                  auth=a.admin)
    assert r.status_code == 201, r.text
    tally = Tally()
    publisher = ClusterPublisher([s for n, s in cluster.servers.items() if n != cluster.deliverer()], tally)
    cuts: list[CutFigures] = []
    try:
        publisher.start()
        time.sleep(2)
        for _ in range(CUTS):
            cuts.append(_cut_once(cluster, publisher))
    finally:
        publisher.stop()
        a.request('DELETE', '/admin/jobs/cluster.tick', auth=a.admin)
    _wait_delivered(cluster, tally, 90)
    deliveries = [d for d in read_deliveries(cluster.out) if d.n >= 0]
    tally.delivered = Counter(d.n for d in deliveries)
    overlapping = overlaps(deliveries)
    fired, fired_twice, missed = tick_figures(read_firings(cluster.ticks))
    takeovers = [round(c.takeover_secs, 2) if c.takeover_secs is not None else None for c in cuts]
    with capsys.disabled():
        print(f'\ncluster ({len(cuts)} cut(s) of the delivering host, dead_client_secs={DEAD_CLIENT_SECS:g}): '
              f'takeover s={takeovers} '
              f'(cut→taken by: {[(c.host, c.taken_by) for c in cuts]}; failed renewals on the cut host: '
              f'{[c.failed_renewals for c in cuts]}) {tally.summary()} '
              f'overlaps={len(overlapping)} refused={tally.refused}; '
              f'scheduled job: firings={fired} run twice={fired_twice} missed={missed}')
        for early, late in overlapping[:5]:
            print(f'  overlap: {early} and {late}')
    assert len(tally.acknowledged) > 100, f'too little load to prove anything: {tally.summary()}'
    assert not tally.lost, f'acknowledged but never delivered: {sorted(tally.lost)[:20]}'
    assert not tally.phantom, f'delivered but never published: {sorted(tally.phantom)[:20]}'
    assert all(t is not None and t <= LEASE_TTL_SECS + 2 for t in takeovers), \
        f'takeover within the lease TTL ({LEASE_TTL_SECS} s) + 2 s: {takeovers}'
    if DEAD_CLIENT_SECS:
        # The cut host noticed (its renewals failed within dead_client_secs) rather than waiting on its link.
        assert all(c.failed_renewals for c in cuts), [c.failed_renewals for c in cuts]
    assert not overlapping, f'{len(overlapping)} deliveries overlapped one by another process: {overlapping[:3]}'
    assert fired_twice == 0, f'{fired_twice} firing(s) of the scheduled job ran twice'
    # A firing whose claim commits just as the link goes is lost with its run (the scheduler runs each
    # firing at most once, by design): one per cut at most; any other gap would be a scheduler stalled by the cut.
    assert missed <= len(cuts), f'{missed} firing(s) of the scheduled job missed in {len(cuts)} cut(s)'


#: Run on host x: lock a row in a transaction, say so, then (once told, while cut off) try a query.
LOCKER = textwrap.dedent('''
    import sys, time
    import psycopg
    from runtime.db.engine import dead_link_params

    url, secs = sys.argv[1], float(sys.argv[2])
    conn = psycopg.connect(url, **(dead_link_params(secs) if secs else {}))
    conn.execute('SELECT v FROM cluster_lock WHERE id = 1 FOR UPDATE')
    print('locked', flush=True)
    sys.stdin.readline()
    started = time.monotonic()
    try:
        conn.execute('SELECT 1')
        print(f'answered {time.monotonic() - started:.2f}', flush=True)
    except Exception as e:
        print(f'failed {time.monotonic() - started:.2f} {type(e).__name__}', flush=True)
''')

#: How long the test waits for a lock held by a cut client without dead_client_secs (it never comes).
UNFREED_WAIT_SECS = 8.0


@pytest.mark.slow
@pytest.mark.parametrize('secs', [0.0, 2.0])
def test_dead_client_secs_frees_a_cut_hosts_locks_and_fails_its_queries(cluster, secs, capsys):
    """A host cut in the middle of a transaction: with dead_client_secs, both ends give up in seconds."""
    import psycopg
    admin_url = cluster.pg.url
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute('CREATE TABLE IF NOT EXISTS cluster_lock (id int PRIMARY KEY, v int)')
        conn.execute('INSERT INTO cluster_lock VALUES (1, 0) ON CONFLICT DO NOTHING')
    host = cluster.net.hosts['x']
    locker = subprocess.Popen([*host.exec_prefix, sys.executable, '-c', LOCKER, admin_url, str(secs)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, 'PYTHONPATH': str(REPO)})
    try:
        assert locker.stdout is not None and locker.stdin is not None
        assert locker.stdout.readline().strip() == 'locked'
        cluster.net.cut('x')
        locker.stdin.write('go\n')
        locker.stdin.flush()
        wait = UNFREED_WAIT_SECS if not secs else 30
        started = time.monotonic()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f"SET lock_timeout = '{int(wait * 1000)}ms'")
            try:
                conn.execute('UPDATE cluster_lock SET v = v + 1 WHERE id = 1')
                freed: float | None = time.monotonic() - started
            except psycopg.errors.LockNotAvailable:
                freed = None
        try:
            client, _ = locker.communicate(timeout=max(1.0, wait - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            client = 'still waiting'
    finally:
        cluster.net.restore('x')
        if locker.poll() is None:
            locker.kill()
            locker.wait(10)
    freed_text = f'not within {wait:g} s' if freed is None else f'after {freed:.2f} s'
    with capsys.disabled():
        print(f'\ncut in a transaction, dead_client_secs={secs:g}: the database freed its lock {freed_text}; '
              f'its query on the cut link: {client.strip()}')
    if secs:
        assert freed is not None and freed <= secs + 4, f'lock freed after {freed} s'
        assert client.startswith('failed'), client
    else:
        assert freed is None, 'without dead_client_secs the lock was not expected to be freed this soon'
