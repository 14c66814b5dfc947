"""The server: gunicorn run programmatically, gevent workers, one runtime per worker.

The master first claims its configuration (``runtime.cluster.single_instance``: a second start of a
running server stops there, having touched nothing), then migrates the database and applies the
object files once, before forking, so that
workers never race each other on the schema. Each worker then builds its own runtime after the
gevent worker has monkey-patched the standard library (``load()`` runs in the worker), and stops
it in ``worker_exit``. The workers' metrics are added up through ``server.metrics_dir``
(``runtime.observability.metrics_share``): the master empties it on start and keeps the counts of every worker
that exits (``child_exit``). On SIGTERM gunicorn stops accepting connections and lets requests in flight
finish for up to ``server.graceful_timeout_secs``.
"""

from __future__ import annotations

import gc
import logging
import math
import os
import sys
from typing import Any

from gunicorn.app.base import BaseApplication
from gunicorn.glogging import Logger

from runtime.cluster.single_instance import claim, release_in_worker
from runtime.config import Settings
from runtime.core import Runtime, prepare_database
from runtime.observability.log_lines import OneLineFormatter
from runtime.observability.metrics_share import MetricsDir
from runtime.security.admin_credentials import admin_password, viewer_password

_log = logging.getLogger(__name__)

#: The runtime of this worker process (None in the master).
_worker_runtime: Runtime | None = None


def _post_fork(server: Any, worker: Any) -> None:
    release_in_worker()


def freeze_start_up_heap() -> None:
    """Leave the objects of a started worker out of every later garbage collection (gc.freeze).

    A started runtime holds about 155,000 objects (modules, services, SQLAlchemy's tables and
    compiled statements) that live as long as the worker. Python's full collection walks all of
    them: a pause of 80–135 ms of the whole worker, every few tens of seconds under load, which
    every request and delivery in flight waited out. Frozen, a full collection walks only what was
    made since. Freezing takes microseconds; no collection runs first (it found some 450 unreachable
    objects and took up to 150 ms, a stall of the loops that have just started), so those few stay,
    as does what start-up made and a later hot deployment replaces (one copy of those modules).
    """
    gc.freeze()


def _worker_exit(server: Any, worker: Any) -> None:
    if _worker_runtime is not None:
        _worker_runtime.stop()
        try:
            _worker_runtime.metrics.flush()  # last: stopping delivers and counts too
        except OSError as e:
            _log.warning('metrics: last counts not written (%s: %s)', type(e).__name__, e)


def _metrics_dir(server: Any) -> MetricsDir:
    settings = server.app.settings
    return MetricsDir(settings.path(settings.server.metrics_dir))


def _on_starting(server: Any) -> None:
    # The counts of a previous run's workers must not be added to this run's.
    _metrics_dir(server).reset()


def _child_exit(server: Any, worker: Any) -> None:
    try:
        _metrics_dir(server).retire(worker.pid)
    except OSError as e:
        _log.warning('metrics: counts of worker %s not kept (%s: %s)', worker.pid, type(e).__name__, e)


class _ConduitLogger(Logger):
    """gunicorn's logger writing its lines in Conduit's format (set per server by logger_class())."""

    line_format = ''

    def setup(self, cfg: Any) -> None:
        # gunicorn formats its own lines unless told otherwise: one format for every line of the log.
        self.error_fmt = self.access_fmt = self.syslog_fmt = self.line_format
        self.datefmt = None  # logging's default, as Conduit's own lines have it
        super().setup(cfg)
        for log in (self.error_log, self.access_log):
            for handler in log.handlers:
                if getattr(handler, '_gunicorn', False):  # the ones gunicorn's setup just made
                    handler.setFormatter(OneLineFormatter(self.line_format))


def logger_class(line_format: str) -> type[Logger]:
    """A gunicorn logger class writing its lines (errors and access) in line_format."""
    return type('ConduitLogger', (_ConduitLogger,), {'line_format': line_format})


class ConduitApplication(BaseApplication):
    """gunicorn application whose WSGI app is a Conduit runtime."""

    def __init__(self, settings: Settings, demo: bool = False) -> None:
        self.settings = settings
        self.demo = demo
        super().__init__()

    def load_config(self) -> None:
        s = self.settings.server
        options: dict[str, Any] = {
            'bind': [s.bind],
            'workers': s.workers,
            # gevent's worker with connection shedding and send timeouts (runtime.http.worker).
            'worker_class': 'runtime.http.worker.ConduitWorker',
            'worker_connections': self.settings.http.max_connections,
            # gunicorn waits this long for each request line and headers (and on an idle keep-alive connection).
            'keepalive': max(1, math.ceil(self.settings.http.header_timeout_secs)),
            'graceful_timeout': max(1, round(s.graceful_timeout_secs)),
            'timeout': 60,
            'pidfile': str(self.settings.path(s.pidfile)),
            'loglevel': self.settings.logging.level.lower(),
            'logger_class': logger_class(self.settings.logging.format),
            # None: no access log at all (gunicorn then skips the per-request formatting too).
            'accesslog': '-' if self.settings.logging.access_log else None,
            'access_log_format': self.settings.logging.access_log_format,
            'worker_exit': _worker_exit,
            'post_fork': _post_fork,
            'on_starting': _on_starting,
            'child_exit': _child_exit,
            'proc_name': 'conduit',
        }
        if 'control_socket_disable' in self.cfg.settings:
            # gunicorn >= 25 opens a control socket in $HOME by default; several servers on one host
            # (tests, clusters) would fight over it, and Conduit has its own admin API.
            options['control_socket_disable'] = True
        if s.certfile:
            options['certfile'] = str(self.settings.path(s.certfile))
            options['keyfile'] = str(self.settings.path(s.keyfile))
        for key, value in options.items():
            self.cfg.set(key, value)

    def load(self) -> Any:
        global _worker_runtime
        runtime = Runtime(self.settings, demo=self.demo)
        runtime.start(migrate=False)
        s = self.settings.server
        runtime.metrics.share(MetricsDir(self.settings.path(s.metrics_dir)), s.metrics_interval_secs,
                              runtime.spawner.spawn)
        _worker_runtime = runtime
        app = runtime.make_app()
        freeze_start_up_heap()
        return app


def run(settings: Settings, demo: bool = False) -> None:
    """Claim this configuration, prepare the database and run gunicorn in the foreground until stopped."""
    # First of all: a second start of a running server must not touch its database.
    claim(settings.path(settings.server.pidfile), settings.server.bind)
    prepare_database(settings, demo)
    admin_password(settings, create=True)
    if settings.dashboard.enabled:
        viewer_password(settings, create=True)
    try:
        ConduitApplication(settings, demo).run()
    except SystemExit as stop:
        _exit_now(stop.code)


def _exit_now(code: object) -> None:
    """End the process with code once gunicorn is done with it, without freeing its heap first.

    gunicorn ends the master, and each worker it forked, with ``sys.exit`` once everything is
    stopped: the runtime (in ``worker_exit``), the listeners, the pidfile. What was left was Python's
    own teardown, which freed every object one by one (the master alone spent 0.7–1.9 s of CPU in
    it at every stop), for nothing. Conduit registers no exit handler, and gunicorn none either; the
    log handlers and the standard streams are flushed here instead.
    """
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what sys.exit does with a message
        code = 1
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code or 0)
