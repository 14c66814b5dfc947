"""The overview page in a real browser: workers with heartbeat and leases, totals, the live rates chart
(plotly.js), the deepest queues, refreshed without a reload; readable on a phone.

Each test starts its own server (no shared one): the overview shows server-wide totals and queues, which
the first test counts exactly and the second expects empty.
"""

from __future__ import annotations

from tests.dashboard.conftest import PHONE
from tests.dashboard.polling import wait_until
from tests.live_server import LiveServer

#: Fast heartbeats and flushes, so the page has something to show at once.
FAST = '''
[stats]
heartbeat_secs = 0.5
flush_interval_secs = 0.5
'''

MODULE = '''
from runtime import Service


class Sink(Service):
    name = 'overview.sink'

    def handle(self):
        pass
'''



def _publish(server: LiveServer, topic: str, n: int) -> None:
    for i in range(n):
        server.admin_json('POST', '/admin/publish', json={'topic': topic, 'data': {'i': i}})


def test_overview_shows_workers_totals_rates_and_deepest_queues(dash_server_factory, dash_page) -> None:
    server = dash_server_factory(extra_config=FAST)
    server.admin_json('POST', '/admin/deploy', json={'file_name': 'overview_mod.py', 'source': MODULE})
    server.admin_json('POST', '/admin/topics', json={'name': 'overview.backlog'})
    sub = server.admin_json('POST', '/admin/subscriptions', json={'topic': 'overview.backlog', 'kind': 'service',
                                                               'service': 'overview.sink', 'is_active': False})
    sub_id = sub['subscription']['id']
    _publish(server, 'overview.backlog', 3)

    page = dash_page(server, 'admin')
    assert page.title().startswith('Overview')
    # Workers: this server's one worker, a fresh heartbeat.
    page.wait_for_selector('#workers table tbody tr')
    row = page.inner_text('#workers table tbody tr')
    assert ' s' in row and 'stale' not in row
    # Totals and the deepest queue, read from the API mirror.
    wait_until(page, "document.getElementById('total-waiting').textContent === '3'")
    assert int(page.inner_text('#total-topics').replace(',', '')) >= 1
    page.wait_for_selector(f'#deepest a[href="/dashboard/queues/{sub_id}"]')
    assert 'overview.backlog' in page.inner_text('#deepest')
    # The chart is drawn by plotly.js, with the four series.
    page.wait_for_selector('#rates-chart .main-svg')
    legend = page.inner_text('#rates-chart')
    for name in ('Published', 'Delivered', 'Failed', 'Dead-lettered'):
        assert name in legend
    traces = page.evaluate("document.getElementById('rates-chart').data.map(t => t.name)")
    assert traces == ['Published', 'Delivered', 'Failed', 'Dead-lettered']
    wait_until(page, "document.getElementById('rates-chart').data[0].y.some(v => v > 0)", timeout_secs=20)

    # New messages show without reloading the page (the totals are cached for a few seconds).
    page.evaluate('window.notReloaded = true')
    _publish(server, 'overview.backlog', 2)
    wait_until(page, "document.getElementById('total-waiting').textContent === '5'", timeout_secs=25)
    assert page.evaluate('window.notReloaded') is True


def test_overview_on_a_phone_and_for_a_viewer(dash_server_factory, dash_page) -> None:
    server = dash_server_factory(extra_config=FAST)
    phone = dash_page(server, 'viewer', viewport=PHONE)
    phone.wait_for_selector('#workers table')
    phone.wait_for_selector('#rates-chart .main-svg')
    # The deepest queues are fetched apart from the workers and the chart: 'Loading…' until their answer is drawn.
    wait_until(phone, "document.getElementById('deepest').innerText === 'Every queue is empty.'")
    assert phone.inner_text('#deepest') == 'Every queue is empty.'
    width = phone.evaluate('document.documentElement.scrollWidth')
    assert width <= PHONE['width'] + 1, f'the page is {width} px wide on a {PHONE["width"]} px phone'
