"""Reading request bodies: size limit first, then the channel's data format."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs

import falcon

from runtime.errors import BadRequest, PayloadTooLarge


def read_body(req: falcon.Request, limit: int) -> bytes:
    """The raw body, refusing anything over limit bytes before reading it whole."""
    length = req.content_length
    if length is not None and length > limit:
        raise PayloadTooLarge(length, limit)
    if length is None and 'chunked' in (req.get_header('Transfer-Encoding') or '').lower():
        # falcon's bounded_stream takes a missing Content-Length for an empty body; the WSGI server
        # decodes the chunks, so read its stream, never more than one byte past the limit.
        stream = req.stream
    else:
        stream = req.bounded_stream
    parts: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = stream.read(limit + 1 - size)
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    if size > limit:
        raise PayloadTooLarge(size, limit)
    return b''.join(parts)


def parse_json(data: bytes) -> Any:
    """A JSON body, None when empty, BadRequest naming the position when malformed."""
    if not data.strip():
        return None
    try:
        return json.loads(data)
    except UnicodeDecodeError:
        raise BadRequest('request body is not valid UTF-8') from None
    except json.JSONDecodeError as e:
        raise BadRequest(f'request body is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}') from None


def parse_body(data: bytes, data_format: str) -> Any:
    """A body parsed as the channel's data format: json, form or text."""
    if data_format == 'json':
        return parse_json(data)
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError:
        raise BadRequest('request body is not valid UTF-8') from None
    if data_format == 'form':
        return {k: v[0] if len(v) == 1 else v for k, v in parse_qs(text, keep_blank_values=True).items()}
    return text
