"""The services pages in a real browser: the searchable list with usage, a service's page with its source, input
and output, what uses it, and the invoke form (admins only).
"""

from __future__ import annotations

from tests.dashboard.polling import wait_until
from tests.live_server import LiveServer

FAST = '''
[stats]
heartbeat_secs = 0.5
flush_interval_secs = 0.5
'''

MODULE = '''
from runtime import Service


class Greet(Service):
    """Greets whoever it is told to."""

    name = 'pages.greet'
    input = 'who',
    output = 'greeting',

    def handle(self):
        self.response.payload = {'greeting': 'hello ' + self.request.input.who}


class Other(Service):
    name = 'pages.other'

    def handle(self):
        pass
'''



def _deploy(server: LiveServer) -> None:
    server.admin_json('POST', '/admin/deploy', json={'file_name': 'pages_mod.py', 'source': MODULE})
    server.admin_json('POST', '/admin/channels', json={'name': 'greet-ch', 'service': 'pages.greet',
                                                    'url_path': '/greet'})
    server.admin_json('POST', '/admin/topics', json={'name': 'greetings'})
    server.admin_json('POST', '/admin/subscriptions', json={'topic': 'greetings', 'kind': 'service',
                                                         'service': 'pages.greet'})
    server.invoke('pages.greet', {'who': 'warm-up'})


def test_list_search_service_page_and_invoke(dash_server_factory, dash_page) -> None:
    server = dash_server_factory(extra_config=FAST)
    _deploy(server)
    page = dash_page(server, 'admin')
    page.goto('/dashboard/services')
    page.fill('#services-q', 'PAGES.')
    page.click('#services-search button[type=submit]')
    wait_until(page, "document.querySelectorAll('#services-table tbody tr').length === 2")
    # The warm-up call shows in the usage once flushed (the list refreshes itself).
    wait_until(page, "[...document.querySelectorAll('#services-table tbody tr')]"
                           ".some(r => r.cells[0].textContent === 'pages.greet' && r.cells[1].textContent === '1')",
                           timeout_secs=20)
    page.fill('#services-q', 'no-such-service')
    page.click('#services-search button[type=submit]')
    page.wait_for_selector('#services-table >> text=No deployed service matches.')
    page.fill('#services-q', 'greet')
    page.click('#services-search button[type=submit]')
    page.click('#services-table a:has-text("pages.greet")')
    page.wait_for_url('**/dashboard/services/pages.greet')

    assert 'Greets whoever it is told to.' in page.inner_text('#service')
    facts = page.inner_text('.facts')
    assert 'who' in facts and 'greeting' in facts and 'pages_mod' in facts
    wait_until(page, "document.getElementById('service-source').textContent.includes('class Greet(Service)')")
    page.wait_for_selector('#service-channels >> text=greet-ch (/greet)')
    assert 'greetings (service)' in page.inner_text('#service-subscriptions')
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


def test_unknown_service_and_viewer(dash_server_factory, dash_page, browser_errors) -> None:
    server = dash_server_factory()
    _deploy(server)
    browser_errors.allow(r'status of 404')
    viewer = dash_page(server, 'viewer')
    answer = viewer.goto('/dashboard/services/no.such.service')
    assert answer.status == 404 and 'no.such.service' in viewer.inner_text('main')
    viewer.goto('/dashboard/services/pages.greet')
    wait_until(viewer, "document.getElementById('service-source').textContent.includes('class Greet')")
    assert viewer.query_selector('#invoke-form') is None and viewer.query_selector('form textarea') is None
    viewer.goto('/dashboard/services')
    viewer.wait_for_selector('#services-table tbody tr')
