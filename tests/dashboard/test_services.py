"""The services pages in a real browser: the searchable list with usage, a service's page with its source, input
and output, what uses it, and the invoke form (admins only).

Both tests share the module's server (one per backend, with fast stats flushes): each deploys its own
module, services, channel and topic, named with its own ``tag``, and searches for and counts only those.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.dashboard.polling import wait_until
from tests.live_server import LiveServer

FAST = '''
[stats]
heartbeat_secs = 0.5
flush_interval_secs = 0.5
'''

#: A module of two services, {tag} filled in by _deploy.
MODULE = '''
from runtime import Service


class Greet(Service):
    """Greets whoever it is told to."""

    name = 'pages.{tag}.greet'
    input = 'who',
    output = 'greeting',

    def handle(self):
        self.response.payload = {{'greeting': 'hello ' + self.request.input.who}}


class Other(Service):
    name = 'pages.{tag}.other'

    def handle(self):
        pass
'''


@pytest.fixture(scope='module')
def services_server(shared_dash_server_factory: Callable[..., LiveServer]) -> LiveServer:
    """The module's started dashboard server, its usage stats flushed fast."""
    return shared_dash_server_factory(extra_config=FAST)


def _deploy(server: LiveServer, tag: str) -> str:
    """Deploy this test's module, with a channel and a topic subscription of its greet service; that service."""
    greet = f'pages.{tag}.greet'
    server.admin_json('POST', '/admin/deploy', json={'file_name': f'pages_mod_{tag}.py',
                                                     'source': MODULE.format(tag=tag)})
    server.admin_json('POST', '/admin/channels', json={'name': f'greet-ch-{tag}', 'service': greet,
                                                       'url_path': f'/greet/{tag}'})
    server.admin_json('POST', '/admin/topics', json={'name': f'greetings.{tag}'})
    server.admin_json('POST', '/admin/subscriptions', json={'topic': f'greetings.{tag}', 'kind': 'service',
                                                            'service': greet})
    server.invoke(greet, {'who': 'warm-up'})
    return greet


def test_list_search_service_page_and_invoke(services_server: LiveServer, shared_dash_page: Callable[..., Any],
                                             tag: str) -> None:
    server = services_server
    greet = _deploy(server, tag)
    page = shared_dash_page(server, 'admin')
    page.goto('/dashboard/services')
    # Upper case: the search ignores case.
    page.fill('#services-q', f'PAGES.{tag.upper()}.')
    page.click('#services-search button[type=submit]')
    wait_until(page, "document.querySelectorAll('#services-table tbody tr').length === 2")
    # The warm-up call shows in the usage once flushed (the list refreshes itself).
    wait_until(page, "[...document.querySelectorAll('#services-table tbody tr')]"
                     f".some(r => r.cells[0].textContent === '{greet}' && r.cells[1].textContent === '1')",
               timeout_secs=20)
    page.fill('#services-q', 'no-such-service')
    page.click('#services-search button[type=submit]')
    page.wait_for_selector('#services-table >> text=No deployed service matches.')
    page.fill('#services-q', f'{tag}.greet')
    page.click('#services-search button[type=submit]')
    page.click(f'#services-table a:has-text("{greet}")')
    page.wait_for_url(f'**/dashboard/services/{greet}')

    assert 'Greets whoever it is told to.' in page.inner_text('#service')
    facts = page.inner_text('.facts')
    assert 'who' in facts and 'greeting' in facts and f'pages_mod_{tag}' in facts
    wait_until(page, "document.getElementById('service-source').textContent.includes('class Greet(Service)')")
    page.wait_for_selector(f'#service-channels >> text=greet-ch-{tag} (/greet/{tag})')
    assert f'greetings.{tag} (service)' in page.inner_text('#service-subscriptions')
    assert page.inner_text('#service-jobs') == 'No job.'

    page.fill('#invoke-payload', '{"who": "dashboard"}')
    page.click('#invoke-form button[type=submit]')
    wait_until(page, "document.getElementById('invoke-status').textContent === 'OK'")
    assert '"hello dashboard"' in page.inner_text('#invoke-response')
    assert page.inner_text('#invoke-time').endswith(' ms')

    # A payload that is not JSON is refused in the page, saying why; nothing is sent.
    page.fill('#invoke-payload', '{not json')
    page.click('#invoke-form button[type=submit]')
    page.wait_for_selector('#notify >> text=The payload is not JSON')


def test_unknown_service_and_viewer(services_server: LiveServer, shared_dash_page: Callable[..., Any],
                                    browser_errors: Any, tag: str) -> None:
    server = services_server
    greet = _deploy(server, tag)
    browser_errors.allow(r'status of 404')
    viewer = shared_dash_page(server, 'viewer')
    answer = viewer.goto('/dashboard/services/no.such.service')
    assert answer.status == 404 and 'no.such.service' in viewer.inner_text('main')
    viewer.goto(f'/dashboard/services/{greet}')
    wait_until(viewer, "document.getElementById('service-source').textContent.includes('class Greet')")
    assert viewer.query_selector('#invoke-form') is None and viewer.query_selector('form textarea') is None
    viewer.goto('/dashboard/services')
    viewer.wait_for_selector('#services-table tbody tr')
