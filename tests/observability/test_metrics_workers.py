"""/metrics of a server with two workers: every scrape shows the same totals, whichever worker answers,
and a worker killed with SIGKILL takes nothing it reported with it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.live_server import LiveServer, poll

#: Messages published.
N = 40

FAST = '''
[pubsub]
poll_interval_secs = 0.05
'''


def _children(pid: int) -> list[int]:
    path = Path(f'/proc/{pid}/task/{pid}/children')
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _scrape(server: LiveServer) -> dict[str, Any]:
    # A new connection each time: the kernel hands it to either worker.
    r = requests.get(server.url + '/metrics', auth=server.admin, timeout=10, headers={'Connection': 'close'})
    assert r.status_code == 200, r.text
    found: dict[str, Any] = {'published': 0.0, 'requests': 0.0, 'workers': None, 'labels': set()}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            found['labels'] |= set(sample.labels)
            if sample.name == 'conduit_pubsub_published_total' and sample.labels['topic'] == 'workers.t':
                found['published'] += sample.value
            elif (sample.name == 'conduit_http_requests_total' and sample.labels['route'] == '/admin/publish'
                  and sample.labels['status'] == '200'):
                found['requests'] += sample.value
            elif sample.name == 'conduit_workers':
                found['workers'] = sample.value
    return found


def _publish(server: LiveServer, n: int) -> None:
    for i in range(n):
        def sent(i: int = i) -> bool:
            r = requests.post(server.url + '/admin/publish', json={'topic': 'workers.t', 'data': {'i': i}},
                              auth=server.admin, timeout=10, headers={'Connection': 'close'})
            # 404: the worker that took the request has not synchronized the new topic yet.
            assert r.status_code in (200, 404), r.text
            return r.status_code == 200
        poll(sent, timeout=10, message='publication accepted')


def test_two_workers_add_up_and_survive_a_kill(server_factory) -> None:
    server = server_factory(workers=2, extra_config=FAST).start()
    assert server.proc is not None
    poll(lambda: len(_children(server.proc.pid)) == 2, message='two workers')
    r = server.request('POST', '/admin/topics', auth=server.admin, json={'name': 'workers.t'})
    assert r.status_code == 201, r.text
    _publish(server, N)

    poll(lambda: _scrape(server)['published'] == N, timeout=15, message=f'{N} publications in a scrape')
    scrapes = [_scrape(server) for _ in range(12)]
    assert {s['published'] for s in scrapes} == {N}
    assert {s['requests'] for s in scrapes} == {N}
    assert {s['workers'] for s in scrapes} == {2}
    assert 'pid' not in set().union(*(s['labels'] for s in scrapes))

    # Kill one worker: gunicorn starts another, and nothing the dead one reported goes away.
    victim = _children(server.proc.pid)[0]
    os.kill(victim, signal.SIGKILL)
    poll(lambda: victim not in _children(server.proc.pid) and len(_children(server.proc.pid)) == 2,
         timeout=20, message='a new worker')
    server.request('GET', '/health')
    seen = []
    for _ in range(10):
        found = _scrape(server)
        seen.append(found['published'])
        assert found['published'] == N, seen
    poll(lambda: _scrape(server)['workers'] == 2, timeout=15, message='two live workers counted')

    _publish(server, 5)
    poll(lambda: _scrape(server)['published'] == N + 5, timeout=15, message='later publications added')
    assert {_scrape(server)['published'] for _ in range(6)} == {N + 5}
    retired = server.base / 'var' / 'metrics' / 'retired.json'
    assert retired.exists()
    assert oct(os.stat(server.base / 'var' / 'metrics').st_mode & 0o777) == '0o700'


def test_a_restart_forgets_the_previous_run(server_factory) -> None:
    server = server_factory(workers=2).start()
    metrics_dir = server.base / 'var' / 'metrics'
    stale = metrics_dir / 'worker-999999.json'
    r = server.request('POST', '/admin/topics', auth=server.admin, json={'name': 'workers.t'})
    assert r.status_code == 201, r.text
    _publish(server, 3)
    poll(lambda: _scrape(server)['published'] == 3, timeout=15, message='3 publications in a scrape')
    server.stop()
    stale.write_text('{"id": "old", "counters": {"published": [["workers.t", 1000]]}}')
    server.start()
    assert not stale.exists()
    assert {_scrape(server)['published'] for _ in range(4)} == {0}
