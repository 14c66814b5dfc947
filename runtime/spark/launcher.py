"""The script spark-submit runs for every Conduit job: it calls one pipeline's main(args).

Usage (built by ``runtime.spark.submit.SparkSubmitter``)::

    spark-submit ... launcher.py --pipeline NAME --result RESULT.json -- ARGS...

It imports ``spark_pipeline.NAME`` (from the zip given with --py-files), calls ``main(ARGS)``
and writes ``{"ok": true, "result": <what main returned>}`` or ``{"ok": false, "error": "Type:
message", "traceback": "..."}`` to RESULT.json, then stops the Spark session if the pipeline left
one running. The exit code is 0 on success, 1 otherwise. Standard library only: it runs in the
driver's interpreter, outside the server, and must not import the runtime.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
import traceback
from typing import Any

#: Longest error text written to the result file.
MAX_ERROR_CHARS = 4000


def _parse(argv: list[str]) -> tuple[str, str, list[str]]:
    if '--' in argv:
        split = argv.index('--')
        own, args = argv[:split], argv[split + 1:]
    else:
        own, args = argv, []
    options = dict(zip(own[::2], own[1::2], strict=False))
    if '--pipeline' not in options or '--result' not in options:
        raise SystemExit('usage: launcher.py --pipeline NAME --result FILE -- ARGS...')
    return options['--pipeline'], options['--result'], args


def _write(path: str, report: dict[str, Any]) -> None:
    tmp = f'{path}.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        json.dump(report, f, default=str)
    os.replace(tmp, path)


def _stop_spark() -> None:
    try:
        from pyspark.sql import SparkSession
        session = SparkSession.getActiveSession()
        if session is not None:
            session.stop()
    except Exception:  # the outcome is already decided; stopping is best effort
        traceback.print_exc()


def main(argv: list[str]) -> int:
    """Run the pipeline named in argv; returns the process exit code."""
    pipeline, result_path, args = _parse(argv)
    started = time.time()
    print(f'conduit: running pipeline {pipeline} with arguments {args}', flush=True)
    try:
        module = importlib.import_module(f'spark_pipeline.{pipeline}')
        result = module.main(args)
        report: dict[str, Any] = {'ok': True, 'result': result}
    except BaseException as e:  # SystemExit and KeyboardInterrupt of a pipeline are failures too
        if isinstance(e, SystemExit) and e.code in (0, None):
            report = {'ok': True, 'result': None}
        else:
            tb = traceback.format_exc()
            print(tb, file=sys.stderr, flush=True)
            message = f'{type(e).__name__}: {e}'.strip()
            report = {'ok': False, 'error': message[:MAX_ERROR_CHARS], 'traceback': tb[-MAX_ERROR_CHARS:]}
    finally:
        _stop_spark()
    report['duration_secs'] = round(time.time() - started, 3)
    _write(result_path, report)
    outcome = 'succeeded' if report['ok'] else f"failed: {report['error']}"
    print(f'conduit: pipeline {pipeline} {outcome} in {report["duration_secs"]} s', flush=True)
    return 0 if report['ok'] else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
