"""The package as a user installs it: a wheel, in a bare virtualenv, started in an empty directory.

The wheel is built from a copy of the checkout (so that no build/ or egg-info lands in it), then
installed with pip into a new virtualenv without any extra, from pip's cache and configured
index: pyspark, which only the ``spark`` extra brings, must not be there. ``conduit start`` runs
in a directory with no config/ and no services/: it must work on defaults, migrate its database,
serve /health, answer the built-in ``conduit.ping`` through the CLI, take a module deployed with
``conduit deploy``, and refuse a Spark job with an error naming the extra. About 30 seconds, most
of it installing the dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.live_server import REPO, free_port, poll

#: What the build needs from the checkout; everything else (tests, benchmarks, state) stays out.
_COPY_IGNORE = shutil.ignore_patterns('.git', '.venv', 'var', '__pycache__', '*.egg-info', 'build', 'dist',
                                      '.pytest_cache', '.ruff_cache', 'tests', 'bench')

HELPER = 'def greet(name):\n    return f"hello, {name}"\n'

HELLO = '''from runtime import Service

from greeting import greet


class Hello(Service):
    name = 'wheel.hello'
    input = 'name',

    def handle(self):
        self.response.payload = {'greeting': greet(self.request.input['name'])}
'''


#: What a Spark job submission answers when the spark extra is not installed.
NO_SPARK = "Spark support is not installed: pip install 'conduit[spark]'"


def _run(*args: str | Path, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = _call(*args, cwd=cwd, env=env, timeout=timeout)
    assert done.returncode == 0, f'{args} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}'
    return done.stdout


def _call(*args: str | Path, cwd: Path, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def _health(url: str) -> bool:
    try:
        return requests.get(url + '/health', timeout=1).status_code == 200
    except requests.RequestException:
        return False


@pytest.mark.slow
def test_the_wheel_installs_in_a_bare_venv_and_serves_from_an_empty_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith('CONDUIT_') and k not in ('PYTHONPATH', 'VIRTUAL_ENV', 'PYTHONHOME')}
    source = tmp_path / 'source'
    shutil.copytree(REPO, source, ignore=_COPY_IGNORE)
    dist = tmp_path / 'dist'
    _run(sys.executable, '-m', 'pip', 'wheel', '--no-deps', '--quiet', '--wheel-dir', dist, f'{source}/',
         cwd=tmp_path, env=env)
    wheel, = dist.glob('conduit-*.whl')

    venv = tmp_path / 'venv'
    # Without pip of its own (ensurepip alone took 10 s on two busy cores): this pip installs into it.
    _run(sys.executable, '-m', 'venv', '--without-pip', venv, cwd=tmp_path, env=env)
    _run(sys.executable, '-m', 'pip', '--python', venv / 'bin' / 'python', 'install', '--quiet', wheel,
         cwd=tmp_path, env=env, timeout=900)
    conduit = venv / 'bin' / 'conduit'
    no_pyspark = _call(venv / 'bin' / 'python', '-c', 'import pyspark', cwd=tmp_path, env=env)
    assert no_pyspark.returncode == 1 and "No module named 'pyspark'" in no_pyspark.stderr, no_pyspark

    empty = tmp_path / 'empty'
    empty.mkdir()
    port = free_port()
    url = f'http://127.0.0.1:{port}'
    env['CONDUIT_SERVER_BIND'] = f'127.0.0.1:{port}'  # the CLI finds the server the same way
    log_path = tmp_path / 'server.log'
    with open(log_path, 'wb') as log:
        proc = subprocess.Popen([conduit, 'start'], cwd=empty, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        poll(lambda: proc.poll() is not None or _health(url), timeout=60, message='/health answering')
        assert proc.poll() is None, log_path.read_text()

        pong = json.loads(_run(conduit, 'invoke', 'conduit.ping', cwd=empty, env=env))
        assert pong['pong'] is True

        modules = tmp_path / 'modules'
        modules.mkdir()
        (modules / 'greeting.py').write_text(HELPER)
        (modules / 'hello.py').write_text(HELLO)
        _run(conduit, 'deploy', modules / 'greeting.py', cwd=empty, env=env)
        assert 'wheel.hello' in _run(conduit, 'deploy', modules / 'hello.py', cwd=empty, env=env)
        answer = json.loads(_run(conduit, 'invoke', 'wheel.hello', '--data', '{"name": "Ada"}', cwd=empty, env=env))
        assert answer == {'greeting': 'hello, Ada'}

        password = (empty / 'var' / 'admin.password').read_text().strip()
        r = requests.post(url + '/admin/spark/jobs', json={'pipeline': 'traffic_analytics'}, auth=('admin', password),
                          timeout=10)
        assert r.status_code == 503 and NO_SPARK in r.json()['details'], r.text
        refused = _call(conduit, 'spark', 'submit', 'traffic_analytics', cwd=empty, env=env)
        assert refused.returncode == 1 and NO_SPARK in refused.stderr, refused

        # The dashboard ships in the wheel: templates, static files, and plotly.js from the plotly package.
        assert (empty / 'var' / 'viewer.password').stat().st_mode & 0o777 == 0o600
        form = requests.get(url + '/dashboard/sign-in', timeout=10)
        assert form.status_code == 200 and '<form' in form.text, form.text
        for name in ('dashboard.css', 'dashboard.js', 'plotly.min.js'):
            assert requests.get(f'{url}/dashboard/static/{name}', timeout=30).status_code == 200, name
        browser = requests.Session()
        signed_in = browser.post(url + '/dashboard/sign-in', data={'username': 'admin', 'password': password},
                                 allow_redirects=False, timeout=10)
        assert signed_in.status_code == 303, signed_in.text
        assert browser.get(url + '/dashboard/', timeout=10).status_code == 200

        _run(conduit, 'stop', cwd=empty, env=env)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    log = log_path.read_text()
    assert 'Traceback' not in log, log
    assert sorted(p.name for p in empty.iterdir()) == ['hot-deploy', 'var']
