"""The server's log: one format for every line, the optional access log, failed sign-ins (rate-limited)."""

from __future__ import annotations

import base64
import logging
import re
import sys
from collections.abc import Callable

import pytest
import requests
from gunicorn.config import Config

from runtime.http.signin_log import FailedSignInLog, basic_username
from runtime.observability.log_lines import OneLineFormatter
from runtime.server import logger_class
from tests.live_server import LiveServer

#: A line in the default format: '2026-11-24 02:32:33,057 INFO 20841 gunicorn.error: Starting gunicorn'.
LINE = re.compile(r'^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ \d+ [\w.]+: ')


def _log_lines(server: LiveServer) -> list[str]:
    # The CLI's greeting comes first (where the server listens, where services go, the dashboard's sign-in).
    greeting = ('Conduit on ', 'Drop service modules into ', 'Dashboard: ')
    lines = [line for line in server.log().splitlines() if line.strip()]
    while lines and lines[0].startswith(greeting):
        lines.pop(0)
    return lines


def test_every_line_has_one_format_and_no_access_log_by_default(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(workers=2).start()
    assert requests.get(f'{server.url}/health', timeout=5).status_code == 200
    server.stop()
    lines = _log_lines(server)
    assert any(' gunicorn.error: Booting worker' in line for line in lines)
    assert any(' runtime.core: runtime started' in line for line in lines)
    assert [line for line in lines if not LINE.match(line)] == []
    assert 'MonkeyPatchWarning' not in server.log()
    assert 'gunicorn.access' not in server.log()


def test_access_log_and_failed_sign_ins(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(extra_config='[logging]\naccess_log = true\nauth_failures_per_minute = 2\n').start()
    assert requests.get(f'{server.url}/health', timeout=5).status_code == 200
    for n in range(5):
        answer = requests.get(f'{server.url}/admin/status', auth=('intruder', f'guess-pw-{n}'), timeout=5)
        assert answer.status_code == 401
    server.wait_for_log('"GET /admin/status HTTP/1.1" 401')
    server.stop()
    log = server.log()
    access = [line for line in _log_lines(server) if ' gunicorn.access: ' in line]
    assert any('"GET /health HTTP/1.1" 200' in line for line in access)
    assert all(LINE.match(line) for line in access)
    failed = [line for line in log.splitlines() if 'failed sign-in' in line]
    assert len(failed) == 2  # the budget of a minute; the rest are counted in the next line
    assert all("failed sign-in as 'intruder' from 127.0.0.1: GET '/admin/status'" in line for line in failed)
    assert all(' WARNING ' in line for line in failed)
    assert 'guess-pw' not in log


def test_failed_sign_ins_past_the_budget_are_counted_in_the_next_line(caplog: pytest.LogCaptureFixture) -> None:
    now = [1000.0]
    signins = FailedSignInLog(2, clock=lambda: now[0])
    header = 'Basic ' + base64.b64encode(b'ada\n2026 forged line:s3cret').decode()
    with caplog.at_level(logging.WARNING, logger='runtime.http.signin_log'):
        for _ in range(5):
            signins.record('10.0.0.1', header, 'POST', '/api/x')
        now[0] += 61
        signins.record('10.0.0.1', header, 'POST', '/api/x')
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 3
    assert messages[2].endswith('(3 more failed sign-in(s) not logged since the last line)')
    # The user name is quoted (no forged lines), the password never appears.
    assert all("as 'ada\\n2026 forged line'" in m and 's3cret' not in m for m in messages)


def test_only_the_user_name_of_a_basic_auth_header_is_read() -> None:
    assert basic_username('Basic YWRhOnB3') == 'ada'
    assert basic_username('Bearer abc') is None
    assert basic_username('Basic !!!') is None
    assert basic_username(None) is None


def _record(message: str, *args: object, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord('runtime.cluster.sync', logging.WARNING, __file__, 1, message, args, exc_info)  # type: ignore[arg-type]


def test_a_message_with_line_breaks_is_written_on_one_line() -> None:
    formatter = OneLineFormatter('%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s')
    error = "(psycopg.ProgrammingError) can't change 'autocommit' now\n(Background on this error at: …)"
    record = _record('sync poll failed: %s', error)
    line = formatter.format(record)
    assert '\n' not in line
    assert LINE.match(line)
    assert line.endswith("sync poll failed: (psycopg.ProgrammingError) can't change 'autocommit' now"
                         '\\n(Background on this error at: …)')
    # A value from outside cannot forge a record of its own; other handlers still get the message as logged.
    forged = _record('user %s', 'ada\r\n2026-11-25 03:41:52,919 ERROR 1 runtime.core: forged')
    assert '\n' not in formatter.format(forged) and '\r' not in formatter.format(forged)
    assert forged.message.endswith('\r\n2026-11-25 03:41:52,919 ERROR 1 runtime.core: forged')


def test_a_traceback_keeps_its_lines_after_the_record_line() -> None:
    try:
        raise KeyError('address')
    except KeyError:
        record = _record('handler failed', exc_info=sys.exc_info())
    lines = OneLineFormatter('%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s').format(record).splitlines()
    assert LINE.match(lines[0]) and lines[0].endswith('handler failed')
    assert lines[1] == 'Traceback (most recent call last):'
    assert lines[-1] == "KeyError: 'address'"


def test_gunicorn_lines_are_written_on_one_line_too(capsys: pytest.CaptureFixture[str]) -> None:
    config = Config()
    config.set('errorlog', '-')
    config.set('accesslog', '-')
    log = logger_class('%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s')(config)
    for handlers in (log.error_log.handlers, log.access_log.handlers):
        assert [type(h.formatter) for h in handlers] == [OneLineFormatter]
    log.error('worker %s: %s', 7, 'first\nsecond')
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and LINE.match(err[0]) and err[0].endswith('worker 7: first\\nsecond')
