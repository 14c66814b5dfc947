"""Waiting for a page's state in browser tests under the dashboard's CSP.

Playwright's ``wait_for_function`` evaluates a string inside the page, which the dashboard's
Content-Security-Policy (no 'unsafe-eval') refuses; ``page.evaluate`` goes through the DevTools
protocol and is not refused, so ``wait_until`` polls with it.
"""

from __future__ import annotations

import time
from typing import Any


def wait_until(page: Any, expression: str, timeout_secs: float = 15.0) -> Any:
    """Evaluate a JavaScript expression in the page until it is truthy; its value."""
    deadline = time.monotonic() + timeout_secs
    while True:
        value = page.evaluate(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f'still false after {timeout_secs} s: {expression}')
        page.wait_for_timeout(200)
