"""Running one pipeline with spark-submit, in a subprocess that never blocks the gevent hub.

``SparkSubmitter.run`` starts ``spark-submit`` (the one inside the installed pyspark package
unless configured otherwise) through ``gevent.subprocess``, so waiting for it is cooperative
whether or not the process is monkey-patched. The primary resource is ``launcher.py``, which
imports ``spark_pipeline.<name>`` from a zip of the pipelines directory (``--py-files``, so
executors on a cluster get the same code) and calls its ``main(args)``; the launcher writes the
outcome (the value main returned, or the error) to a result file that the submitter reads back.

The driver's stdout and stderr go straight to a log file, so nothing has to drain a pipe. The
process runs in a session of its own: killing it (timeout, operator) signals the whole group —
spark-submit's JVM, the Python driver and local-mode Python workers — SIGTERM first, SIGKILL
after ``kill_grace_secs``.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gevent import subprocess as gsubprocess

from runtime.errors import SparkUnavailable
from runtime.util.datafiles import open_private_append, private_dir

_log = logging.getLogger(__name__)

SUBMITTED = 'submitted'
RUNNING = 'running'
SUCCEEDED = 'succeeded'
FAILED = 'failed'
KILLED = 'killed'
STATUSES = (SUBMITTED, RUNNING, SUCCEEDED, FAILED, KILLED)
ACTIVE_STATUSES = (SUBMITTED, RUNNING)

#: The package name pipelines are imported under, whatever the directory is called.
PIPELINE_PACKAGE = 'spark_pipeline'

#: The script spark-submit runs.
LAUNCHER = Path(__file__).with_name('launcher.py')

#: How often a running job's stop condition (timeout, kill request) is checked.
POLL_SECS = 0.25

#: Longest error text kept for a failed job.
MAX_ERROR_CHARS = 4000

#: Lines of the driver's log searched for an error when the pipeline left no result.
_ERROR_SCAN_LINES = 200
_ERROR_LINE = re.compile(r'(Exception|Error)\b')


#: The pip requirement that brings pyspark (and its spark-submit) along.
SPARK_EXTRA = 'conduit[spark]'

#: Why a submission is refused when neither pyspark nor a configured spark-submit is there.
NOT_INSTALLED = (f"Spark support is not installed: pip install '{SPARK_EXTRA}' "
                 "(or set [spark] spark_submit to the spark-submit of a Spark distribution)")


def find_spark_submit(configured: str = '') -> str:
    """The spark-submit to run: the configured one, else the one of the installed pyspark package.

    pyspark is an optional extra: the server never imports it, it only looks for the package here,
    when a job is about to be submitted.
    """
    if configured:
        if not os.access(configured, os.X_OK):
            raise SparkUnavailable(f'spark.spark_submit {configured!r} is not an executable file')
        return configured
    spec = importlib.util.find_spec('pyspark')  # found without importing pyspark into the server
    if spec is None or not spec.origin:
        raise SparkUnavailable(NOT_INSTALLED)
    path = Path(spec.origin).parent / 'bin' / 'spark-submit'
    if not path.exists():
        raise SparkUnavailable(f'{path} is missing from the installed pyspark package')
    return str(path)


def parse_conf(text: str) -> dict[str, str]:
    """``key=value`` items separated by ';' or new lines (the [spark] conf setting)."""
    conf = {}
    for item in re.split(r'[;\n]', text or ''):
        item = item.strip()
        if not item:
            continue
        key, eq, value = item.partition('=')
        if not eq or not key.strip():
            raise ValueError(f'{item!r} is not key=value')
        conf[key.strip()] = value.strip()
    return conf


def tail_lines(path: str | Path, lines: int, max_bytes: int = 1 << 20) -> list[str]:
    """The last lines of a text file (reading at most max_bytes from its end); [] if it is missing."""
    if lines <= 0:
        return []
    try:
        with open(path, 'rb') as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return []
    text = data.decode('utf-8', errors='replace').splitlines()
    if size > max_bytes and text:
        text = text[1:]  # the first line read is probably cut
    return text[-lines:]


@dataclass
class Submission:
    """Everything one run of spark-submit needs."""

    job_id: str
    pipeline: str
    #: The argument strings main(args) receives.
    argv: list[str]
    master: str
    conf: dict[str, str]
    pipelines_dir: Path
    #: Where the driver's log and the result file go.
    job_dir: Path
    output_location: str
    #: The driver's working directory (the project directory).
    cwd: Path
    #: Extra environment for the driver.
    env: dict[str, str] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        """The driver's log."""
        return self.job_dir / 'driver.log'

    @property
    def result_path(self) -> Path:
        """The launcher's report of the outcome."""
        return self.job_dir / 'result.json'


@dataclass
class JobOutcome:
    """How a run ended."""

    status: str
    exit_code: int | None = None
    error: str = ''
    #: What the pipeline's main(args) returned (JSON-able), or None.
    result: Any = None


class SparkSubmitter:
    """Runs submissions with spark-submit; one call of run() per job, in the job's greenlet."""

    def __init__(self, spark_submit: str = '', kill_grace_secs: float = 5.0) -> None:
        self._configured = spark_submit
        self.kill_grace_secs = kill_grace_secs

    def check(self) -> None:
        """SparkUnavailable, naming what to install or configure, if no spark-submit can run."""
        find_spark_submit(self._configured)

    def command(self, sub: Submission, py_files: Path) -> list[str]:
        """The spark-submit command line of a submission."""
        cmd = [find_spark_submit(self._configured), '--master', sub.master,
               '--name', f'conduit:{sub.pipeline}:{sub.job_id}', '--py-files', str(py_files),
               # Executors (on a cluster too) run the same interpreter as the driver.
               '--conf', f'spark.pyspark.python={sys.executable}']
        for key, value in sub.conf.items():
            cmd += ['--conf', f'{key}={value}']
        return cmd + [str(sub.job_dir / LAUNCHER.name), '--pipeline', sub.pipeline, '--result', str(sub.result_path),
                      '--', *sub.argv]

    def run(self, sub: Submission, on_started: Callable[[int | None], None],
            should_stop: Callable[[], str | None]) -> JobOutcome:
        """Run the job to its end; should_stop() returning a reason kills it."""
        # Owner-only: the driver's log and result may quote data, and the copied files run as the server.
        private_dir(sub.job_dir)
        sub.result_path.unlink(missing_ok=True)
        # A copy beside the job's files: the script's directory goes first on the driver's sys.path,
        # and runtime/spark/ holds modules whose names must not shadow anything the driver imports.
        shutil.copyfile(LAUNCHER, sub.job_dir / LAUNCHER.name)
        cmd = self.command(sub, zip_pipelines(sub.pipelines_dir, sub.job_dir / 'pipelines.zip'))
        env = {**os.environ, 'PYSPARK_PYTHON': sys.executable, 'PYSPARK_DRIVER_PYTHON': sys.executable, **sub.env}
        with open_private_append(sub.log_path) as log:
            log.write(f'# conduit: job {sub.job_id}, pipeline {sub.pipeline}, master {sub.master}\n'.encode())
            log.flush()
            try:
                proc = gsubprocess.Popen(cmd, stdin=gsubprocess.DEVNULL, stdout=log, stderr=gsubprocess.STDOUT,
                                         cwd=str(sub.cwd), env=env, start_new_session=True)
            except OSError as e:
                raise SparkUnavailable(f'cannot start spark-submit for job {sub.job_id}: {e}') from None
        on_started(proc.pid)
        stop_reason = None
        try:
            while True:
                try:
                    proc.wait(timeout=POLL_SECS)
                    break
                except gsubprocess.TimeoutExpired:
                    stop_reason = should_stop()
                    if stop_reason:
                        _log.warning('Spark job %s (%s): stopping it: %s', sub.job_id, sub.pipeline, stop_reason)
                        self._kill(proc)
                        break
        finally:
            if proc.poll() is None:  # our greenlet was killed: never leave a JVM behind
                self._kill(proc)
            _kill_leftovers(proc.pid)
        return self._outcome(sub, proc.returncode, stop_reason)

    def _kill(self, proc: gsubprocess.Popen) -> None:
        for sig, wait in ((signal.SIGTERM, self.kill_grace_secs), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(timeout=wait)
                return
            except gsubprocess.TimeoutExpired:
                continue

    def _outcome(self, sub: Submission, exit_code: int | None, stop_reason: str | None) -> JobOutcome:
        report = _read_result(sub.result_path)
        if stop_reason:
            return JobOutcome(KILLED, exit_code, stop_reason[:MAX_ERROR_CHARS])
        if exit_code == 0 and (report.get('ok') or not report):
            # No report at all: the driver ran elsewhere (a cluster deploy mode); spark-submit's code decides.
            return JobOutcome(SUCCEEDED, exit_code, '', report.get('result'))
        error = report.get('error') or _error_from_log(sub.log_path, exit_code)
        return JobOutcome(FAILED, exit_code, str(error)[:MAX_ERROR_CHARS])


def _kill_leftovers(pgid: int) -> None:
    """SIGKILL whatever of the job's process group outlived spark-submit (a driver ignoring SIGTERM)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass  # nothing left (zombies awaiting their reaper do not count)


def zip_pipelines(directory: Path, target: Path) -> Path:
    """Zip the pipeline modules as the package ``spark_pipeline`` (for --py-files); returns target."""
    with zipfile.ZipFile(target, 'w', zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(directory.rglob('*.py')):
            if '__pycache__' not in path.parts:
                zf.write(path, f'{PIPELINE_PACKAGE}/{path.relative_to(directory).as_posix()}')
        if not (directory / '__init__.py').exists():
            zf.writestr(f'{PIPELINE_PACKAGE}/__init__.py', '')
    return target


def _read_result(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text(encoding='utf-8'))
    except (OSError, ValueError):
        return {}
    return report if isinstance(report, dict) else {}


def _error_from_log(log_path: Path, exit_code: int | None) -> str:
    """The job left no result (Spark itself failed): the last error line of its log says why."""
    lines = [line.strip() for line in tail_lines(log_path, _ERROR_SCAN_LINES)]
    errors = [line for line in lines if _ERROR_LINE.search(line) and not line.startswith('at ')]
    last = errors[-1] if errors else (lines[-1] if lines else '')
    return f'spark-submit exited with code {exit_code}' + (f': {last}' if last else '')
