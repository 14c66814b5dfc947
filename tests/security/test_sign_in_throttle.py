"""The sign-in throttle per (address, user name) and per user name across addresses (issue 33)."""

from __future__ import annotations

import base64
import http.client
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from runtime.errors import TooManyRequests
from runtime.http.auth import SignInThrottle, basic_username
from tests.live_server import LiveServer


def _throttle(pair: int = 3, per_user: int = 5, buckets: int = 4096) -> tuple[SignInThrottle, list[float]]:
    now = [1000.0]
    return SignInThrottle(pair, 60.0, per_user, buckets, clock=lambda: now[0]), now


def test_one_names_failures_do_not_block_another_name_from_the_same_address() -> None:
    throttle, _ = _throttle()
    for _ in range(3):
        throttle.failed('10.0.0.1', 'mallory')
    with pytest.raises(TooManyRequests):
        throttle.check('10.0.0.1', 'mallory')
    throttle.check('10.0.0.1', 'admin')  # the admin behind the same NAT still signs in
    throttle.check('10.0.0.2', 'mallory')  # the pair budget is per address


def test_a_name_is_throttled_across_rotating_addresses() -> None:
    throttle, now = _throttle()
    for n in range(5):
        throttle.check(f'127.0.0.{n + 2}', 'admin')
        throttle.failed(f'127.0.0.{n + 2}', 'admin')
    with pytest.raises(TooManyRequests) as e:
        throttle.check('127.0.0.99', 'admin')
    assert e.value.retry_after_secs == 61
    # Look-alike spellings of the name share its budget.
    with pytest.raises(TooManyRequests):
        throttle.check('127.0.0.98', 'ＡＤＭＩＮ')
    now[0] += 60.0
    throttle.check('127.0.0.99', 'admin')


def test_an_address_that_signed_in_keeps_its_own_budget_when_the_names_is_spent() -> None:
    # Whoever spends the admin's budget across addresses does not lock out the admin's own address.
    throttle, now = _throttle()
    throttle.succeeded('10.0.0.7', 'admin')
    for n in range(5):
        throttle.failed(f'127.0.0.{n + 2}', 'admin')
    with pytest.raises(TooManyRequests):
        throttle.check('127.0.0.99', 'admin')
    throttle.check('10.0.0.7', 'ADMIN')
    # Its own pair budget still holds.
    for _ in range(3):
        throttle.failed('10.0.0.7', 'admin')
    with pytest.raises(TooManyRequests):
        throttle.check('10.0.0.7', 'admin')


def test_unknown_and_known_names_are_counted_alike() -> None:
    # The throttle is never told which names exist: the same calls give the same answers.
    for name in ('admin', 'never-existed-4711'):
        throttle, _ = _throttle()
        for _ in range(3):
            throttle.failed('10.0.0.1', name)
        with pytest.raises(TooManyRequests):
            throttle.check('10.0.0.1', name)


def test_memory_is_fixed_and_a_flood_neither_resets_nor_blocks_everyone() -> None:
    throttle, _ = _throttle(pair=10, per_user=100, buckets=65536)
    size = throttle.nbytes()
    for _ in range(10):
        throttle.failed('10.0.0.1', 'victim')
    # A flood of never-existing names from rotating addresses: memory stays what it was...
    for n in range(20_000):
        throttle.failed(f'10.{n // 65536}.{n // 256 % 256}.{n % 256}', f'ghost-{n}')
    assert throttle.nbytes() == size
    # ...the victim's spent budget is not reset by it...
    with pytest.raises(TooManyRequests):
        throttle.check('10.0.0.1', 'victim')
    # ...and names without failures of their own still pass (shared buckets over-count only rarely).
    blocked = 0
    for n in range(200):
        try:
            throttle.check('192.168.1.1', f'user-{n}')
        except TooManyRequests:
            blocked += 1
    assert blocked <= 2


def test_a_header_without_a_readable_name_counts_under_the_empty_name() -> None:
    assert basic_username('Basic !!!') == ''
    assert basic_username(None) == ''
    assert basic_username('Basic ' + base64.b64encode(b'crm:pw').decode()) == 'crm'


def _get(server: LiveServer, source: str, user: str, password: str) -> int:
    conn = http.client.HTTPConnection('127.0.0.1', server.port, timeout=10, source_address=(source, 0))
    try:
        token = base64.b64encode(f'{user}:{password}'.encode()).decode()
        conn.request('GET', '/admin/status', headers={'Authorization': f'Basic {token}'})
        answer = conn.getresponse()
        answer.read()
        return answer.status
    finally:
        conn.close()


@pytest.fixture(scope='module')
def throttled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real server with a small throttle: 3 failures per (address, name), 5 per name."""
    base: Path = tmp_path_factory.mktemp('throttled')
    server = LiveServer(base, f'sqlite:///{base / "conduit.db"}',
                        env={'CONDUIT_HTTP_AUTH_MAX_FAILURES': '3', 'CONDUIT_HTTP_AUTH_MAX_FAILURES_PER_USER': '5',
                             'CONDUIT_DASHBOARD_VIEWER_PASSWORD': 'viewer-secret-pw'})
    server.start()
    yield server
    server.stop()


def test_live_admin_signs_in_after_another_names_429_from_the_same_address(throttled: LiveServer) -> None:
    user, password = throttled.admin
    statuses = [_get(throttled, '127.0.0.1', 'mallory', 'wrong') for _ in range(4)]
    assert statuses == [401, 401, 401, 429]
    assert _get(throttled, '127.0.0.1', user, password) == 200


def test_live_rotating_addresses_are_throttled_per_name(throttled: LiveServer) -> None:
    statuses = [_get(throttled, f'127.0.0.{n}', 'rotator', 'wrong') for n in range(10, 17)]
    assert statuses == [401] * 5 + [429] * 2


def test_live_an_attacker_spending_the_admins_budget_does_not_lock_out_the_admins_address(
        throttled: LiveServer) -> None:
    user, password = throttled.admin
    assert _get(throttled, '127.0.0.40', user, password) == 200
    statuses = [_get(throttled, f'127.0.0.{n}', user, 'wrong') for n in range(50, 57)]
    assert statuses == [401] * 5 + [429] * 2
    assert _get(throttled, '127.0.0.40', user, password) == 200
    assert _get(throttled, '127.0.0.41', user, password) == 429  # an address that never signed in waits


def test_live_admin_signs_in_to_the_dashboard_after_another_names_429_from_the_same_address(
        throttled: LiveServer) -> None:
    def form(username: str, password: str) -> int:
        return requests.post(throttled.url + '/dashboard/sign-in', data={'username': username, 'password': password},
                             allow_redirects=False, timeout=10).status_code
    assert [form('mallory-dash', 'no') for _ in range(4)] == [200, 200, 200, 429]
    assert form(*throttled.admin) == 303
