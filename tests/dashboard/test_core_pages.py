"""The audit, security and channels pages in a real browser, as the admin and as the viewer.

The audit page, the viewer's and the phone's tests share the module's server (one per backend): what
each makes has names no other test uses, and the audit page finds its own entries among the others'.
The security and channels pages' tests start their own: they begin with an empty list (and the
pattern tester counts every topic; the channels test ends with none left); so does the test that
ends every session on its server, and reads the one audit entry of kind dashboard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import requests

from tests.dashboard.conftest import PHONE, VIEWER_PASSWORD, VIEWER_USER, BrowserErrors
from tests.live_server import LiveServer, poll


def _notice(page: Any) -> str:
    page.wait_for_selector('#notify .notice')
    return page.inner_text('#notify .notice >> nth=-1')


def test_security_page_creates_edits_and_tests_patterns(admin_page: Any, dash_server: LiveServer,
                                                        browser_errors: BrowserErrors) -> None:
    for name in ('orders.created', 'orders.paid', 'invoices.created'):
        assert dash_server.request('POST', '/admin/topics', json={'name': name}, auth=dash_server.admin).ok
    page = admin_page
    page.click('nav#nav >> text=Security')
    page.wait_for_selector('#defs-list .empty')
    page.click('summary:has-text("New definition")')
    page.fill('#new-name', 'crm.client')
    page.fill('#new-username', 'crm')
    page.fill('#new-password', 'crm-password-1')
    page.click('#def-create button[type=submit]')
    assert 'crm.client created' in _notice(page)
    page.wait_for_selector('#def-details:not([hidden])')
    page.fill('#permission-lines', 'pub=orders.*\nsub=invoices.**')
    page.click('#def-permissions button[type=submit]')
    poll(lambda: 'saved' in page.inner_text('#notify'), 10, message='permissions saved')
    grant = dash_server.request('GET', '/admin/security/crm.client/permissions', auth=dash_server.admin).json()
    assert grant['permissions']['pub'] == ['orders.*'] and grant['permissions']['sub'] == ['invoices.**']
    page.click('#def-toggle')
    page.click('dialog button:has-text("Deactivate")')
    poll(lambda: 'deactivated' in page.inner_text('#notify'), 10, message='deactivated')
    assert not dash_server.request('GET', '/admin/security/crm.client', auth=dash_server.admin).json()['security'][
        'is_active']
    page.fill('#def-new-password', 'crm-password-2')
    page.click('#def-password button[type=submit]')
    poll(lambda: 'Password of crm.client changed' in page.inner_text('#notify'), 10, message='password changed')
    # The pattern tester.
    page.fill('#pattern-tester input[name=pattern]', 'orders.*')
    page.click('#pattern-tester button')
    page.wait_for_selector('#pattern-matches td')
    assert page.inner_text('#pattern-total') == '2 topics match orders.*.'
    assert page.locator('#pattern-matches td').all_inner_texts() == ['orders.created', 'orders.paid']
    # Spaces alone pass the input's `required`: the page says a pattern is needed (it said nothing).
    page.fill('#pattern-tester input[name=pattern]', '   ')
    page.click('#pattern-tester button')
    poll(lambda: 'Enter a pattern to test' in page.inner_text('#notify'), 10, message='the empty pattern named')
    browser_errors.allow('status of 400')
    page.fill('#pattern-tester input[name=pattern]', 'a**')
    page.click('#pattern-tester button')
    poll(lambda: "Testing the pattern failed: topic pattern 'a**'" in page.inner_text('#notify'), 10,
         message='the refused pattern named')


def test_channels_page_creates_edits_and_deletes_rest_channels(admin_page: Any, dash_server: LiveServer,
                                                               browser_errors: BrowserErrors) -> None:
    page = admin_page
    page.goto(dash_server.url + '/dashboard/channels')
    page.wait_for_selector('#channels-list .empty')
    # The two lists are fetched apart: the WebSocket one may be drawn after the channels (seen in CI).
    poll(lambda: page.inner_text('#ws-list') == 'No WebSocket subscriptions.', 10, message='the empty WebSocket list')
    page.fill('#ch-name', 'ping.api')
    page.fill('#ch-service', 'conduit.ping')
    page.fill('#ch-path', '/api/dash/ping')
    page.check('input[name=methods][value=GET]')
    page.click('#channel-submit')
    poll(lambda: 'ping.api created' in page.inner_text('#notify'), 10, message='channel created')
    poll(lambda: dash_server.request('GET', '/api/dash/ping').status_code == 200, 10, message='the new channel')
    page.click('button[aria-label="Edit ping.api"]')
    page.fill('#ch-path', '/api/dash/ping2')
    page.click('#channel-submit')
    poll(lambda: 'ping.api saved' in page.inner_text('#notify'), 10, message='channel saved')
    page.wait_for_selector('#channels-list code:has-text("/api/dash/ping2")')
    # A refused change says why.
    browser_errors.allow('status of 400')
    page.fill('#ch-name', 'broken')
    page.fill('#ch-service', 'no.such.service')
    page.fill('#ch-path', '/api/broken')
    page.click('#channel-submit')
    poll(lambda: 'no deployed service' in page.inner_text('#notify'), 10, message='the refusal named')
    page.click('button[aria-label="Delete ping.api"]')
    page.click('dialog button:has-text("Delete")')
    poll(lambda: 'ping.api deleted' in page.inner_text('#notify'), 10, message='channel deleted')
    assert dash_server.request('GET', '/admin/channels', auth=dash_server.admin).json()['channels'] == []


def test_the_audit_page_lists_the_changes_made_here(shared_admin_page: Any, shared_dash_server: LiveServer) -> None:
    page, server = shared_admin_page, shared_dash_server
    assert server.request('POST', '/admin/topics', json={'name': 'made.by.api'}, auth=server.admin).ok
    created = page.evaluate("() => Dash.api('POST', '/topics', {name: 'made.here'}).then(a => a.topic.name)")
    assert created == 'made.here'
    page.click('nav#nav >> text=Audit')
    page.wait_for_selector('#audit-list td')
    rows = page.locator('#audit-list tbody tr').all_inner_texts()
    assert any('made.here' in r and 'dashboard' in r and 'admin' in r for r in rows), rows
    assert any('made.by.api' in r and 'api' in r for r in rows), rows
    page.select_option('#audit-filter select[name=source]', 'dashboard')
    page.click('#audit-filter button')
    poll(lambda: 'made.by.api' not in page.inner_text('#audit-list'), 10, message='filtered by source')
    page.click('#audit-list button:has-text("Show")')
    after = page.inner_text('.audit-details .diff')
    assert 'Before' in after and '(none)' in after and 'name: "made.here"' in after
    page.fill('#audit-filter input[name=actor]', 'nobody')
    page.click('#audit-filter button')
    page.wait_for_selector('#audit-list .empty')
    assert page.inner_text('#audit-list .empty') == 'No change matches these filters.'


def test_the_security_page_ends_every_session(admin_page: Any, dash_server: LiveServer) -> None:
    other = requests.Session()
    assert other.post(dash_server.url + '/dashboard/sign-in', allow_redirects=False, timeout=10,
                      data={'username': VIEWER_USER, 'password': VIEWER_PASSWORD}).status_code == 303
    page = admin_page
    page.goto(dash_server.url + '/dashboard/security')
    page.click('#end-sessions')
    page.click('dialog button:has-text("End every session")')
    page.wait_for_url('**/dashboard/sign-in**')
    assert other.get(dash_server.url + '/dashboard/', allow_redirects=False, timeout=10).status_code == 303
    entries = dash_server.request('GET', '/admin/audit?kind=dashboard', auth=dash_server.admin).json()['entries']
    assert [(e['action'], e['source']) for e in entries] == [('end-sessions', 'dashboard')]


def test_the_viewer_sees_no_change_controls(shared_viewer_page: Any, shared_dash_server: LiveServer) -> None:
    server = shared_dash_server
    assert server.request('POST', '/admin/security', auth=server.admin,
                          json={'name': 'seen.def', 'username': 'seen', 'password': 'pw-123456'}).ok
    assert server.request('POST', '/admin/channels', auth=server.admin,
                          json={'name': 'seen.ch', 'service': 'conduit.ping', 'url_path': '/api/seen'}).ok
    page = shared_viewer_page
    page.goto(server.url + '/dashboard/security')
    page.click('button[aria-label="Open seen.def"]')
    page.wait_for_selector('#def-details:not([hidden])')
    for selector in ('#def-create', '#def-toggle', '#def-password', '#def-permissions button', '#end-sessions'):
        assert page.locator(selector).count() == 0, selector
    assert page.get_attribute('#permission-lines', 'readonly') is not None
    page.goto(server.url + '/dashboard/channels')
    page.wait_for_selector('#channels-list td')
    assert page.locator('#channel-form').count() == 0
    assert page.locator('#channels-list button').count() == 0
    page.goto(server.url + '/dashboard/audit')
    page.wait_for_selector('#audit-list td')
    assert page.locator('main button:has-text("Delete")').count() == 0


def test_the_pages_fit_a_phone(shared_dash_page: Callable[..., Any], shared_dash_server: LiveServer) -> None:
    server = shared_dash_server
    page = shared_dash_page(server, 'admin', viewport=PHONE)
    # Every list the page fetches apart drawn (the channels page has three) before its width is measured.
    for path, ready in (('/dashboard/audit', ('#audit-list',)), ('/dashboard/security', ('#defs-list',)),
                        ('/dashboard/channels', ('#channels-list', '#ws-list', '#files-list'))):
        page.goto(server.url + path)
        for selector in ready:
            page.wait_for_selector(f'{selector} > *')
        assert page.evaluate('document.documentElement.scrollWidth') <= PHONE['width'], path
