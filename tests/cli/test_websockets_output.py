"""``conduit pubsub websockets`` on its own: what it asks the admin API, and how it prints the answer.

The admin API is replaced by a recorded answer; tests/websocket/test_cli.py runs the same
command against a live server.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from runtime import cli as cli_module
from runtime.cli import pubsub as pubsub_cli

pytestmark = pytest.mark.unit

ANSWER = {'is_ok': True, 'totals': {'subscriptions': 2, 'connected': 1}, 'websockets': [
    {'sub_id': 12, 'security': 'browser', 'pattern': 'crm.customer.created.notifications.for.the.sales.department',
     'is_active': True, 'queue_depth': 40, 'connected': True, 'owner': 'worker-host-7:4242:9f3ab0c1',
     'peer': '10.0.0.7:50211', 'window': 100, 'in_flight': 7, 'connected_at': 1.7e9,
     'connected_at_iso': '2023-11-14T22:13:20+00:00', 'last_active_at': 1.7e9,
     'last_active_at_iso': '2023-11-14T22:13:20+00:00', 'idle_secs': 3.2},
    {'sub_id': 13, 'security': 'mobile', 'pattern': 'alerts.*', 'is_active': True, 'queue_depth': 0,
     'connected': False, 'owner': '', 'peer': '', 'window': 5, 'in_flight': 0, 'connected_at': None,
     'connected_at_iso': None, 'last_active_at': 1.7e9, 'last_active_at_iso': '2023-11-14T22:13:20+00:00',
     'idle_secs': 7500.0}]}


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The admin API calls the command makes; each is answered with ANSWER."""
    made: list[tuple[str, str]] = []

    def call(ctx: Any, method: str, path: str, body: Any = None, timeout: float = 30.0) -> dict[str, Any]:
        made.append((method, path))
        return ANSWER
    monkeypatch.setattr(pubsub_cli, 'call', call)
    return made


def _run(*args: str) -> str:
    result = CliRunner().invoke(cli_module.main, ['--url', 'http://127.0.0.1:1', 'pubsub', 'websockets', *args])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_table_names_every_column_and_keeps_names_whole(calls: list[tuple[str, str]]) -> None:
    out = _run()
    assert calls == [('GET', '/admin/pubsub/websockets')]
    header = out.splitlines()[1]
    for title in ('id', 'security', 'pattern', 'connected', 'worker', 'peer', 'window', 'in-flight', 'queue depth',
                  'last activity'):
        assert title in header, header
    # Piped output keeps what users copy whole: the pattern and the worker id.
    assert 'crm.customer.created.notifications.for.the.sales.department' in out
    assert 'worker-host-7:4242:9f3ab0c1' in out and '10.0.0.7:50211' in out
    assert '3s ago' in out and '2h 05m ago' in out
    assert '2 WebSocket subscription(s), 1 connected' in out


def test_filters_go_to_the_admin_api(calls: list[tuple[str, str]]) -> None:
    _run('--security', 'mobile app', '--connected')
    _run('--not-connected')
    assert calls == [('GET', '/admin/pubsub/websockets?security=mobile+app&connected=true'),
                     ('GET', '/admin/pubsub/websockets?connected=false')]


def test_json_prints_the_answer_as_it_is(calls: list[tuple[str, str]]) -> None:
    assert json.loads(_run('--json')) == ANSWER


@pytest.mark.parametrize('secs, shown', [(0, '0s'), (59.9, '59s'), (61, '1m 01s'), (3600, '1h 00m'),
                                         (90061, '1d 01h'), (-5, '0s')])
def test_ages(secs: float, shown: str) -> None:
    assert pubsub_cli.age(secs) == shown
