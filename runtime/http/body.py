"""Reading request bodies within bounds: size, arrival rate, framing, then the data format.

Every limit comes from the ``[http]`` section through the ``InputLimits`` middleware, which puts
itself on ``req.context.limits`` (a request that did not pass through it gets the defaults):

- size: a body over ``max_body_size`` bytes is refused with 413 before it is read whole: at once
  when Content-Length says so, as soon as a chunk's size line does for a chunked body (its sizes
  so far add up past the limit: no wait for data that would be refused), else one byte past it;
- rate: the body must arrive at ``body_min_rate_bytes`` per second once ``body_grace_secs`` have
  passed, i.e. after receiving n bytes the reader has waited at most ``grace + n / min_rate``
  seconds. It reads in pieces of at most 64 KiB, each under a gevent timeout of the time allowed
  for what will then have arrived minus the time spent so far; past it the answer is 408. A piece
  is never larger than what has arrived so far (nor smaller than half a second's worth at the
  minimum rate, and 1 KiB), so a client that stops sending is cut off at most that piece's worth
  of time after the rule says so, while a fast one reaches 64 KiB pieces after a few reads. A
  ``body_min_rate_bytes`` of 0 turns the rule off;
- framing: broken chunked encoding (a bad chunk size, a missing terminator) and a client that
  goes away mid-body are a 400 naming the problem, never a traceback. After those and after a
  408 the connection is closed, since where the next request would start is unknown (the rest of
  an oversize body is left to the server, which drains it for at most its keep-alive time);
- JSON: nesting depth, integer digits, no NaN/Infinity (``runtime.util.json_limits``), a 400 naming
  the problem.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import parse_qs

import falcon
import gevent
from gunicorn.http.errors import (
    ChunkMissingTerminator,
    InvalidChunkExtension,
    InvalidChunkSize,
    NoMoreData,
    ParseException,
)

from runtime.config import HttpSection
from runtime.errors import BadRequest, PayloadTooLarge, RequestTimeout
from runtime.util import json_limits
from runtime.util.json_limits import JsonLimits

_log = logging.getLogger(__name__)

#: Largest piece of a body read at once (each piece under its own deadline).
READ_CHUNK_BYTES = 64 * 1024

#: Smallest piece read at once, in bytes and in time at the minimum rate (see the module docstring).
MIN_READ_BYTES = 1024
MIN_READ_SECS = 0.5

#: The JSON limits of parse_json when it is not given any.
DEFAULT_JSON_LIMITS = JsonLimits()

#: What each framing error of the WSGI server (gunicorn) means, for the client's error message.
_FRAMING_PROBLEMS: tuple[tuple[type[BaseException], str], ...] = (
    (InvalidChunkSize, 'broken chunked encoding (invalid chunk size)'),
    (ChunkMissingTerminator, 'broken chunked encoding (missing chunk terminator)'),
    (InvalidChunkExtension, 'broken chunked encoding (invalid chunk extension)'),
    (NoMoreData, 'the connection ended before the whole body arrived'),
    (ParseException, 'malformed framing'),
    (OSError, 'the connection failed while it was being read'),
    (ValueError, 'malformed framing'),
)


class InputLimits:
    """Falcon middleware: the limits of what a client may send, put on ``req.context.limits``."""

    def __init__(self, max_body_size: int = HttpSection.max_body_size, json: JsonLimits = DEFAULT_JSON_LIMITS,
                 body_grace_secs: float = HttpSection.body_grace_secs,
                 body_min_rate_bytes: int = HttpSection.body_min_rate_bytes) -> None:
        self.max_body_size = max_body_size
        self.json = json
        self.body_grace_secs = body_grace_secs
        self.body_min_rate_bytes = body_min_rate_bytes

    @classmethod
    def from_settings(cls, http: HttpSection) -> InputLimits:
        """The limits configured in the [http] section."""
        return cls(http.max_body_size, JsonLimits.from_settings(http), http.body_grace_secs,
                   http.body_min_rate_bytes)

    def process_request(self, req: falcon.Request, resp: falcon.Response) -> None:
        """Make the limits known to the body readers of this request."""
        req.context.limits = self

    @property
    def smallest_read_bytes(self) -> int:
        """The smallest piece read at once: half a second's worth at the minimum rate, 1 KiB to 64 KiB."""
        if self.body_min_rate_bytes <= 0:
            return READ_CHUNK_BYTES
        return min(READ_CHUNK_BYTES, max(MIN_READ_BYTES, int(self.body_min_rate_bytes * MIN_READ_SECS)))

    def allowed_secs(self, received: int) -> float:
        """How long a body may take to arrive up to its received-th byte (inf when the rate is not bounded)."""
        if self.body_min_rate_bytes <= 0:
            return float('inf')
        return self.body_grace_secs + received / self.body_min_rate_bytes


#: The limits of a request that did not pass through an InputLimits middleware.
DEFAULT_INPUT_LIMITS = InputLimits()


def limits_of(req: falcon.Request) -> InputLimits:
    """The input limits of a request (the defaults when no InputLimits middleware set them)."""
    return getattr(req.context, 'limits', None) or DEFAULT_INPUT_LIMITS


def read_json(req: falcon.Request) -> Any:
    """The body as JSON within the request's limits; None when empty; BadRequest/413/408 otherwise."""
    return parse_json(read_body(req), limits_of(req).json)


def read_body(req: falcon.Request, limit: int | None = None) -> bytes:
    """The raw body, refusing anything over limit bytes (the request's max_body_size) before reading it whole."""
    limits = limits_of(req)
    if limit is None:
        limit = limits.max_body_size
    length = req.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(length, limit)
    if length is None and 'chunked' in (req.get_header('Transfer-Encoding') or '').lower():
        # falcon's bounded_stream takes a missing Content-Length for an empty body; the WSGI server
        # decodes the chunks, so read its stream, never more than one byte past the limit.
        stream = req.stream
        _bound_chunks(req, limit)
    else:
        stream = req.bounded_stream
    parts: list[bytes] = []
    size = 0
    started = time.monotonic()
    smallest = limits.smallest_read_bytes
    while size <= limit:
        # No more than has arrived so far: how late a stalled client is cut off depends on it.
        want = min(READ_CHUNK_BYTES, max(smallest, size), limit + 1 - size)
        if length is not None:
            want = min(want, length - size)
            if want <= 0:
                break
        chunk = _read(req, stream, want, limits.allowed_secs(size + want) - (time.monotonic() - started), limits)
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    if size > limit:
        raise PayloadTooLarge(size, limit)
    return b''.join(parts)


def _read(req: falcon.Request, stream: Any, size: int, timeout_secs: float, limits: InputLimits) -> bytes:
    """One read of at most size bytes within timeout_secs; RequestTimeout or BadRequest naming the problem."""
    if timeout_secs <= 0:
        raise _too_slow(req, limits)
    timer = gevent.Timeout(timeout_secs) if timeout_secs != float('inf') else None
    if timer is not None:
        timer.start()
    try:
        return stream.read(size)
    except gevent.Timeout as t:
        if t is not timer:
            raise
        raise _too_slow(req, limits) from None
    except TimeoutError:  # a timeout the server put on the socket itself
        raise _too_slow(req, limits) from None
    except ChunksOverLimit as e:
        _abandon(req)
        _log.info('cid %s: %s %s: request body: chunk sizes over the limit', getattr(req.context, 'cid', None),
                  req.method, req.path)
        raise PayloadTooLarge(e.announced, e.limit, announced=True) from None
    except (ParseException, OSError, ValueError) as e:
        problem = next(text for cls, text in _FRAMING_PROBLEMS if isinstance(e, cls))
        _abandon(req)
        _log.info('cid %s: %s %s: request body: %s', getattr(req.context, 'cid', None), req.method, req.path,
                  problem)
        raise BadRequest(f'request body: {problem}') from None
    finally:
        if timer is not None:
            timer.close()


class ChunksOverLimit(Exception):
    """The chunk sizes of a chunked body, read so far, add up to more than its limit."""

    def __init__(self, announced: int, limit: int) -> None:
        super().__init__(announced, limit)
        self.announced = announced
        self.limit = limit


def _bound_chunks(req: falcon.Request, limit: int) -> None:
    """Have gunicorn's chunk reader raise ChunksOverLimit at the size line that takes the body past limit.

    Without it a client announcing a chunk of 2^64 bytes and sending nothing more held its request
    until the rate rule's 408. Only gunicorn's reader is known here; with another server the byte
    count past the limit still holds.
    """
    reader = getattr(req.env.get('wsgi.input'), 'reader', None)
    parse = getattr(reader, 'parse_chunk_size', None)
    if parse is None or getattr(parse, 'bounded', False):
        return
    announced = 0

    def bounded(unreader: Any, data: bytes | None = None) -> tuple[int, Any]:
        nonlocal announced
        size, rest = parse(unreader, data)
        announced += size
        if announced > limit:
            raise ChunksOverLimit(announced, limit)
        return size, rest

    bounded.bounded = True  # type: ignore[attr-defined]
    reader.parse_chunk_size = bounded


def _too_slow(req: falcon.Request, limits: InputLimits) -> RequestTimeout:
    """The error of a body that arrives too slowly (the connection will be closed)."""
    _abandon(req)
    _log.info('cid %s: %s %s: request body arrived too slowly', getattr(req.context, 'cid', None), req.method,
              req.path)
    return RequestTimeout(f'request body arrived too slowly: it must arrive at {limits.body_min_rate_bytes} bytes per '
                          f'second or more after the first {limits.body_grace_secs:g} s')


def _abandon(req: falcon.Request) -> None:
    """Tell the WSGI server that the body's framing is lost, so that it closes the connection.

    gunicorn marks the body itself when reading it raised (a framing error), but not when our
    timeout (a BaseException it does not see) cut a read short: its reader may then be in the
    middle of a chunk, and what follows would be parsed as the next request.
    """
    stream = req.env.get('wsgi.input')
    if hasattr(stream, 'failed'):
        stream.failed = True


def parse_json(data: bytes, limits: JsonLimits = DEFAULT_JSON_LIMITS) -> Any:
    """A JSON body within limits, None when empty, BadRequest naming the problem (or position) otherwise."""
    if not data.strip():
        return None
    try:
        return json_limits.loads(data, limits)
    except json_limits.InvalidJson as e:
        raise BadRequest(f'request body {e}') from None


def parse_body(data: bytes, data_format: str, json_limits: JsonLimits = DEFAULT_JSON_LIMITS) -> Any:
    """A body parsed as the channel's data format: json, form or text."""
    if data_format == 'json':
        return parse_json(data, json_limits)
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError:
        raise BadRequest('request body is not valid UTF-8') from None
    if data_format == 'form':
        return {k: v[0] if len(v) == 1 else v for k, v in parse_qs(text, keep_blank_values=True).items()}
    return text
