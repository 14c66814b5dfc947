"""How a failed delivery is described: a one-line error and a bounded traceback.

The one-line error (``KeyError: 'address'``) goes into tables and the short log lines; the
traceback is kept with the queue entry and the dead letter so that whoever debugs the subscriber
sees the file and line that raised, without the server's log at hand.
"""

from __future__ import annotations

import traceback

#: Longest traceback kept with a queue entry or dead letter; the end (where it raised) is kept.
MAX_TRACEBACK_CHARS = 8000

#: Put in front of a traceback cut to MAX_TRACEBACK_CHARS.
_CUT_MARK = '…(traceback cut)\n'


def error_line(error: BaseException) -> str:
    """The exception's class and text on one line, e.g. ``KeyError: 'address'``."""
    return f'{type(error).__name__}: {error}'


def format_traceback(error: BaseException) -> str:
    """The exception's traceback as Python prints it, cut from the front to MAX_TRACEBACK_CHARS."""
    text = ''.join(traceback.format_exception(error))
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    return _CUT_MARK + text[-(MAX_TRACEBACK_CHARS - len(_CUT_MARK)):]
