"""A real server under attack: one per module, on SQLite (and PostgreSQL where a test asks for db_url).

The server of ``target`` has a Basic Auth definition with pub/sub permissions, a topic, a secured
and an unsecured channel, and an echo service. After each module, ``target``'s log is checked: an
attack may be answered with a 4xx and at most one log line, never with a traceback or an ERROR line.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.live_server import LiveServer

#: The credentials of the security definition every target server has.
USER = 'sec-user'
PASSWORD = 'sec-password-1'

OBJECTS = f'''
security:
  - name: sec.def
    type: basic_auth
    username: {USER}
    password: {PASSWORD}
pubsub_topic:
  - name: sec.topic
    has_gd: true
  - name: sec.full
    has_gd: true
    max_depth_gd: 5
    on_max_depth: reject
    depth_check_freq: 100
pubsub_permission:
  - security: sec.def
    pub: ["sec.**"]
    sub: ["sec.**"]
channel_rest:
  - name: sec.open
    service: sec.echo
    url_path: /api/sec/open
    data_format: json
  - name: sec.closed
    service: sec.echo
    url_path: /api/sec/closed
    data_format: json
    security: sec.def
'''

ECHO = '''
from runtime import Service

class Echo(Service):
    name = 'sec.echo'

    def handle(self):
        self.response.payload = {'echo': self.request.payload}
'''

#: Log lines an attack must never cause.
_FORBIDDEN_LOG = re.compile(r'Traceback|\bERROR\b|\bCRITICAL\b')


def forbidden_log_lines(log: str) -> list[str]:
    """Lines of a server log that show a traceback or an error."""
    return [line for line in log.splitlines() if _FORBIDDEN_LOG.search(line)]


def start_target(base: Path, db_url: str, extra_config: str = '') -> LiveServer:
    """A started server with the objects above."""
    server = LiveServer(base, db_url, extra_config=extra_config)
    server.write_objects('security.yaml', OBJECTS)
    server.write_module('sec_echo.py', ECHO)
    server.start()
    from tests.live_server import poll
    poll(lambda: server.request('POST', '/api/sec/open', json={}).status_code == 200, 20,
         message='the echo channel')
    return server


@pytest.fixture(scope='module')
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """One server for the whole module, on SQLite; its log must stay clean of errors."""
    base = tmp_path_factory.mktemp('target')
    # Attacks from one address would soon be answered 429 (tested on its own): let them all through.
    server = start_target(base, f'sqlite:///{base / "conduit.db"}', '[http]\nauth_max_failures = 0\n')
    yield server
    stop_and_check_log(server)


def stop_and_check_log(server: LiveServer) -> None:
    """Stop a server; fail if its log shows a traceback or an ERROR line."""
    server.stop()
    bad = forbidden_log_lines(server.log())
    assert not bad, 'attacks left errors in the server log:\n' + '\n'.join(bad[:20])
