"""Signing in and out of the dashboard in a real browser, as the admin and as the viewer.

Every test shares the module's server (one per backend): none needs a fresh one, signing out ends
only the test's own session, and the one topic made has a name no other test uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.dashboard.conftest import PHONE, VIEWER_USER, BrowserErrors
from tests.live_server import LiveServer


def test_sign_in_and_out(shared_dash_page: Callable[..., Any], shared_dash_server: LiveServer) -> None:
    page = shared_dash_page(shared_dash_server, None)
    page.goto(shared_dash_server.url + '/dashboard/?from=bookmark')
    assert '/dashboard/sign-in' in page.url  # no session: the form, coming back to the page asked for
    page.fill('#username', 'admin')
    page.fill('#password', 'test-admin-password')
    page.click('button[type=submit]')
    page.wait_for_url('**/dashboard/?from=bookmark')
    assert page.inner_text('.user .actor') == 'admin'
    assert page.inner_text('.user .role') == 'admin'
    assert page.locator('nav#nav a[aria-current=page]').inner_text() == 'Overview'
    page.click('text=Sign out')
    page.wait_for_url('**/dashboard/sign-in')
    page.goto(shared_dash_server.url + '/dashboard/')
    assert '/dashboard/sign-in' in page.url


def test_wrong_password_answers_the_form_again(shared_dash_page: Callable[..., Any],
                                               shared_dash_server: LiveServer) -> None:
    page = shared_dash_page(shared_dash_server, None)
    page.goto(shared_dash_server.url + '/dashboard/sign-in')
    page.fill('#username', 'admin')
    page.fill('#password', 'not-the-password')
    page.click('button[type=submit]')
    message = page.inner_text('[role=alert]')
    assert 'do not match' in message and 'password is wrong' not in message
    assert page.input_value('#username') == 'admin'
    assert page.input_value('#password') == ''
    page.fill('#username', 'nobody')
    page.fill('#password', 'x')
    page.click('button[type=submit]')
    # The form answered again (the same alert is on the page being left): its user name is the one just sent.
    page.wait_for_selector('#username[value="nobody"]')
    assert page.inner_text('[role=alert]') == message  # the same words, whichever part was wrong


def test_viewer_sees_no_change_buttons_and_the_api_refuses(shared_viewer_page: Any,
                                                           browser_errors: BrowserErrors) -> None:
    page = shared_viewer_page
    assert page.inner_text('.user .actor') == VIEWER_USER
    assert page.inner_text('.user .role') == 'viewer'
    assert 'change nothing' in page.inner_text('.read-only-note')
    browser_errors.allow('403')
    outcome = page.evaluate("""() => Dash.api('POST', '/topics', {name: 'from.viewer'})
                                   .then(() => 'created', e => e.status + ' ' + e.message)""")
    assert outcome.startswith('403') and 'viewer' in outcome


def test_a_change_without_the_csrf_token_is_refused(shared_admin_page: Any, browser_errors: BrowserErrors) -> None:
    browser_errors.allow('403')
    page = shared_admin_page
    status = page.evaluate("""() => fetch('/dashboard/api/topics', {method: 'POST',
        headers: {'Content-Type': 'application/json'}, body: JSON.stringify({name: 'no.token'})})
        .then(r => r.status)""")
    assert status == 403
    created = page.evaluate("() => Dash.api('POST', '/topics', {name: 'with.token'}).then(a => a.topic.name)")
    assert created == 'with.token'


def test_the_layout_fits_a_phone(shared_dash_page: Callable[..., Any], shared_dash_server: LiveServer) -> None:
    page = shared_dash_page(shared_dash_server, 'admin', viewport=PHONE)
    assert page.evaluate('document.documentElement.scrollWidth') <= PHONE['width']
    assert not page.is_visible('nav#nav a[href="/dashboard/audit"]')
    page.click('.nav-toggle')
    assert page.is_visible('nav#nav a[href="/dashboard/audit"]')
    page.keyboard.press('Tab')
