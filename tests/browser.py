"""A headless Chromium driven through the DevTools protocol, for tests that need a real browser.

Debian's ``chromium`` package only (``/usr/bin/chromium``): when it is missing, ``ensure_chromium``
installs it with apt-get, as ``make bench`` does for wrk; no browser is ever downloaded from
anywhere else. The driver speaks the DevTools protocol over a WebSocket with websocket-client, so it
needs nothing beyond the suite's own dependencies:

    with Chromium() as browser:
        browser.navigate('http://127.0.0.1:8000/page.html')
        browser.wait_for('document.title === "ready"')
        text = browser.evaluate('document.body.innerText')

Every wait is bounded and every failure names what it waited for; ``close`` always ends the browser
process group, even when start-up failed halfway.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import requests
import websocket

from tests import apt

#: Where Debian's chromium package puts the browser.
CHROMIUM = '/usr/bin/chromium'

#: Seconds for the browser to start and open its DevTools endpoint.
STARTUP_TIMEOUT_SECS = 30.0

#: Seconds for one DevTools command to be answered.
COMMAND_TIMEOUT_SECS = 30.0


class BrowserError(RuntimeError):
    """The browser could not be installed, started or driven; the message says which step failed."""


def ensure_chromium(binary: str = CHROMIUM) -> str:
    """The browser's path, installing Debian's chromium package first when it is missing."""
    failed = apt.install(['chromium'], lambda: os.access(binary, os.X_OK))
    if failed:
        raise BrowserError(f'{binary} is missing and could not be installed: {failed}')
    return binary


class Chromium:
    """One headless browser with one page, driven through the DevTools protocol."""

    def __init__(self, binary: str = CHROMIUM, startup_timeout: float = STARTUP_TIMEOUT_SECS) -> None:
        self.binary = binary
        self.startup_timeout = startup_timeout
        self.proc: subprocess.Popen[bytes] | None = None
        self.profile: Path | None = None
        self.port: int | None = None
        self._page: websocket.WebSocket | None = None
        self._ids = itertools.count(1)
        self._log: Any = None
        #: DevTools events received while waiting for an answer, oldest first (Runtime.consoleAPICalled...).
        self.events: list[dict[str, Any]] = []

    def __enter__(self) -> Chromium:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> Chromium:
        """Start the browser on about:blank and attach to its page; BrowserError when it does not come up."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix='conduit-chromium-'))
        self._log = open(self.profile / 'chromium.log', 'wb')  # closed in close()
        # Port 0: the browser picks a free port itself and writes it to DevToolsActivePort, so no
        # other process can take the port between our choice and the browser's bind.
        args = [self.binary, '--headless=new', '--remote-debugging-port=0', '--remote-debugging-address=127.0.0.1',
                f'--user-data-dir={self.profile}', '--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage',
                '--no-first-run', '--no-default-browser-check', '--disable-extensions',
                '--disable-background-networking', '--disable-component-update', '--disable-sync',
                '--metrics-recording-only', '--password-store=basic', '--use-mock-keychain', 'about:blank']
        self.proc = subprocess.Popen(args, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + self.startup_timeout
        self.port = self._wait_for_port(deadline)
        version = self._wait_for_version(deadline)
        if not version.get('webSocketDebuggerUrl'):
            raise BrowserError(f'/json/version has no webSocketDebuggerUrl: {version}')
        target = self._wait_for_page(deadline)
        # No Origin header: Chromium refuses DevTools WebSocket connections from origins it was not told of.
        self._page = websocket.create_connection(target, timeout=COMMAND_TIMEOUT_SECS, suppress_origin=True)
        self.command('Page.enable')
        self.command('Runtime.enable')

    def _alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise BrowserError(f'chromium exited with {self.proc.returncode} while starting:\n{self.log()}')

    def _wait_for_port(self, deadline: float) -> int:
        assert self.profile is not None
        active = self.profile / 'DevToolsActivePort'
        while time.monotonic() < deadline:
            self._alive()
            lines = active.read_text().splitlines() if active.exists() else []
            if lines and lines[0].strip().isdigit():
                return int(lines[0])
            time.sleep(0.05)
        raise BrowserError(f'chromium wrote no DevToolsActivePort within {self.startup_timeout:g} s:\n{self.log()}')

    def _json(self, path: str) -> Any:
        r = requests.get(f'http://127.0.0.1:{self.port}{path}', timeout=5)
        r.raise_for_status()
        return r.json()

    def _wait_for_version(self, deadline: float) -> dict[str, Any]:
        last: Exception | None = None
        while time.monotonic() < deadline:
            self._alive()
            try:
                found: dict[str, Any] = self._json('/json/version')
                return found
            except (requests.RequestException, ValueError) as e:
                last = e
            time.sleep(0.05)
        raise BrowserError(f'/json/version did not answer within {self.startup_timeout:g} s ({last}):\n{self.log()}')

    def _wait_for_page(self, deadline: float) -> str:
        while time.monotonic() < deadline:
            self._alive()
            try:
                for target in self._json('/json/list'):
                    if target.get('type') == 'page' and target.get('webSocketDebuggerUrl'):
                        return str(target['webSocketDebuggerUrl'])
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.05)
        raise BrowserError(f'chromium showed no page target within {self.startup_timeout:g} s:\n{self.log()}')

    def command(self, method: str, timeout: float = COMMAND_TIMEOUT_SECS, **params: Any) -> dict[str, Any]:
        """Send one DevTools command to the page and return its result; BrowserError on an error answer."""
        if self._page is None:
            raise BrowserError(f'{method}: the browser is not started')
        call_id = next(self._ids)
        self._page.send(json.dumps({'id': call_id, 'method': method, 'params': params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f'{method} was not answered within {timeout:g} s')
            self._page.settimeout(left)
            try:
                answer = json.loads(self._page.recv())
            except websocket.WebSocketTimeoutException:
                continue
            except (websocket.WebSocketException, OSError) as e:
                raise BrowserError(f'{method}: the DevTools connection failed: {e!r}\n{self.log()}') from e
            if answer.get('id') != call_id:
                self.events.append(answer)  # an event, or nothing we wait for
                continue
            if 'error' in answer:
                raise BrowserError(f'{method} failed: {answer["error"]}')
            result: dict[str, Any] = answer.get('result', {})
            return result

    def navigate(self, url: str, timeout: float = COMMAND_TIMEOUT_SECS) -> None:
        """Open url in the page and wait until its document has loaded."""
        result = self.command('Page.navigate', url=url)
        if result.get('errorText'):
            raise BrowserError(f'navigating to {url} failed: {result["errorText"]}')
        self.wait_for('document.readyState === "complete"', timeout=timeout, what=f'{url} loaded')

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (promises awaited); BrowserError if it throws."""
        result = self.command('Runtime.evaluate', expression=expression, returnByValue=True, awaitPromise=True)
        if 'exceptionDetails' in result:
            details = result['exceptionDetails']
            text = details.get('exception', {}).get('description') or details.get('text')
            raise BrowserError(f'{expression!r} threw: {text}')
        return result.get('result', {}).get('value')

    def wait_for(self, expression: str, timeout: float = 30.0, what: str = '') -> Any:
        """Evaluate expression until it is truthy and return that value; BrowserError naming it on timeout."""
        deadline = time.monotonic() + timeout
        value: Any = None
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise BrowserError(f'{what or expression!r} not seen within {timeout:g} s (last value {value!r}); '
                           f'console: {self.console()}')

    def console(self) -> list[str]:
        """What the page wrote to its console (and its uncaught exceptions) so far."""
        lines = []
        for event in self.events:
            if event.get('method') == 'Runtime.consoleAPICalled':
                args = event['params'].get('args', [])
                lines.append(' '.join(str(a.get('value', a.get('description', ''))) for a in args))
            elif event.get('method') == 'Runtime.exceptionThrown':
                details = event['params'].get('exceptionDetails', {})
                lines.append(str(details.get('exception', {}).get('description') or details.get('text')))
        return lines

    def screenshot(self, path: Path) -> Path:
        """Save a PNG of the page (for a person looking at a failure)."""
        data = self.command('Page.captureScreenshot', format='png')['data']
        path.write_bytes(base64.b64decode(data))
        return path

    def log(self) -> str:
        """The last part of what the browser process printed."""
        if self.profile is None or not (self.profile / 'chromium.log').exists():
            return ''
        return (self.profile / 'chromium.log').read_text(errors='replace')[-4000:]

    def close(self) -> None:
        """Close the DevTools connection, kill the browser's process group and remove its profile; never raises."""
        if self._page is not None:
            try:
                self._page.close()
            except Exception:  # noqa: BLE001 - closing must not mask the test's own failure
                pass
            self._page = None
        if self.proc is not None:
            if self.proc.poll() is None:
                # The browser forks renderer and GPU processes into its session: end them all.
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.profile is not None:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None
