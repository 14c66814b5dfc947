"""A real Conduit server (gunicorn, gevent workers) in a subprocess, on a free loopback port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import requests

from runtime.config import ServerSection

#: The repository's root, whose services/ every test server deploys.
REPO = Path(__file__).resolve().parent.parent

#: What a server that found its address in use says (runtime.cluster.single_instance) before it exits.
_PORT_TAKEN = 'is in use by another process'

ADMIN_USER = 'admin'
ADMIN_PASSWORD = 'test-admin-password'


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def poll(condition: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
         message: str = 'condition') -> Any:
    """Call condition until it returns something truthy; AssertionError naming message on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f'{message} not met within {timeout:g} s')
        time.sleep(interval)


def write_atomically(path: Path, text: str) -> None:
    """Write a file under a hidden temporary name, then rename it into place."""
    tmp = path.with_name(f'.{path.name}.tmp')
    tmp.write_text(text, encoding='utf-8')
    os.replace(tmp, path)


class LiveServer:
    """One server: its project directory, its URL, its log, and start/stop/kill."""

    def __init__(self, base: Path, db_url: str, workers: int = 1, extra_config: str = '',
                 env: dict[str, str] | None = None, demo: bool = False, host: str = '127.0.0.1',
                 command_prefix: Sequence[str] = ()) -> None:
        self.base = base
        #: Started with --demo: the demo services of services/demo/ are deployed too.
        self.demo = demo
        self.db_url = db_url
        self.workers = workers
        self.port = free_port()
        #: The address it listens on (another network namespace's, for the cluster tests).
        self.host = host
        #: Put before the server's command line (``ip netns exec NAME`` for the cluster tests).
        self.command_prefix = list(command_prefix)
        #: https when the server is given a certificate (``CONDUIT_SERVER_CERTFILE`` in env).
        self.scheme = 'https' if (env or {}).get('CONDUIT_SERVER_CERTFILE') else 'http'
        self.url = f'{self.scheme}://{host}:{self.port}'
        self.hot_deploy = base / 'hot-deploy'
        self.objects = base / 'config' / 'objects'
        self.log_path = base / 'server.log'
        self.env = env or {}
        self.proc: subprocess.Popen[bytes] | None = None
        for d in (self.hot_deploy, self.objects, base / 'var'):
            d.mkdir(parents=True, exist_ok=True)
        self._extra_config = extra_config
        self._write_config()

    def _write_config(self) -> None:
        host, workers, db_url, extra_config = self.host, self.workers, self.db_url, self._extra_config
        (self.base / 'config' / 'server.toml').write_text(f'''
[server]
bind = "{host}:{self.port}"
workers = {workers}
graceful_timeout_secs = 5
[database]
url = "{db_url}"
[hot_deploy]
dir = "hot-deploy"
services_dir = "{REPO / 'services'}"
poll_interval_secs = 0.1
stable_polls = 2
[objects]
poll_interval_secs = 0.2
[admin]
username = "{ADMIN_USER}"
password = "{ADMIN_PASSWORD}"
[sync]
interval_secs = 0.2
{extra_config}
''')

    @property
    def admin(self) -> tuple[str, str]:
        """Admin credentials for requests' auth=."""
        return ADMIN_USER, ADMIN_PASSWORD

    def start(self, timeout: float = 30.0, taken_port_retries: int = 3) -> LiveServer:
        """Start the server and wait until /health answers."""
        # Tests send wrong credentials on purpose from one address: the sign-in throttle (tested on
        # its own) would answer them 429.
        env = {**os.environ, 'CONDUIT_CONFIG': str(self.base / 'config' / 'server.toml'),
               'CONDUIT_HTTP_AUTH_MAX_FAILURES': '0', 'CONDUIT_HTTP_AUTH_MAX_FAILURES_PER_USER': '0',
               # Tests push to receivers on this machine, which the outbound policy refuses by default.
               'CONDUIT_PUBSUB_PUSH_ALLOW_HOSTS': '127.0.0.0/8,::1,localhost', **self.env}
        env.pop('CONDUIT_DATABASE_URL', None)
        logged = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, 'ab')
        args = [*self.command_prefix, sys.executable, '-m', 'runtime.cli', 'start', *(['--demo'] if self.demo else [])]
        self.proc = subprocess.Popen(args, cwd=self.base, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                if taken_port_retries > 0 and _PORT_TAKEN in self.log()[logged:]:
                    # free_port() is a guess: another test process may bind the port before this server does.
                    self.port = free_port()
                    self.url = f'{self.scheme}://{self.host}:{self.port}'
                    self._write_config()
                    return self.start(timeout, taken_port_retries - 1)
                raise RuntimeError(f'server exited with {self.proc.returncode}:\n{self.log()}')
            try:
                if requests.get(self.url + '/health', timeout=1).status_code == 200 and self._claimed_port():
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError(f'server did not answer within {timeout} s:\n{self.log()}')

    def _claimed_port(self) -> bool:
        """Whether this server's own process got past its claim of the port: only then does it write its pidfile.

        A /health answer alone can come from another test process's server on the same port, in the
        seconds before this one finds the port taken and exits (CI: the test then met a refused
        connection once that other server stopped).
        """
        assert self.proc is not None
        try:
            return (self.base / ServerSection().pidfile).read_text().strip() == str(self.proc.pid)
        except OSError:
            return False

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, then SIGKILL if it does not exit in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """SIGKILL the whole process group (master and workers) at once."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def log(self) -> str:
        """Everything the server wrote so far."""
        return self.log_path.read_text(errors='replace') if self.log_path.exists() else ''

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        """An HTTP request to this server."""
        kwargs.setdefault('timeout', 10)
        return requests.request(method, self.url + path, **kwargs)

    def admin_json(self, method: str, path: str, expected: int | None = None, **kwargs: Any) -> Any:
        """An admin API call's JSON answer, its status asserted (expected, or any 2xx when None)."""
        r = self.request(method, path, auth=self.admin, **kwargs)
        ok = r.status_code == expected if expected is not None else r.status_code < 300
        assert ok, f'{method} {path}: {r.status_code} {r.text}'
        return r.json()

    def invoke(self, name: str, payload: Any = None) -> Any:
        """Invoke a service through the admin API; returns its response payload."""
        r = self.request('POST', f'/admin/services/{name}/invoke', json=payload, auth=self.admin)
        assert r.status_code == 200, r.text
        return r.json()['response']

    def write_module(self, file_name: str, source: str) -> Path:
        """Drop a service module into the hot-deploy directory; returns its path."""
        path = self.hot_deploy / file_name
        write_atomically(path, source)
        return path

    def write_objects(self, file_name: str, text: str) -> Path:
        """Write an object file (YAML) into config/objects; returns its path."""
        path = self.objects / file_name
        write_atomically(path, text)
        return path

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """Wait until the log contains text; returns the whole log."""
        def found() -> str:
            log = self.log()
            return log if text in log else ''
        return poll(found, timeout, message=f'log line {text!r}')
