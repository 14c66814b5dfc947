"""A browser page subscribes over WebSocket and shows what is published: headless Chromium, a real server.

The page is plain JavaScript, as the README's browser example: ``new WebSocket(...)``, a ``hello``
frame (a browser cannot set the Basic Auth header), ``subscribe``, each message's data put into the
DOM and acknowledged. It is served by a small HTTP server of its own on another loopback port, so the
browser sends a cross-origin ``Origin`` header as a real page would. Chromium is Debian's package,
installed by ``tests.browser.ensure_chromium`` when missing, and driven through the DevTools protocol.
"""

from __future__ import annotations

import functools
import http.server
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
import requests

from tests.browser import BrowserError, Chromium, ensure_chromium
from tests.live_server import LiveServer, poll
from tests.websocket_peer import provision, rest_publish

SUBSCRIBER = ('browser-sub', 'browser-sub-pw-1')
PUBLISHER = ('browser-pub', 'browser-pub-pw-2')

PAGE = '''<!doctype html>
<html>
<head><meta charset="utf-8"><title>connecting</title></head>
<body>
<p id="state">connecting</p>
<ul id="messages"></ul>
<script>
const params = new URLSearchParams(location.search);
const ws = new WebSocket(params.get('ws'));
const state = document.getElementById('state');
window.acked = 0;
ws.onopen = () => {
  ws.send(JSON.stringify({action: 'hello', id: 'hello', username: params.get('user'),
                          password: params.get('password')}));
};
ws.onmessage = (event) => {
  const frame = JSON.parse(event.data);
  if (frame.action === 'authenticated') {
    ws.send(JSON.stringify({action: 'subscribe', id: 'sub', topic: params.get('topic'), window: 10}));
  } else if (frame.action === 'subscribed') {
    state.textContent = 'subscribed';
    state.dataset.subKey = frame.sub_key;
  } else if (frame.action === 'message') {
    const item = document.createElement('li');
    item.textContent = typeof frame.data === 'string' ? frame.data : JSON.stringify(frame.data);
    item.dataset.msgId = frame.meta.msg_id;
    document.getElementById('messages').appendChild(item);
    ws.send(JSON.stringify({action: 'ack', id: 'ack-' + frame.ack_id, ack_ids: [frame.ack_id]}));
  } else if (frame.action === 'acked') {
    window.acked += frame.acked;
  } else if (frame.action === 'error') {
    state.textContent = 'error ' + frame.status + ': ' + frame.details;
  }
};
ws.onclose = (event) => { state.textContent = 'closed ' + event.code; };
</script>
</body>
</html>
'''


@pytest.fixture(scope='module')
def chromium_binary() -> str:
    """Debian's chromium, installed when missing (a failure to install fails in CI, skips elsewhere)."""
    try:
        return ensure_chromium()
    except BrowserError as e:
        if os.environ.get('CI'):
            pytest.fail(f'headless Chromium is required in CI: {e}')
        pytest.skip(f'no Chromium: {e}')


@pytest.fixture
def page_server(tmp_path: Path) -> Iterator[str]:
    """The page, served over HTTP from a loopback port of its own; its base URL."""
    root = tmp_path / 'site'
    root.mkdir()
    (root / 'page.html').write_text(PAGE, encoding='utf-8')

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
            pass

    httpd = http.server.ThreadingHTTPServer(('127.0.0.1', 0), functools.partial(Quiet, directory=str(root)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f'http://127.0.0.1:{httpd.server_address[1]}'
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@pytest.fixture
def browser(chromium_binary: str, tmp_path: Path) -> Iterator[Chromium]:
    """A started headless Chromium, killed at the end."""
    chromium = Chromium(chromium_binary).start()
    try:
        yield chromium
    finally:
        chromium.close()


def test_the_devtools_driver_on_a_static_page(browser: Chromium, tmp_path: Path) -> None:
    page = tmp_path / 'static.html'
    page.write_text('<title>static</title><p id="p">before</p><script>setTimeout(() => {'
                    'document.getElementById("p").textContent = "after"; console.log("changed")}, 200)</script>')
    browser.navigate(page.as_uri())
    assert browser.evaluate('document.title') == 'static'
    assert browser.wait_for('document.getElementById("p").textContent === "after"')
    assert browser.evaluate('Promise.resolve(6 * 7)') == 42
    with pytest.raises(BrowserError, match='threw'):
        browser.evaluate('no_such_name.x')
    with pytest.raises(BrowserError, match='not seen within'):
        browser.wait_for('false', timeout=0.5, what='never')
    assert 'changed' in browser.console()
    assert browser.screenshot(tmp_path / 'static.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def test_a_browser_page_subscribes_with_hello_and_shows_a_published_message(
        server_factory: Callable[..., LiveServer], page_server: str, browser: Chromium, tmp_path: Path) -> None:
    server = server_factory().start()
    provision(server, [('browser.subscriber', *SUBSCRIBER), ('browser.publisher', *PUBLISHER)],
              [{'name': 'news.flash'}],
              {'browser.subscriber': {'pub': [], 'sub': ['news.*']},
               'browser.publisher': {'pub': ['news.*'], 'sub': []}})
    query = urlencode({'ws': f'ws://127.0.0.1:{server.port}/pubsub/ws', 'user': SUBSCRIBER[0],
                       'password': SUBSCRIBER[1], 'topic': 'news.flash'})
    try:
        browser.navigate(f'{page_server}/page.html?{query}')
        state = browser.wait_for("document.getElementById('state').textContent !== 'connecting' && "
                                 "document.getElementById('state').textContent", what='the page subscribed')
        assert state == 'subscribed', f'the page says {state!r}; server log:\n{server.log()[-3000:]}'

        msg_id = rest_publish(server, PUBLISHER, 'news.flash', 'Hello from Conduit ✓')
        shown = browser.wait_for("Array.from(document.querySelectorAll('#messages li'))"
                                 ".map(li => [li.textContent, li.dataset.msgId])", what='the message in the page')
        assert shown == [['Hello from Conduit ✓', msg_id]]
        rest_publish(server, PUBLISHER, 'news.flash', {'headline': 'second'})
        browser.wait_for("document.querySelectorAll('#messages li').length === 2", what='the second message')
        assert browser.evaluate("document.querySelectorAll('#messages li')[1].textContent") == '{"headline":"second"}'
        # The page acknowledged both: its subscription's queue empties.
        browser.wait_for('window.acked === 2', what='both messages acknowledged')

        def depths() -> list[int]:
            subs = requests.get(f'{server.url}/admin/subscriptions', auth=server.admin, timeout=10).json()
            return [s['queue_depth'] for s in subs['subscriptions'] if s['security'] == 'browser.subscriber']
        poll(lambda: depths() == [0], message='the page\'s subscription emptied')
    except (AssertionError, BrowserError):
        try:
            browser.screenshot(tmp_path / 'page.png')
        except BrowserError:
            pass
        raise
