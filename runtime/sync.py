"""Keeping every worker's in-memory copies in step with the database.

Shared objects (deployments, channels, security definitions, ...) each have a row in
``conduit_sync_state`` whose version is bumped in the same transaction as the change. Each worker
reads that small table every ``sync.interval_secs`` and calls the reload function registered
for each key whose version moved. A worker that made a change itself calls ``changed(key)``
so that it does not wait for its next poll.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import gevent
from sqlalchemy import Connection, Engine, select, update

from runtime.db.models import SyncState

_log = logging.getLogger(__name__)


def bump(conn: Connection, key: str, value: str | None = None) -> None:
    """Increase a key's version inside the caller's transaction (creating the row if needed)."""
    values: dict[str, object] = {'version': SyncState.version + 1}
    if value is not None:
        values['value'] = value
    if not conn.execute(update(SyncState).where(SyncState.key == key).values(**values)).rowcount:
        conn.execute(SyncState.__table__.insert().values(key=key, version=1, value=value or ''))


class Synchronizer:
    """Polls conduit_sync_state and reloads what changed."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._reloaders: dict[str, Callable[[], None]] = {}
        self._versions: dict[str, int] = {}

    def register(self, key: str, reload: Callable[[], None]) -> None:
        """Call reload whenever key's version changes."""
        self._reloaders[key] = reload

    def changed(self, key: str) -> None:
        """Reload one key now (this worker just changed it)."""
        self._reloaders[key]()

    def poll(self) -> None:
        """Compare versions once and reload what moved."""
        with self._engine.connect() as conn:
            rows = conn.execute(select(SyncState.key, SyncState.version)).all()
        for key, version in rows:
            if key in self._reloaders and self._versions.get(key) != version:
                self._versions[key] = version
                try:
                    self._reloaders[key]()
                except Exception:
                    _log.exception('reloading %s failed; will retry on the next change', key)
                    self._versions.pop(key, None)

    def run(self, interval: float) -> None:
        """Poll forever (run in a greenlet)."""
        while True:
            gevent.sleep(interval)
            try:
                self.poll()
            except Exception as e:
                _log.warning('sync poll failed: %s', e)
