"""The log of failed sign-ins: who tried, from where, on what path — never with what password.

A client guessing passwords could fill the disk with these lines, so each worker writes at most
``max_per_minute`` of them a minute; the ones it leaves out are counted in the next line it writes.
The user name comes from the Basic Auth header the client sent, cut to a bounded length and
written with ``repr`` so that control characters cannot forge log lines.
"""

from __future__ import annotations

import base64
import binascii
import logging
import time
from collections.abc import Callable

_log = logging.getLogger(__name__)

#: Longest user name written to the log.
MAX_USERNAME_CHARS = 64

#: Longest request path written to the log.
MAX_PATH_CHARS = 200

#: Length of the window the line budget counts in.
_WINDOW_SECS = 60.0


def basic_username(header: str | None) -> str | None:
    """The user name of a Basic Auth header, or None if the header is not Basic Auth (the password is dropped)."""
    if not header or not header[:6].lower() == 'basic ':
        return None
    try:
        decoded = base64.b64decode(header[6:].strip()[:4096], validate=True).decode('utf-8', 'replace')
    except (binascii.Error, ValueError):
        return None
    return decoded.partition(':')[0]


class FailedSignInLog:
    """Writes one WARNING line per failed sign-in, at most max_per_minute a minute."""

    def __init__(self, max_per_minute: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._max = max_per_minute
        self._clock = clock
        self._window_start = -_WINDOW_SECS
        self._written = 0
        self._suppressed = 0

    def record(self, client: str, header: str | None, method: str, path: str) -> None:
        """Log one failed sign-in (or count it, past this minute's budget)."""
        if self._max <= 0:
            return
        now = self._clock()
        if now - self._window_start >= _WINDOW_SECS:
            self._window_start, self._written = now, 0
        if self._written >= self._max:
            self._suppressed += 1
            return
        self._written += 1
        username = basic_username(header)
        who = repr(username[:MAX_USERNAME_CHARS]) if username is not None else 'credentials that are not Basic Auth'
        more = ''
        if self._suppressed:
            more = f' ({self._suppressed} more failed sign-in(s) not logged since the last line)'
            self._suppressed = 0
        _log.warning('failed sign-in as %s from %s: %s %r%s', who, client or '-', method, path[:MAX_PATH_CHARS], more)
