"""Stale answers in a real browser: an older load of a list, answered last, must not draw over the newer one.

A page loads its lists from its poll and again after the user's actions (search, delete...). Here the
answer of one request of a list is held back with ``page.route`` (``Held``), a newer load of the same list
is made and drawn, then the held answer is delivered (or a 500 instead) and the page must keep showing the
newer state:

- the topics page: a search answered before the older unfiltered poll answer;
- the scheduler page: a job deleted, then a poll answer fetched before the delete (the row came back);
- a stale failure shows no error: neither the topics page's banner nor the services page's error text;
- and the other way round, a failure the user caused (Next on the topics, queues or a topic's waiting
  messages) does show one.

Every test shares the module's server (one per backend): the topics, jobs and definitions each makes
are named with its own ``tag`` (or only it uses them), and what each asserts is about its own names
or the page's own state; its pages are closed at its end, long before the server stops.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
from playwright.sync_api import APIResponse, Page, Request, Route, expect

from tests.live_server import LiveServer

SHORT = 15_000  # ms a browser expectation waits
STAYS_SECS = 1.5  # how long the newer state must stay once the older answer was delivered (polls: every 5 s)


class Held:
    """Holds back the answer of the first GET matching url (a regex) and match(request), until release().

    The server answers the held request at once (its answer is the state before what the test does next);
    only its delivery to the page is held back.
    """

    def __init__(self, page: Page, url: str, match: Callable[[Request], bool] = lambda r: True) -> None:
        self.page = page
        self.match = match
        self.armed = False
        self.route: Route | None = None
        self.answer: APIResponse | None = None
        page.route(re.compile(url), self._handle)

    def arm(self) -> Held:
        """Hold the next matching request (none is held before)."""
        self.armed = True
        return self

    def _handle(self, route: Route) -> None:
        if self.armed and route.request.method == 'GET' and self.match(route.request):
            self.armed = False
            self.answer = route.fetch()
            self.route = route
            return
        route.continue_()

    def wait(self, timeout_secs: float = 15.0) -> Request:
        """Wait until a request is held; that request."""
        deadline = time.monotonic() + timeout_secs
        while self.route is None:
            assert time.monotonic() < deadline, 'no request was held'
            self.page.wait_for_timeout(50)
        return self.route.request

    def release(self, status: int | None = None) -> None:
        """Deliver the held answer (or, given a status, an error instead), and wait until the page has it."""
        assert self.route is not None and self.answer is not None
        request = self.route.request
        with self.page.expect_event('requestfinished', predicate=lambda r: r is request):
            if status is None:
                self.route.fulfill(response=self.answer)
            else:
                self.route.fulfill(status=status, content_type='application/json',
                                   body='{"details": "the stale call failed"}')


def _stays(page: Page, expression: str, secs: float = STAYS_SECS) -> None:
    """The JavaScript expression is true now and stays true for secs (an older answer would draw meanwhile)."""
    deadline = time.monotonic() + secs
    while True:
        assert page.evaluate(expression), f'no longer true: {expression}'
        if time.monotonic() > deadline:
            return
        page.wait_for_timeout(100)


def _error_banners(page: Page) -> list[str]:
    return page.locator('#notify .notice.error').all_inner_texts()


TOPIC_LINKS = "[...document.querySelectorAll('#topics-table a')].map(a => a.textContent)"


def _topics_page_with_the_first_load_held(server: LiveServer, dash_page: Callable[..., Page],
                                          tag: str) -> tuple[Page, Held, str, str]:
    """The topics page, its poll's first load held and a search for beta drawn; the page, the hold, alpha, beta."""
    # Named to sort before the other tests' topics: alpha is on the first page the poll loads.
    alpha, beta = f'a.stale.{tag}.alpha', f'a.stale.{tag}.beta'
    for name in (alpha, beta):
        server.admin_json('POST', '/admin/topics', 201, json={'name': name})
    page = dash_page(server, 'admin')
    # The poll's first load (no search) is held back.
    held = Held(page, r'/dashboard/api/topics\?', lambda r: 'q=' not in r.url).arm()
    page.goto('/dashboard/topics')
    held.wait()
    # The held answer lists alpha: were it drawn over the search, alpha would show.
    assert held.answer is not None and alpha in held.answer.text()
    page.fill('#topics-q', beta)
    page.click('#topics-search button[type=submit]')
    expect(page.locator('#topics-table')).to_contain_text(beta, timeout=SHORT)
    assert alpha not in page.evaluate(TOPIC_LINKS)
    return page, held, alpha, beta


def test_an_older_poll_answer_does_not_draw_over_a_search(shared_dash_server: LiveServer,
                                                          shared_dash_page: Callable[..., Page], tag: str) -> None:
    page, held, alpha, beta = _topics_page_with_the_first_load_held(shared_dash_server, shared_dash_page, tag)
    held.release()
    # The unfiltered answer (both topics) arrived last: the list still shows what was searched.
    _stays(page, f"{TOPIC_LINKS}.includes('{beta}') && !{TOPIC_LINKS}.includes('{alpha}')")
    assert not _error_banners(page)


def test_an_older_poll_answer_that_fails_shows_no_error_banner(shared_dash_server: LiveServer,
                                                               shared_dash_page: Callable[..., Page],
                                                               browser_errors: Any, tag: str) -> None:
    browser_errors.allow(r'status of 500')  # the held call's answer, logged by the browser
    page, held, _alpha, beta = _topics_page_with_the_first_load_held(shared_dash_server, shared_dash_page, tag)
    held.release(status=500)
    _stays(page, "!document.querySelector('#notify .notice.error')")
    assert beta in page.evaluate(TOPIC_LINKS)
    assert not _error_banners(page)


def test_a_deleted_job_is_not_drawn_again_by_an_older_poll_answer(shared_dash_server: LiveServer,
                                                                  shared_dash_page: Callable[..., Page]) -> None:
    # No other test here makes jobs: both are on the first page of the scheduler's list.
    for name in ('stale.kept', 'stale.deleted'):
        shared_dash_server.admin_json('POST', '/admin/jobs', 201, json={
            'name': name, 'service': 'conduit.ping', 'job_type': 'interval_based', 'hours': 1})
    page = shared_dash_page(shared_dash_server, 'admin')
    held = Held(page, r'/dashboard/api/jobs\?')
    page.goto('/dashboard/scheduler')
    row = page.locator('#jobs-table tr', has=page.get_by_role('button', name='stale.deleted', exact=True))
    expect(row).to_have_count(1, timeout=SHORT)
    page.get_by_role('button', name='stale.deleted', exact=True).click()
    expect(page.locator('#job-title')).to_have_text('stale.deleted', timeout=SHORT)

    # The next poll's list is held back: it was asked for before the delete, and still has the job.
    held.arm().wait()
    page.get_by_role('button', name='Delete', exact=True).click()
    page.get_by_role('dialog').get_by_role('button', name='Delete').click()
    expect(page.locator('#notify')).to_contain_text('Deleted job stale.deleted', timeout=SHORT)
    expect(row).to_have_count(0, timeout=SHORT)
    expect(page.get_by_role('button', name='stale.kept', exact=True)).to_have_count(1)

    held.release()
    _stays(page, "![...document.querySelectorAll('#jobs-table button')].some(b => b.textContent === 'stale.deleted')")
    expect(page.get_by_role('button', name='stale.kept', exact=True)).to_have_count(1)
    assert not _error_banners(page)


def test_an_older_failure_does_not_show_its_error_over_a_newer_list(shared_dash_server: LiveServer,
                                                                    shared_dash_page: Callable[..., Page],
                                                                    browser_errors: Any) -> None:
    browser_errors.allow(r'status of 500')  # the held call's answer, logged by the browser
    page = shared_dash_page(shared_dash_server, 'admin')
    held = Held(page, r'/dashboard/api/stats/services\?').arm()
    page.goto('/dashboard/services')
    held.wait()
    page.fill('#services-q', 'no-such-service-anywhere')
    page.click('#services-search button[type=submit]')
    expect(page.locator('#services-table')).to_contain_text('No deployed service matches.', timeout=SHORT)

    held.release(status=500)
    _stays(page, "document.getElementById('services-error').textContent === ''")
    expect(page.locator('#services-table')).to_contain_text('No deployed service matches.')
    assert not _error_banners(page)


def _fill_two_pages(server: LiveServer, list_name: str, tag: str) -> None:
    """51 rows (two pages of 50): topics; one pull subscription per topic; or messages waiting in a topic."""
    if list_name == 'topic':
        topic = f'paged.{tag}'
        server.admin_json('POST', '/admin/topics', 201, json={'name': topic})
        for n in range(51):  # no subscription: they wait in the topic
            server.admin_json('POST', '/admin/publish', json={'topic': topic, 'data': {'n': n}, 'has_gd': True})
        return
    if list_name == 'queues':
        server.admin_json('POST', '/admin/security', 201, json={'name': f'r.{tag}', 'username': f'r{tag}',
                                                                'password': 'pw'})
    for n in range(51):
        server.admin_json('POST', '/admin/topics', 201, json={'name': f'paged.{tag}.{n:02d}'})
        if list_name == 'queues':
            server.admin_json('POST', '/admin/subscriptions', 201,
                              json={'topic': f'paged.{tag}.{n:02d}', 'kind': 'pull', 'security': f'r.{tag}'})


#: list -> (its page, {tag} filled in; its pager; the API call of its second page; what the notice says)
PAGED = {
    'topics': ('/dashboard/topics', '#topics-pager', r'/dashboard/api/topics\?.*offset=50', 'Loading topics failed'),
    'queues': ('/dashboard/queues', '#queues-pager', r'/dashboard/api/queues\?.*offset=50', 'Loading queues failed'),
    'topic': ('/dashboard/topics/paged.{tag}', '#topic-waiting-pager', r'/dashboard/api/topic-messages\?.*after=',
              'Loading the waiting messages failed'),
}


@pytest.mark.parametrize('list_name', sorted(PAGED))
def test_another_page_of_a_list_that_fails_to_load_says_so(list_name: str, shared_dash_server: LiveServer,
                                                          shared_dash_page: Callable[..., Page],
                                                          browser_errors: Any, tag: str) -> None:
    path, pager, second_page, notice = PAGED[list_name]
    _fill_two_pages(shared_dash_server, list_name, tag)
    browser_errors.allow(r'status of 500')
    page = shared_dash_page(shared_dash_server, 'admin')
    page.goto(path.format(tag=tag))
    next_page = page.locator(f'{pager} button:has-text("Next")')
    expect(next_page).to_be_enabled(timeout=SHORT)
    page.route(re.compile(second_page), lambda route: route.fulfill(
        status=500, content_type='application/json', body='{"details": "the second page failed"}'))
    next_page.click()
    # The click's own load says what failed (before, its failure went unhandled; on the lists the poll
    # reloads, only the next poll, up to 5 s later, showed the bare message).
    expect(page.locator('#notify .notice.error')).to_contain_text(notice, timeout=SHORT)
