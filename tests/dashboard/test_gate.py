"""The dashboard gate's pure parts: where a sign-in may send the browser, which origins are this server's."""

from __future__ import annotations

import falcon.testing
import pytest

from runtime.http.dashboard.gate import safe_next, same_origin, sign_in_url
from runtime.pubsub.topics import matching_names

pytestmark = pytest.mark.unit


@pytest.mark.parametrize('path', ['/dashboard/', '/dashboard/topics', '/dashboard/topics/a.b?offset=50',
                                    '/dashboard/queues/7/messages', '/dashboard/topics/%2Fcustomer%2Fnew'])
def test_dashboard_paths_are_kept(path: str) -> None:
    assert safe_next(path) == path


@pytest.mark.parametrize('path', [None, '', '/', '/admin/status', '//evil.example', '///evil.example',
                                    'https://evil.example/dashboard/', '/dashboard/../admin', '/dashboard/./x',
                                    '/dashboard/%2e%2e/admin', '/dashboard//evil', '/\\evil.example',
                                    '/dashboard/\\..\\admin', 'javascript:alert(1)', '/dashboard/sign-in',
                                    '/dashboard/x\nSet-Cookie: a=b', '/dashboard/' + 'x' * 3000, '/dashboardx'])
def test_anything_else_goes_to_the_overview(path: str | None) -> None:
    assert safe_next(path) == '/dashboard/'


def test_sign_in_url_quotes_the_target() -> None:
    assert sign_in_url('/dashboard/topics?x=1&y=2') == '/dashboard/sign-in?next=/dashboard/topics%3Fx%3D1%26y%3D2'
    assert sign_in_url('//evil') == '/dashboard/sign-in?next=/dashboard/'


def _req(**headers: str) -> falcon.Request:
    return falcon.testing.create_req(host='127.0.0.1', port=17010, headers=headers)


def test_origins_are_compared_by_host_and_port() -> None:
    assert same_origin(_req())  # neither header: a non-browser client
    assert same_origin(_req(Origin='http://127.0.0.1:17010'))
    assert same_origin(_req(Origin='https://127.0.0.1:17010'))  # TLS ended by a proxy
    assert same_origin(_req(Referer='http://127.0.0.1:17010/dashboard/topics'))
    for headers in ({'Origin': 'http://127.0.0.1:17011'}, {'Origin': 'http://evil.example'}, {'Origin': 'null'},
                    {'Referer': 'http://evil.example/x'}, {'Origin': 'http://evil.example',
                                                           'Referer': 'http://127.0.0.1:17010/'}):
        assert not same_origin(_req(**headers)), headers


def test_matching_names_counts_and_pages() -> None:
    names = ['a.b', 'a.c', 'b.a', 'a.b.c', 'A.X', 'not a name#']
    assert matching_names('a.*', names, 10) == (3, ['a.b', 'a.c', 'A.X'])
    assert matching_names('a.**', names, 2, 1) == (4, ['a.c', 'a.b.c'])
    assert matching_names('zzz', names, 10) == (0, [])


def test_non_ascii_targets_go_to_the_overview() -> None:
    # Put into a Location header as they are, they made gunicorn answer 500.
    assert safe_next('/dashboard/\u4e2d') == '/dashboard/'
    assert safe_next('/dashboard/topics/%E4%B8%AD') == '/dashboard/topics/%E4%B8%AD'


class _CountingStore:
    def __init__(self) -> None:
        self.lookups = 0

    def lookup(self, token: str | None) -> None:
        self.lookups += 1
        return None


def test_a_request_with_many_session_cookies_costs_two_lookups_at_most() -> None:
    from runtime.http.dashboard.gate import SessionGate
    store = _CountingStore()
    cookies = '; '.join(f'conduit_session={i:043d}' for i in range(300))
    req = falcon.testing.create_req(headers={'Cookie': cookies})
    assert SessionGate(store).session_of(req) is None  # type: ignore[arg-type]
    assert store.lookups == 2


def test_only_tokens_of_the_shape_made_are_looked_up() -> None:
    from runtime.security.dashboard_sessions import TOKEN_SHAPE
    assert TOKEN_SHAPE.fullmatch('A' * 43) and TOKEN_SHAPE.fullmatch('a-b_' * 10 + 'xyz')
    assert not any(TOKEN_SHAPE.fullmatch(t) for t in ('A' * 42, 'A' * 44, 'A' * 42 + '!', '\u00e9' * 43, ''))
