"""The peers' side of ``bench/peers.py``: a Celery app and Dramatiq actors doing the same no-op work.

Both count handled messages in the worker process and, at the expected count, write the time the
last one finished to ``BENCH_DONE_FILE``; a warm-up message writes ``BENCH_READY_FILE``. Nothing
else crosses the process boundary, so the broker round trips measured are the peers' own.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


class Tally:
    """Counts handler calls in the worker process (threads or greenlets) and reports the last one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen = 0
        self.expected = int(os.environ.get('BENCH_COUNT', '0'))
        self.done_file = Path(os.environ.get('BENCH_DONE_FILE', '/dev/null'))
        self.ready_file = Path(os.environ.get('BENCH_READY_FILE', '/dev/null'))

    def handle(self, payload: dict) -> None:
        """The no-op handler's only work: count, and say when the round is complete."""
        if payload.get('warmup'):
            self.ready_file.write_text(str(time.time()))
            return
        with self._lock:
            self._seen += 1
            seen = self._seen
        if seen == self.expected:
            self.done_file.write_text(f'{time.time()} {seen}')
        elif seen > self.expected:
            self.done_file.write_text(f'{time.time()} {seen}')
