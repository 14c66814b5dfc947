"""Adding up the workers' metric records: counters, histograms, gauges, retired workers, stale files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from prometheus_client.exposition import generate_latest

from runtime.observability.metrics import MetricsSnapshot
from runtime.observability.metrics_share import RETIRED, MetricsDir, add_records, apply_record, empty_record, record_of

BOUNDS = (0.1, 1.0)

#: A process id nobody has (above the kernel's largest).
DEAD_PID = 2 ** 23 + 7


def _snapshot(published: int = 0, delivered: int = 0, connections: int = 0, latencies: tuple[float, ...] = ()
              ) -> MetricsSnapshot:
    series = [0, 0, 0, 0.0]
    for value in latencies:
        series[0 if value <= 0.1 else 1 if value <= 1.0 else 2] += 1
        series[-1] += value
    return MetricsSnapshot(
        published=[('orders', published)] if published else [],
        delivered=[(('orders', '1', 'svc'), delivered)] if delivered else [], failed=[], dead_lettered=[],
        http_requests=[(('POST', '/pubsub/topic/{name}', '200'), published)] if published else [],
        invoke=(BOUNDS, [('svc', series)] if latencies else []), http_latency=(BOUNDS, []),
        websocket_connections=connections)


def _record(run_id: str, **kwargs: object) -> dict:
    return record_of(_snapshot(**kwargs), run_id)


def _totals(record: dict) -> MetricsSnapshot:
    snapshot = _snapshot()
    apply_record(snapshot, record)
    return snapshot


def test_counters_and_histograms_are_added_per_key() -> None:
    total = _totals(add_records([_record('a', published=3, delivered=2, latencies=(0.05, 2.0)),
                                 _record('b', published=4, latencies=(0.5,))]))
    assert total.published == [('orders', 7)]
    assert total.delivered == [(('orders', '1', 'svc'), 2)]
    assert total.http_requests == [(('POST', '/pubsub/topic/{name}', '200'), 7)]
    bounds, [(key, series)] = total.invoke
    assert bounds == BOUNDS and key == 'svc'
    assert series[:3] == [1, 1, 1] and abs(series[-1] - 2.55) < 1e-9


def test_gauges_are_summed_unless_left_out() -> None:
    records = [_record('a', connections=2), _record('b', connections=5)]
    assert _totals(add_records(records)).websocket_connections == 7
    assert _totals(add_records(records, gauges=False)).websocket_connections == 0


def test_histograms_with_other_bounds_are_not_mixed() -> None:
    odd = _record('b', latencies=(0.5,))
    odd['histograms']['invoke'][0] = [0.2, 2.0]
    _bounds, [(_key, series)] = _totals(add_records([_record('a', latencies=(0.05,)), odd])).invoke
    assert series[:3] == [1, 0, 0]


def test_a_record_survives_json_with_tuple_keys(tmp_path: Path) -> None:
    directory = MetricsDir(tmp_path)
    directory.reset()
    directory.write(DEAD_PID, _record('a', delivered=2))
    total, workers = directory.combined(os.getpid(), empty_record('me'))
    assert _totals(total).delivered == [(('orders', '1', 'svc'), 2)]
    assert workers == 1  # the other file's worker is not alive


def test_every_scrape_adds_the_other_workers_and_the_retired(tmp_path: Path) -> None:
    directory = MetricsDir(tmp_path / 'metrics')
    directory.reset()
    # Another live worker: this test's parent process stands for it.
    directory.write(os.getppid(), _record('other', published=5, connections=1))
    directory.write(DEAD_PID, _record('gone', published=2, connections=9))
    directory.retire(DEAD_PID)
    assert not directory.worker_path(DEAD_PID).exists()
    total, workers = directory.combined(os.getpid(), _record('me', published=1, connections=3))
    snapshot = _totals(total)
    assert snapshot.published == [('orders', 8)]
    assert snapshot.websocket_connections == 4  # the retired worker's connections died with it
    assert workers == 2


def test_a_record_being_retired_is_counted_once(tmp_path: Path) -> None:
    directory = MetricsDir(tmp_path)
    directory.reset()
    directory.write(DEAD_PID, _record('gone', published=2))
    directory.retire(DEAD_PID)
    # The master renamed retired.json into place but has not removed the worker's file yet.
    directory.write(DEAD_PID, _record('gone', published=2))
    total, _ = directory.combined(os.getpid(), empty_record('me'))
    assert _totals(total).published == [('orders', 2)]


def test_retiring_twice_keeps_both_and_forgets_ids_whose_file_is_gone(tmp_path: Path) -> None:
    directory = MetricsDir(tmp_path)
    directory.reset()
    for run_id, count in (('one', 2), ('two', 3)):
        directory.write(DEAD_PID, _record(run_id, published=count))
        directory.retire(DEAD_PID)
    retired = directory._read(tmp_path / RETIRED)
    assert retired['held'] == ['two']
    total, _ = directory.combined(os.getpid(), empty_record('me'))
    assert _totals(total).published == [('orders', 5)]


def test_a_dead_worker_not_yet_retired_counts_without_its_gauges(tmp_path: Path) -> None:
    directory = MetricsDir(tmp_path)
    directory.reset()
    directory.write(DEAD_PID, _record('dead', published=4, connections=6))
    total, workers = directory.combined(os.getpid(), empty_record('me'))
    assert _totals(total).published == [('orders', 4)]
    assert _totals(total).websocket_connections == 0
    assert workers == 1


def test_reset_removes_a_previous_run_and_is_owner_only(tmp_path: Path) -> None:
    path = tmp_path / 'metrics'
    path.mkdir(mode=0o755)
    directory = MetricsDir(path)
    directory.write(os.getppid(), _record('old', published=9))
    (path / RETIRED).write_text('{}')
    (path / 'README').write_text('not ours')
    directory.reset()
    assert sorted(p.name for p in path.iterdir()) == ['README']
    assert stat.S_IMODE(path.stat().st_mode) == 0o700
    total, _ = directory.combined(os.getpid(), empty_record('me'))
    assert _totals(total).published == []


def test_unreadable_files_are_skipped(tmp_path: Path) -> None:
    directory = MetricsDir(tmp_path)
    directory.reset()
    directory.worker_path(os.getppid()).write_text('{not json')
    (tmp_path / 'worker-abc.json').write_text('{}')
    total, workers = directory.combined(os.getpid(), _record('me', published=1))
    assert _totals(total).published == [('orders', 1)] and workers == 1


def test_the_exposition_has_no_pid_label_and_counts_workers() -> None:
    snapshot = _snapshot(published=3, latencies=(0.05,))
    snapshot.workers = 2
    text = generate_latest(snapshot).decode()
    assert 'pid=' not in text
    assert 'conduit_workers 2.0' in text
    assert 'conduit_pubsub_published_total{topic="orders"} 3.0' in text


def test_a_worker_shares_its_counts_and_a_broken_directory_leaves_its_own(runtime_factory, tmp_path: Path) -> None:
    rt = runtime_factory()
    directory = MetricsDir(tmp_path / 'shared')
    directory.reset()
    directory.write(os.getppid(), _record('other', published=5))
    rt.metrics.share(directory, 60.0, rt.spawner.spawn)
    rt.metrics.pubsub.published['orders'] = 2
    snapshot = rt.metrics.snapshot()
    assert snapshot.published == [('orders', 7)] and snapshot.workers == 2
    assert directory.worker_path(os.getpid()).exists()  # written by the scrape itself
    # The directory gone (an operator cleaning var/): the scrape answers with this worker's counts.
    for entry in directory.path.iterdir():
        entry.unlink()
    directory.path.rmdir()
    snapshot = rt.metrics.snapshot()
    assert snapshot.published == [('orders', 2)] and snapshot.workers == 1
