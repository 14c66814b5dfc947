"""JSON records: values parsed within Conduit's JSON limits, their canonical bytes, and a streamed top-level array.

``JsonArray`` yields the elements of a top-level array as the text streams in: ``raw_decode`` over a
bounded buffer, so that an array of any length is read in constant memory, each element parsed
once in the common case. An element (or a syntax error) that ends within ``_JSON_TAIL_CHARS`` of the
end of the buffered text may have been cut short by it (a number, a literal or an escape split
between chunks; a string not closed yet), so it is parsed again with more text. The buffer grows
geometrically while one element is read, so a long element costs linear time, and an element past
the record limit fails as soon as that is certain.

Parsing refuses NaN and Infinity; depth and integer digits are checked on the parsed value by
``runtime.util.json_limits.check``, as for every JSON Conduit accepts.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from runtime.errors import FileParseError
from runtime.files.text_stream import TextStream, too_large
from runtime.util.json_limits import InvalidJson, JsonLimits
from runtime.util.json_limits import check as check_json

#: How near the end of the buffered text a JSON element may end (or fail) and still be cut short
#: by the end of the buffer: a number or a literal split across two chunks parses (or fails) up to
#: there. Such an element is parsed again with more text.
_JSON_TAIL_CHARS = 64

_JSON_WS = re.compile(r'[ \t\n\r]*')
_JSON_COMMA = re.compile(r'[ \t\n\r]*,[ \t\n\r]*')


class JsonFault(Exception):
    """A JSON text is not accepted: the reason, and the line within the text when known."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


def _refuse_constant(token: str) -> Any:
    raise InvalidJson(f'has {token}; NaN/Infinity is not valid JSON')


#: NaN and Infinity refused while parsing; the other limits are checked on the parsed value
#: (runtime.util.json_limits.check).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)

#: The canonical form of a JSON value: what its raw bytes (and so its digest) are made of.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(',', ':'), allow_nan=False)

#: The same, as the C encoder that JSONEncoder.encode builds anew on every call (half the cost of a small
#: element); no circular-reference markers: a parsed value holds no cycle.
_C_CANONICAL = (json.encoder.c_make_encoder(None, None, json.encoder.c_encode_basestring, None, ':', ',', True,
                                            False, False)
                if json.encoder.c_make_encoder is not None and json.encoder.c_encode_basestring is not None
                else None)


def _parse_fault(e: Exception, limits: JsonLimits) -> JsonFault:
    """The fault of a parse that failed other than by a syntax error (JSONDecodeError)."""
    if isinstance(e, InvalidJson):
        return JsonFault(f'the value {e}')
    if isinstance(e, RecursionError):
        # The C parser stops at the interpreter's recursion limit, far above any sane max_depth.
        return JsonFault(f'the value {limits.too_deep()}')
    if 'integer string conversion' in str(e):  # Python's int-str limit, hit inside the parser
        return JsonFault(f'the value {limits.too_long()}')
    return JsonFault(f'invalid JSON: {e}')


def parse_json(text: str, limits: JsonLimits) -> Any:
    """The JSON value that is the whole of text, within limits; JsonFault saying why not otherwise."""
    try:
        value = _DECODER.decode(text)
    except json.JSONDecodeError as e:
        raise JsonFault(f'invalid JSON: {e.msg} at column {e.colno}', e.lineno) from None
    except (InvalidJson, RecursionError, ValueError) as e:
        raise _parse_fault(e, limits) from None
    try:
        check_json(value, limits)
    except InvalidJson as e:
        raise JsonFault(f'the value {e}') from None
    return value


def canonical(value: Any) -> bytes:
    """The canonical bytes of a parsed value: compact, keys sorted, UTF-8 (what its digest is made of)."""
    text = ''.join(_C_CANONICAL(value, 0)) if _C_CANONICAL is not None else _CANONICAL.encode(value)
    # surrogatepass: a string may hold a lone surrogate written as a \\ud800 escape; it is valid JSON text.
    return text.encode('utf-8', 'surrogatepass')


_KINDS = {'{': 'an object', '"': 'a string', 't': 'a boolean', 'f': 'a boolean', 'n': 'null'}


class JsonArray:
    """The elements of a top-level JSON array, parsed as the text streams in.

    buf holds the text not consumed yet (and the element being parsed); pos is where parsing stands
    in it; base is the offset of buf[0] in the whole text. Lines are counted up to lpos, lazily.
    """

    def __init__(self, text: TextStream, limit: int, limits: JsonLimits, encoding: str) -> None:
        self._text = text
        self._limit = limit
        self._limits = limits
        self._encoding = encoding
        self._buf = ''
        self._pos = 0
        self._base = 0
        self._line = 1
        self._lpos = 0
        self._eof = False

    def elements(self) -> Iterator[tuple[int, int, Any, bytes]]:
        """(index, line, value, raw bytes) of every element; FileParseError at the first fault."""
        c = self._skip_ws()
        if not c:
            return
        if c != '[':
            kind = _KINDS.get(c) or ('a number' if c in '-0123456789' else None)
            self._check_bad(self._pos + 1, None)
            what = f'holds {kind}' if kind else f'is not JSON (it starts with {c!r})'
            raise FileParseError(None, self._line_at(self._pos),
                                 f"the file {what}, not an array: records='each' needs a top-level JSON array")
        self._pos += 1
        index = 0
        c = self._skip_ws()
        if c == ']':
            self._pos += 1
            self._after_array()
            return
        while True:
            if not c:
                raise FileParseError(index, self._line_at(self._pos),
                                     "the file ends inside the JSON array: a value or ']' expected")
            yield self._element(index)
            index += 1
            # Most elements are followed by a comma and the next one in the same buffer: one match for all.
            m = _JSON_COMMA.match(self._buf, self._pos)
            if m is not None and m.end() < len(self._buf):
                self._pos = m.end()
                c = self._buf[self._pos]
                continue
            c = self._skip_ws()
            if c == ',':
                self._pos += 1
                c = self._skip_ws()
            elif c == ']':
                self._pos += 1
                self._after_array()
                return
            elif not c:
                raise FileParseError(index - 1, self._line_at(self._pos),
                                     "the file ends inside the JSON array: ',' or ']' expected after this record")
            else:
                self._check_bad(self._pos + 1, index - 1)
                raise FileParseError(index - 1, self._line_at(self._pos),
                                     f"invalid JSON: ',' or ']' expected after this record, found {c!r}")

    def _element(self, index: int) -> tuple[int, int, Any, bytes]:
        limits = self._limits
        while True:
            start = self._pos
            buf = self._buf
            try:
                value, end = _DECODER.raw_decode(buf, start)
            except json.JSONDecodeError as e:
                cut_short = len(buf) - e.pos <= _JSON_TAIL_CHARS or e.msg.startswith('Unterminated string')
                if cut_short and self._grow(index):
                    continue
                self._check_bad(e.pos + 1, index)
                raise FileParseError(index, self._line_at(e.pos), f'invalid JSON: {e.msg}') from None
            except (InvalidJson, RecursionError, ValueError) as e:
                raise FileParseError(index, self._line_at(start), _parse_fault(e, limits).reason) from None
            if len(buf) - end <= _JSON_TAIL_CHARS and self._grow(index):
                continue  # a number may go on in the next chunk
            break
        if self._text.bad_at is not None:
            self._check_bad(end, index)
        line = self._line_at(start)
        if end - start > self._limit:
            raise too_large(index, line, self._limit)
        try:
            check_json(value, limits)
        except InvalidJson as e:
            raise FileParseError(index, line, f'the value {e}') from None
        raw = canonical(value)
        if len(raw) > self._limit:
            raise too_large(index, line, self._limit)
        self._pos = end
        return index, line, value, raw

    def _grow(self, index: int) -> bool:
        """Read more text after the element starting at pos (as much again, up to the limit).

        False when the end of the text was seen before: nothing changed. True otherwise, even if no
        more text came: the buffer may have moved, so the element is parsed again.

        The element parsed (or failed) up to near the end of the buffer, so it is at least as long as
        the buffer less _JSON_TAIL_CHARS: past the record limit that is a FileParseError at once.
        """
        if self._eof:
            return False
        have = len(self._buf) - self._pos
        if have > self._limit + _JSON_TAIL_CHARS:
            raise too_large(index, self._line_at(self._pos), self._limit)
        self._fill(min(max(2 * have, 1), self._limit + _JSON_TAIL_CHARS + 1))
        return True

    def _fill(self, need: int) -> bool:
        """Drop the consumed text and read until need characters from pos on are buffered; False if none came."""
        self._line_at(self._pos)
        parts = [self._buf[self._pos:]]
        have = len(parts[0])
        read = False
        while have < need:
            chunk = self._text.read()
            if not chunk:
                self._eof = True
                break
            parts.append(chunk)
            have += len(chunk)
            read = True
        self._base += self._pos
        self._lpos -= self._pos
        self._buf = ''.join(parts)
        self._pos = 0
        return read

    def _skip_ws(self) -> str:
        """Move pos past JSON whitespace; the character there, '' at the end of the text."""
        while True:
            self._pos = _JSON_WS.match(self._buf, self._pos).end()
            if self._pos < len(self._buf):
                return self._buf[self._pos]
            if self._eof or not self._fill(1):
                return ''

    def _line_at(self, pos: int) -> int:
        """The line of buf[pos]; pos never goes back (lines are counted once)."""
        if pos > self._lpos:
            self._line += self._buf.count('\n', self._lpos, pos)
            self._lpos = pos
        return self._line

    def _check_bad(self, end: int, index: int | None) -> None:
        """FileParseError if a byte invalid in the encoding came before buf[end] (see _BAD_BYTES)."""
        bad_at = self._text.bad_at
        if bad_at is not None and bad_at - self._base < end:
            at = bad_at - self._base
            bad = ord(self._buf[at]) - 0xDC00
            raise FileParseError(index, self._line_at(at), f'not valid {self._encoding}: byte 0x{bad:02x}')

    def _after_array(self) -> None:
        c = self._skip_ws()
        if c:
            self._check_bad(self._pos + 1, None)
            raise FileParseError(None, self._line_at(self._pos),
                                 f'unexpected data after the JSON array: {self._buf[self._pos:self._pos + 20]!r}')
