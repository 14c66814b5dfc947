"""Fixtures of the dashboard's browser tests: a real server, headless Chromium, signed-in pages.

- The browser is Debian's ``chromium`` (``/usr/bin/chromium``, installed with apt-get by
  ``tests.browser.ensure_chromium`` when missing; never downloaded), driven by Playwright for Python
  with ``executable_path``, headless; one per test session.
- ``dash_server`` is a started ``LiveServer`` (SQLite and PostgreSQL, like ``server``) whose admin
  and viewer passwords are known (``ADMIN_PASSWORD``, ``VIEWER_PASSWORD``); ``dash_server_factory``
  makes one with other settings (its arguments are ``server_factory``'s). A test takes these when it
  needs a fresh server: an empty list, a server-wide count or total, settings of its own, a change
  every other test would see (all sessions ended, a module hot-deployed over another).
- ``shared_dash_server`` is the same kind of server, started once per test module and backend (on
  ``module_db_url``) and shared by the module's tests that take it: starting a server is most of what
  a short browser test costs. Such a test names what it makes its own (with the ``tag`` fixture where
  names would clash) and asserts nothing another test's objects could change.
  ``shared_dash_server_factory`` makes one with other settings (in a module's own module-scoped
  fixture; the arguments are ``module_server_factory``'s). A test takes either kind, never both: the
  backend parameters of the two would multiply its runs.
- ``admin_page`` and ``viewer_page`` are pages (1280×800) signed in through the form, at /dashboard/;
  ``dash_page(server, role, viewport=...)`` makes more (a phone-sized one, another server's). Their
  ``shared_`` twins (``shared_admin_page``, ``shared_viewer_page``, ``shared_dash_page``) are the same
  for module-scoped servers.
- Every page loaded is photographed into ``screenshots_dir`` (a temporary folder, printed at the end
  of the run), and once more at the end of the test, when its pages are closed.
- A console error or an uncaught page error fails the test, unless the test expects it:
  ``browser_errors.allow(r'regex')`` (e.g. the 403 a viewer's refused call logs).
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser import ensure_chromium
from tests.live_server import ADMIN_PASSWORD, ADMIN_USER, LiveServer

#: The viewer's credentials on every dashboard test server.
VIEWER_USER = 'viewer'
VIEWER_PASSWORD = 'test-viewer-password'

#: The size of a laptop screen, and of a phone.
DESKTOP = {'width': 1280, 'height': 800}
PHONE = {'width': 390, 'height': 844}

#: Longest one screenshot may take (a page navigated away from during one never finishes it).
SCREENSHOT_TIMEOUT_MS = 3_000

#: Longest wait for a screenshot still being taken when a test ends.
SCREENSHOT_WAIT_SECS = 10.0


class BrowserErrors:
    """Console errors and uncaught page errors of a test's pages; allow() the ones the test expects."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self._allowed: list[re.Pattern[str]] = []

    def allow(self, pattern: str) -> None:
        """Do not fail the test for errors matching pattern (a regular expression, searched)."""
        self._allowed.append(re.compile(pattern))

    def add(self, where: str, text: str) -> None:
        """Record one error."""
        self.seen.append(f'{where}: {text}')

    def unexpected(self) -> list[str]:
        """The errors no allow() pattern matches."""
        return [e for e in self.seen if not any(p.search(e) for p in self._allowed)]


@pytest.fixture(scope='session')
def chromium_path() -> str:
    """Debian's Chromium, installed with apt-get when missing."""
    return ensure_chromium()


@pytest.fixture(scope='session')
def browser(chromium_path: str) -> Iterator[Any]:
    """One headless Chromium for the whole test session."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium_path, headless=True)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope='session')
def screenshots_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every page visited is photographed."""
    return tmp_path_factory.mktemp('dashboard-screenshots')


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say where the screenshots are."""
    factory = getattr(terminalreporter.config, '_tmp_path_factory', None)
    if factory is None:
        return
    for path in sorted(Path(factory.getbasetemp()).glob('dashboard-screenshots*')):
        if not path.is_symlink():
            terminalreporter.write_line(f'dashboard screenshots: {path}')


def _with_viewer(env: dict[str, str] | None) -> dict[str, str]:
    """A server's env with the viewer's known credentials (env's own entries win)."""
    return {'CONDUIT_DASHBOARD_VIEWER_USERNAME': VIEWER_USER, 'CONDUIT_DASHBOARD_VIEWER_PASSWORD': VIEWER_PASSWORD,
            **(env or {})}


@pytest.fixture
def dash_server_factory(server_factory: Callable[..., LiveServer]) -> Callable[..., LiveServer]:
    """Start a server with known admin and viewer passwords (arguments as server_factory's)."""
    def factory(**kwargs: Any) -> LiveServer:
        return server_factory(env=_with_viewer(kwargs.pop('env', None)), **kwargs).start()
    return factory


@pytest.fixture
def dash_server(dash_server_factory: Callable[..., LiveServer]) -> LiveServer:
    """One started server for the dashboard."""
    return dash_server_factory()


# One dashboard server per test module and backend, for the tests that need no fresh one (see the
# module's docstring): they take the shared_ fixtures below and none of the function-scoped ones above.


@pytest.fixture(scope='module')
def shared_dash_server_factory(module_server_factory: Callable[..., LiveServer]) -> Callable[..., LiveServer]:
    """Start module-lived servers with known admin and viewer passwords (arguments as module_server_factory's)."""
    def factory(**kwargs: Any) -> LiveServer:
        return module_server_factory(env=_with_viewer(kwargs.pop('env', None)), **kwargs).start()
    return factory


@pytest.fixture(scope='module')
def shared_dash_server(shared_dash_server_factory: Callable[..., LiveServer]) -> LiveServer:
    """One started dashboard server shared by every test of a module that takes it (on module_db_url)."""
    return shared_dash_server_factory()


@pytest.fixture
def browser_errors() -> BrowserErrors:
    """The console and page errors of this test's pages (checked when the test ends)."""
    return BrowserErrors()


def sign_in(page: Any, server: LiveServer, role: str = 'admin') -> None:
    """Sign a page in through the form, as the admin or the viewer; it ends at /dashboard/."""
    username, password = (ADMIN_USER, ADMIN_PASSWORD) if role == 'admin' else (VIEWER_USER, VIEWER_PASSWORD)
    page.goto(server.url + '/dashboard/sign-in')
    page.fill('#username', username)
    page.fill('#password', password)
    page.click('button[type=submit]')
    page.wait_for_url(server.url + '/dashboard/')


def _pages(browser: Any, screenshots_dir: Path, browser_errors: BrowserErrors,
           request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """What dash_page and shared_dash_page yield; at the end, photographs and closes the pages, then checks errors."""
    contexts: list[Any] = []
    pending: list[int] = [0]
    counter = [0]
    test_name = re.sub(r'[^\w.-]+', '_', request.node.name)[:80]

    def photograph(page: Any) -> None:
        counter[0] += 1
        path_part = re.sub(r'[^\w.-]+', '_', page.url.split('://', 1)[-1].partition('/')[2])[:60] or 'root'
        pending[0] += 1
        try:
            # A page the test navigated away from right after its load never finishes its screenshot: bounded,
            # or it waited the pages' 15 s default and held the test's teardown as long.
            page.screenshot(path=str(screenshots_dir / f'{test_name}-{counter[0]:02d}-{path_part}.png'), full_page=True,
                            timeout=SCREENSHOT_TIMEOUT_MS)
        except Exception:  # the page was closed or left meanwhile: nothing to photograph
            pass
        finally:
            pending[0] -= 1

    def make(server: LiveServer, role: str | None = 'admin', viewport: dict[str, int] | None = None) -> Any:
        context = browser.new_context(viewport=viewport or DESKTOP, base_url=server.url)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(15_000)
        page.on('console', lambda msg: browser_errors.add('console', f'{msg.text} ({msg.location.get("url", "")})')
                if msg.type == 'error' else None)
        page.on('pageerror', lambda exc: browser_errors.add('pageerror', str(exc)))
        page.on('load', photograph)
        if role is not None:
            sign_in(page, server, role)
        return page

    yield make
    deadline = time.monotonic() + SCREENSHOT_WAIT_SECS
    for context in contexts:
        for page in context.pages:
            while pending[0] and time.monotonic() < deadline:
                page.wait_for_timeout(50)
            photograph(page)
        context.close()
    unexpected = browser_errors.unexpected()
    assert not unexpected, 'the browser reported errors:\n' + '\n'.join(unexpected[:20])


@pytest.fixture
def dash_page(browser: Any, screenshots_dir: Path, browser_errors: BrowserErrors,
              request: pytest.FixtureRequest,
              server_factory: Callable[..., LiveServer]) -> Iterator[Callable[..., Any]]:
    """Make pages: dash_page(server, role='admin'|'viewer'|None, viewport=DESKTOP); None: not signed in.

    It depends on server_factory so that its pages are closed before the servers stop: a page that
    polls (the overview) would otherwise log the refused connections as console errors.
    """
    yield from _pages(browser, screenshots_dir, browser_errors, request)


@pytest.fixture
def shared_dash_page(browser: Any, screenshots_dir: Path, browser_errors: BrowserErrors,
                     request: pytest.FixtureRequest) -> Iterator[Callable[..., Any]]:
    """dash_page for module-scoped servers: shared_dash_page(server, role, viewport=...), no function-scoped server."""
    # No server_factory here (its db_url would add a backend parameter to a test on a shared server):
    # a module-scoped server stops after the module, so this test's pages are always closed first.
    yield from _pages(browser, screenshots_dir, browser_errors, request)


@pytest.fixture
def admin_page(dash_page: Callable[..., Any], dash_server: LiveServer) -> Any:
    """A page signed in as the admin, at /dashboard/."""
    return dash_page(dash_server, 'admin')


@pytest.fixture
def viewer_page(dash_page: Callable[..., Any], dash_server: LiveServer) -> Any:
    """A page signed in as the viewer, at /dashboard/."""
    return dash_page(dash_server, 'viewer')


@pytest.fixture
def shared_admin_page(shared_dash_page: Callable[..., Any], shared_dash_server: LiveServer) -> Any:
    """A page of shared_dash_server signed in as the admin, at /dashboard/."""
    return shared_dash_page(shared_dash_server, 'admin')


@pytest.fixture
def shared_viewer_page(shared_dash_page: Callable[..., Any], shared_dash_server: LiveServer) -> Any:
    """A page of shared_dash_server signed in as the viewer, at /dashboard/."""
    return shared_dash_page(shared_dash_server, 'viewer')


@pytest.fixture
def tag() -> str:
    """A suffix that makes this test's object names its own on a shared server."""
    return uuid.uuid4().hex[:8]
