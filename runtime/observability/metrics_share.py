"""The counters of every gunicorn worker of one server, added up for ``/metrics``.

Each worker counts in memory (``runtime.observability.metrics``) and writes a *record* of its counters, histograms
and gauges into ``server.metrics_dir`` every ``server.metrics_interval_secs`` and when it stops:
``worker-<pid>.json``, written under a temporary name and renamed, so a reader sees a whole record
or the previous one. A scrape, whichever worker answers it, adds the records of the other workers
to its own fresh counts, which it writes first. The other workers' part is as of their last write
(at most one interval old, or their last scrape): once every worker has written since the last
change, every scrape of the server shows the same totals, whichever worker answers.

When a worker exits (stopped, recycled or killed), gunicorn's master moves its last record into
``retired.json`` (``retire``): counters and histograms only, since gauges such as open connections
died with it. ``retired.json`` names the records it already holds (each worker run has its own id),
and a reader reads the worker files before ``retired.json``; so a record the master is moving is
counted once, never twice nor zero times, and totals never go backwards. What a worker killed with
SIGKILL counted after its last write is lost (at most one interval).

The master empties the directory when the server starts (``reset``): the records of a previous run
would otherwise be added to this one's. Nothing here knows prometheus_client: a record is plain
JSON-able data, built from and turned back into ``runtime.observability.metrics.MetricsSnapshot`` fields.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

_log = logging.getLogger(__name__)

#: MetricsSnapshot fields that are counters: lists of (key, count).
COUNTER_FIELDS = ('published', 'delivered', 'failed', 'dead_lettered', 'http_requests', 'expired',
                  'websocket_frames', 'files', 'files_published')

#: MetricsSnapshot fields that are histograms: (bucket bounds, [(key, [count per bucket..., sum])]).
HISTOGRAM_FIELDS = ('invoke', 'http_latency')

#: MetricsSnapshot fields that are gauges of one worker, added up over the live workers.
GAUGE_FIELDS = ('websocket_connections', 'websocket_attached')

#: The file that keeps what exited workers counted.
RETIRED = 'retired.json'

#: Prefix and suffix of a worker's file.
WORKER_PREFIX, WORKER_SUFFIX = 'worker-', '.json'


def _key(value: Any) -> Any:
    # JSON has no tuples: a key that was a tuple comes back as a list.
    return tuple(value) if isinstance(value, list) else value


def empty_record(run_id: str = '') -> dict[str, Any]:
    """A record that counted nothing."""
    return {'id': run_id, 'counters': {}, 'histograms': {}, 'gauges': {}}


def add_records(records: Iterable[dict[str, Any]], gauges: bool = True) -> dict[str, Any]:
    """One record holding the sums of records (their gauges too unless gauges is False).

    Counters are added per key, histograms per key and bucket (a histogram whose bounds differ from
    the first one seen is left out rather than mixed), gauges summed.
    """
    counters: dict[str, dict[Any, float]] = {}
    histograms: dict[str, tuple[list[float], dict[Any, list[float]]]] = {}
    gauge_sums: dict[str, float] = {}
    for record in records:
        for name, items in record.get('counters', {}).items():
            total = counters.setdefault(name, {})
            for key, count in items:
                key = _key(key)
                total[key] = total.get(key, 0) + count
        for name, (bounds, items) in record.get('histograms', {}).items():
            seen = histograms.setdefault(name, (list(bounds), {}))
            if list(bounds) != seen[0]:
                _log.warning('metrics: histogram %s has other bucket bounds in one record; left out', name)
                continue
            for key, series in items:
                key = _key(key)
                total_series = seen[1].get(key)
                if total_series is None:
                    seen[1][key] = list(series)
                else:
                    for i, value in enumerate(series):
                        total_series[i] += value
        if gauges:
            for name, value in record.get('gauges', {}).items():
                gauge_sums[name] = gauge_sums.get(name, 0) + value
    return {'id': '', 'counters': {name: list(total.items()) for name, total in counters.items()},
            'histograms': {name: [bounds, list(items.items())] for name, (bounds, items) in histograms.items()},
            'gauges': gauge_sums}


def record_of(snapshot: Any, run_id: str) -> dict[str, Any]:
    """The record of a MetricsSnapshot's per-worker fields (the database gauges are not in it)."""
    return {'id': run_id,
            'counters': {name: [[k, v] for k, v in getattr(snapshot, name)] for name in COUNTER_FIELDS},
            'histograms': {name: [list(getattr(snapshot, name)[0]), [[k, s] for k, s in getattr(snapshot, name)[1]]]
                           for name in HISTOGRAM_FIELDS},
            'gauges': {name: getattr(snapshot, name) for name in GAUGE_FIELDS}}


def apply_record(snapshot: Any, record: dict[str, Any]) -> None:
    """Set a MetricsSnapshot's per-worker fields to a record's values (missing ones become empty)."""
    for name in COUNTER_FIELDS:
        setattr(snapshot, name, [(_key(k), v) for k, v in record['counters'].get(name, ())])
    for name in HISTOGRAM_FIELDS:
        bounds, items = record['histograms'].get(name, (getattr(snapshot, name)[0], []))
        setattr(snapshot, name, (tuple(bounds), [(_key(k), list(s)) for k, s in items]))
    for name in GAUGE_FIELDS:
        setattr(snapshot, name, record['gauges'].get(name, 0))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class MetricsDir:
    """The per-server directory of worker records (see the module docstring)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __repr__(self) -> str:
        return f'MetricsDir({str(self.path)!r})'

    def reset(self) -> None:
        """Create the directory (owner only) and remove the files of a previous run; in the master, before forking."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.path, 0o700)  # mkdir's mode is filtered by the umask, and the directory may be older
        for entry in self.path.iterdir():
            if entry.is_file() and (entry.name == RETIRED or entry.name.startswith((WORKER_PREFIX, '.'))):
                entry.unlink(missing_ok=True)

    def worker_path(self, pid: int) -> Path:
        """The file of the worker with this process id."""
        return self.path / f'{WORKER_PREFIX}{pid}{WORKER_SUFFIX}'

    def write(self, pid: int, record: dict[str, Any]) -> None:
        """Replace the worker's record at once (a reader sees the old or the new one, whole)."""
        self._write(self.worker_path(pid), record)

    def _write(self, path: Path, record: dict[str, Any]) -> None:
        tmp = path.with_name(f'.{path.name}.tmp')
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'wb') as f:
            f.write(json.dumps(record, separators=(',', ':')).encode())
        os.replace(tmp, path)

    def _read(self, path: Path) -> dict[str, Any] | None:
        try:
            return json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            _log.warning('metrics: %s not read (%s: %s)', path.name, type(e).__name__, e)
            return None

    def _workers(self) -> list[tuple[int, dict[str, Any]]]:
        found = []
        for entry in self.path.glob(f'{WORKER_PREFIX}*{WORKER_SUFFIX}'):
            pid_text = entry.name[len(WORKER_PREFIX):-len(WORKER_SUFFIX)]
            record = self._read(entry) if pid_text.isdigit() else None
            if record is not None:
                found.append((int(pid_text), record))
        return found

    def combined(self, own_pid: int, own: dict[str, Any], write: bool = False) -> tuple[dict[str, Any], int]:
        """The sum of own (this worker's fresh record, written first when write is True), the other workers'
        records and the retired ones, and how many live workers that is."""
        if write:
            self.write(own_pid, own)
        # The worker files first, then retired.json: see the module docstring.
        others = [(pid, r) for pid, r in self._workers() if pid != own_pid]
        retired = self._read(self.path / RETIRED) or empty_record()
        held = set(retired.get('held', ()))
        live = [r for pid, r in others if r.get('id') not in held and _alive(pid)]
        dead = [r for pid, r in others if r.get('id') not in held and not _alive(pid)]
        total = add_records([own, *live])
        # A dead worker not retired yet: its counters still count, its gauges no longer.
        total = add_records([total, add_records([*dead, retired], gauges=False)])
        return total, 1 + len(live)

    def retire(self, pid: int) -> None:
        """Move an exited worker's last record into retired.json; in the master (gunicorn's child_exit)."""
        path = self.worker_path(pid)
        record = self._read(path)
        if record is None:
            return
        retired = self._read(self.path / RETIRED) or empty_record()
        # Only records whose file still exists need to be named: the others are gone for every reader.
        on_disk = {r.get('id') for _, r in self._workers()}
        held = [run_id for run_id in retired.get('held', ()) if run_id in on_disk]
        total = add_records([retired, record], gauges=False)
        total['gauges'] = {}
        total['held'] = [*held, record.get('id', '')]
        self._write(self.path / RETIRED, total)
        path.unlink(missing_ok=True)
