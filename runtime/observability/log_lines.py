"""One log record, one line: the formatter of the server's log (Conduit's lines and gunicorn's).

A message may hold line breaks it did not choose: a database error's text (SQLAlchemy adds a line
with a link to its documentation), or a value that came from outside and reached a log call. Written
as they are, they start lines that look like records of their own, which breaks every tool that reads
the log a line at a time, and lets whoever controls such a value forge a record. So line breaks in a
message are written escaped (``\\n``, ``\\r``). A traceback (``exc_info``) keeps its lines: it follows
its record's line and starts with ``Traceback``, as every log reader expects.
"""

from __future__ import annotations

import logging

_ESCAPES = str.maketrans({'\n': '\\n', '\r': '\\r'})


class OneLineFormatter(logging.Formatter):
    """A logging.Formatter that writes each record's message on one line (line breaks escaped)."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        """The record's line, its message's line breaks escaped."""
        message = record.message
        if '\n' in message or '\r' in message:
            record.message = message.translate(_ESCAPES)
        try:
            return super().formatMessage(record)
        finally:
            record.message = message  # other handlers of the same record see it as logged


def handler(line_format: str) -> logging.Handler:
    """A handler writing to stderr in line_format, one line per record."""
    out = logging.StreamHandler()
    out.setFormatter(OneLineFormatter(line_format))
    return out
