"""Streaming record readers: the bytes of one file turned into the records a file channel publishes.

``read_records(stream, fmt, records=..., ...)`` yields ``Record`` values. A format (``bytes``,
``text``, ``json``, ``jsonl``, ``csv``) is read either as one record for the whole file
(``records='file'``) or as one record per line, array element or row (``records='each'``)::

    with source.open_read('in/invoices.csv') as f:
        for record in read_records(f, 'csv', records='each', max_record_bytes=1 << 20,
                                   json_limits=limits):
            publish(record.data)            # {'id': '1', 'amount': '9.50'}

Guarantees:

- **Constant memory** for ``'each'``: the stream is read ``CHUNK_BYTES`` at a time and decoded
  incrementally; a JSON array is split into elements as it streams in (``raw_decode`` over a
  bounded buffer), never loaded whole. What is held at once is about one chunk plus the record
  being read, and a record is given up as soon as it grows past ``max_record_bytes``: a 50 MB line
  without a newline costs ``max_record_bytes`` of memory, not 50 MB. A ``'file'`` record is read up
  to ``max_record_bytes`` and refused beyond.
- **Every fault names where it is**: ``FileParseError(record_index, line, reason)``, e.g.
  ``record 12 (line 13): invalid JSON: Expecting ',' delimiter at column 9``. Lines are 1-based and
  are where a record starts (a CSV row with a quoted newline, a JSON element spread over lines).
  Bytes that are not valid in the encoding fail the record (and line) holding them.
- **JSON as Conduit accepts it** everywhere else (``runtime.json_limits``): nesting depth and integer
  digits within the limits, no NaN or Infinity.
- **A canonical ``raw``** per record, whose ``digest`` identifies the record across drops of the same
  data: a line's or JSON Lines line's text (line end and, for JSON Lines, surrounding blanks
  dropped), a CSV row's values joined by U+001F, an array element re-dumped compactly with sorted
  keys, the file's bytes for a ``'file'`` record; all UTF-8.

The size of a record is the size of its text in the file (characters, checked while reading) and of
its ``raw`` bytes (checked once it is complete); either over ``max_record_bytes`` is an error. Lines
end at ``\\n`` (a ``\\r`` before it is dropped); a byte-order mark at the start is dropped.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from runtime.errors import ConfigError, FileParseError
from runtime.json_limits import InvalidJson, JsonLimits
from runtime.json_limits import check as check_json

#: The formats a file channel reads.
FORMATS = ('bytes', 'text', 'json', 'jsonl', 'csv')

#: 'file': the whole file is one record; 'each': one record per line, element or row.
RECORD_MODES = ('file', 'each')

#: Bytes read from the stream at a time.
CHUNK_BYTES = 64 * 1024

#: How near the end of the buffered text a JSON element may end (or fail) and still be cut short
#: by the end of the buffer: a number or a literal split across two chunks parses (or fails) up to
#: there. Such an element is parsed again with more text.
_JSON_TAIL_CHARS = 64

#: Separator of a CSV row's values in its raw bytes: a control character no CSV value normally holds.
_CSV_RAW_SEPARATOR = '\x1f'

#: The error handler that keeps decoding past a byte invalid in the encoding, turning each such byte b
#: into the lone surrogate U+DC00+b: strict decoders never produce lone surrogates, so the reader that
#: meets one knows the record and line of a bad byte, which the decoder does not.
_BAD_BYTES = 'conduit.files.bad-bytes'

_SURROGATE = re.compile('[\ud800-\udfff]')
_JSON_WS = re.compile(r'[ \t\n\r]*')
_JSON_COMMA = re.compile(r'[ \t\n\r]*,[ \t\n\r]*')


def _mark_bad_bytes(e: UnicodeError) -> tuple[str, int]:
    if not isinstance(e, UnicodeDecodeError):
        raise e
    return ''.join(chr(0xDC00 + b) for b in e.object[e.start:e.end]), e.end


codecs.register_error(_BAD_BYTES, _mark_bad_bytes)


@dataclass(frozen=True, slots=True)
class Record:
    """One record of a file: its number, the line it starts on, its value and its canonical bytes."""

    index: int          # 0-based record number in the file
    line: int | None    # 1-based line where it starts (text formats), None for bytes/json-file
    data: Any           # bytes (bytes), str (text), JSON value (json, jsonl), dict or list (csv)
    raw: bytes          # the record's own bytes, canonical, used for its digest (see digest())


def digest(record: Record) -> str:
    """The identity of a record's content: the first 32 hex digits of the SHA-256 of its raw bytes."""
    return digest_bytes(record.raw)


def digest_bytes(raw: bytes) -> str:
    """The first 32 hex digits of the SHA-256 of raw (what digest() gives a record with these bytes)."""
    return hashlib.sha256(raw).hexdigest()[:32]


def check_encoding(name: str, where: str) -> str:
    """The canonical name of a text codec; ConfigError naming it if Python has no such text encoding."""
    try:
        info = codecs.lookup(name)
    except (LookupError, TypeError, ValueError):
        raise ConfigError(where, f'encoding {name!r} is not a known text encoding') from None
    # base64, rot13 and the like are codecs too, but not between bytes and text.
    if not getattr(info, '_is_text_encoding', True):
        raise ConfigError(where, f'encoding {name!r} is not a text encoding')
    return info.name


def check_csv_delimiter(value: str, where: str) -> str:
    """A CSV delimiter as given; ConfigError unless it is one character other than a quote or a line end."""
    if not isinstance(value, str) or len(value) != 1 or value in '"\r\n\x00':
        raise ConfigError(where, f'csv_delimiter must be one character other than a double quote or a line '
                                 f'end, not {value!r}')
    return value


def read_records(stream: BinaryIO, fmt: str, *, records: str, encoding: str = 'utf-8',
                 csv_delimiter: str = ',', max_record_bytes: int, json_limits: JsonLimits) -> Iterator[Record]:
    """The records of a binary stream read as fmt; FileParseError while iterating when the content is bad.

    The arguments are checked at once (ValueError: a caller's mistake, the channel definition checks
    them for users); the stream is read only as the records are taken. The caller closes the stream.
    """
    if fmt not in FORMATS:
        raise ValueError(f'unknown format {fmt!r}; one of {", ".join(FORMATS)}')
    if records not in RECORD_MODES:
        raise ValueError(f'records must be one of {", ".join(RECORD_MODES)}, not {records!r}')
    if fmt == 'bytes' and records != 'file':
        raise ValueError("format 'bytes' reads only whole files (records='file')")
    if max_record_bytes < 1:
        raise ValueError(f'max_record_bytes must be at least 1, not {max_record_bytes!r}')
    codecs.lookup(encoding)
    if fmt == 'csv':
        check_csv_delimiter(csv_delimiter, 'csv_delimiter')
    if records == 'file':
        return _whole_file(stream, fmt, encoding, csv_delimiter, max_record_bytes, json_limits)
    text = _Text(stream, encoding)
    if fmt == 'text':
        return _text_lines(text, max_record_bytes, encoding)
    if fmt == 'jsonl':
        return _json_lines(text, max_record_bytes, json_limits, encoding)
    if fmt == 'csv':
        return _csv_rows(text, max_record_bytes, csv_delimiter, encoding)
    return _JsonArray(text, max_record_bytes, json_limits, encoding).records()


# Whole files


def _whole_file(stream: BinaryIO, fmt: str, encoding: str, delimiter: str, limit: int,
                limits: JsonLimits) -> Iterator[Record]:
    raw = _read_at_most(stream, limit)
    if fmt == 'bytes':
        yield Record(0, None, raw, raw)
        return
    if fmt in ('jsonl', 'csv'):
        # The same rows as 'each' gives, so that a bad one is named the same way; the file is in memory anyway.
        each = _csv_rows if fmt == 'csv' else _json_lines
        extra: Any = delimiter if fmt == 'csv' else limits
        rows = [r.data for r in each(_Text(io.BytesIO(raw), encoding), limit, extra, encoding)]
        if rows:
            yield Record(0, 1, rows, raw)
        return
    text = _decode_whole(raw, encoding)
    if fmt == 'text':
        yield Record(0, 1, text, raw)
        return
    if not text.strip(' \t\r\n'):
        raise FileParseError(None, None, 'empty file')
    try:
        value = _parse_json(text, limits)
    except _JsonFault as e:
        raise FileParseError(None, e.line, e.reason) from None
    yield Record(0, None, value, raw)


def _read_at_most(stream: BinaryIO, limit: int) -> bytes:
    """The whole stream; FileParseError as soon as it holds more than limit bytes (the rest is never read)."""
    parts = []
    size = 0
    while True:
        chunk = stream.read(CHUNK_BYTES)
        if not chunk:
            return b''.join(parts)
        size += len(chunk)
        if size > limit:
            raise FileParseError(None, None, f'the file is larger than the limit of {limit} bytes')
        parts.append(chunk)


def _decode_whole(raw: bytes, encoding: str) -> str:
    try:
        text = codecs.decode(raw, encoding)
    except UnicodeDecodeError as e:
        before = codecs.decode(raw[:e.start], encoding, _BAD_BYTES)
        raise FileParseError(None, before.count('\n') + 1,
                             f'not valid {encoding}: byte 0x{raw[e.start]:02x} at offset {e.start}') from None
    return text[1:] if text.startswith('\ufeff') else text


# Text, decoded as it streams


class _Text:
    """The text of a binary stream, decoded CHUNK_BYTES at a time, a leading byte-order mark dropped."""

    def __init__(self, stream: BinaryIO, encoding: str) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder(encoding)()
        self._started = False
        self._done = False
        #: Characters returned so far.
        self.offset = 0
        #: Offset of the first character that stands for an invalid byte, once one was met.
        self.bad_at: int | None = None

    def read(self) -> str:
        """The next piece of text; '' once the stream is exhausted."""
        while not self._done:
            data = self._stream.read(CHUNK_BYTES)
            if not data:
                self._done = True
            text = self._decode(data, self._done)
            if not self._started and text:
                self._started = True
                if text[0] == '\ufeff':
                    text = text[1:]
            if text:
                if self.bad_at is None and self._decoder.errors == _BAD_BYTES:
                    m = _SURROGATE.search(text)
                    if m is not None:
                        self.bad_at = self.offset + m.start()
                self.offset += len(text)
                return text
        return ''

    def _decode(self, data: bytes, final: bool) -> str:
        if self._decoder.errors == _BAD_BYTES:
            return self._decoder.decode(data, final)
        state = self._decoder.getstate()
        try:
            return self._decoder.decode(data, final)
        except UnicodeDecodeError:
            # Decode this chunk again, marking the bad bytes, and every chunk after it: see _BAD_BYTES.
            self._decoder.setstate(state)
            self._decoder.errors = _BAD_BYTES
            return self._decoder.decode(data, final)


class _LineTooLong(Exception):
    """A line grew past the limit before its end was seen."""


def _line_batches(text: _Text, limit: int) -> Iterator[list[str]]:
    """Lists of complete lines without their '\\n', one list per chunk; an unterminated last line comes alone.

    A line still without its end is held in pieces; once they hold more than limit characters (a
    '\\r' before the '\\n' allowed) _LineTooLong is raised and nothing more is read.
    """
    head: list[str] = []
    head_size = 0
    while True:
        chunk = text.read()
        if not chunk:
            break
        lines = chunk.split('\n')
        tail = lines.pop()
        if head and lines:
            head.append(lines[0])
            lines[0] = ''.join(head)
            head = []
            head_size = 0
        if lines:
            yield lines
        if tail:
            head.append(tail)
            head_size += len(tail)
            if head_size > limit + 1:
                raise _LineTooLong
    if head:
        yield [''.join(head)]


def _utf8(s: str, index: int | None, line: int | None, encoding: str, column: bool = True) -> bytes:
    """s in UTF-8; FileParseError naming the first byte the file's encoding did not accept (see _BAD_BYTES)."""
    try:
        return s.encode('utf-8')
    except UnicodeEncodeError as e:
        bad = ord(s[e.start]) - 0xDC00
        at = f' at column {e.start + 1}' if column else ''
        raise FileParseError(index, line, f'not valid {encoding}: byte 0x{bad:02x}{at}') from None


def _too_large(index: int | None, line: int | None, limit: int) -> FileParseError:
    return FileParseError(index, line, f'the record is larger than the limit of {limit} bytes')


def _text_lines(text: _Text, limit: int, encoding: str) -> Iterator[Record]:
    index = 0
    try:
        for lines in _line_batches(text, limit):
            for line in lines:
                if line.endswith('\r'):
                    line = line[:-1]
                raw = _utf8(line, index, index + 1, encoding)
                if len(raw) > limit:
                    raise _too_large(index, index + 1, limit)
                yield Record(index, index + 1, line, raw)
                index += 1
    except _LineTooLong:
        raise _too_large(index, index + 1, limit) from None


def _json_lines(text: _Text, limit: int, limits: JsonLimits, encoding: str) -> Iterator[Record]:
    index = 0
    lineno = 0
    try:
        for lines in _line_batches(text, limit):
            for line in lines:
                lineno += 1
                line = line.strip(' \t\r')
                if not line:
                    continue
                raw = _utf8(line, index, lineno, encoding)
                if len(raw) > limit:
                    raise _too_large(index, lineno, limit)
                try:
                    value = _parse_json(line, limits)
                except _JsonFault as e:
                    raise FileParseError(index, lineno, e.reason) from None
                yield Record(index, lineno, value, raw)
                index += 1
    except _LineTooLong:
        raise _too_large(index, lineno + 1, limit) from None


# CSV


class _NulInCsv(Exception):
    """A CSV line holds a NUL character (the csv module would take it as data)."""


def _csv_rows(text: _Text, limit: int, delimiter: str, encoding: str) -> Iterator[Record]:
    # The csv module refuses fields over its process-wide limit (128 KiB by default) with an error that
    # would blame the wrong thing; the record limit below is the one that counts, so the module's is
    # raised to it (never lowered: other readers in the process keep what they had).
    if csv.field_size_limit() < limit:
        csv.field_size_limit(limit)
    size = 0  # characters of the current record read so far

    def lines() -> Iterator[str]:
        nonlocal size
        for batch in _line_batches(text, limit):
            for line in batch:
                size += len(line)
                if size > limit + 1:
                    raise _LineTooLong
                if '\x00' in line:
                    raise _NulInCsv
                size += 1
                # csv reads a line end inside quotes as part of the value only if it is there.
                yield line + '\n'

    reader = csv.reader(lines(), delimiter=delimiter, strict=True)
    header: list[str] | None = None
    width = 0
    index = 0
    while True:
        start = reader.line_num + 1
        size = 0
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise FileParseError(index if header else None, start, f'invalid CSV: {e}') from None
        except _LineTooLong:
            raise _too_large(index if header else None, start, limit) from None
        except _NulInCsv:
            raise FileParseError(index if header else None, reader.line_num + 1,
                                 'a NUL character is not valid in CSV text') from None
        if not row:
            continue  # a blank line
        if header is None:
            _utf8(''.join(row), None, start, encoding, column=False)
            _check_header(row, start)
            header = row
            width = len(row)
            continue
        if len(row) != width:
            if len(row) > width:
                raise FileParseError(index, start, f'the row has {len(row)} fields, the header {width}')
            row += [''] * (width - len(row))
        raw = _utf8(_CSV_RAW_SEPARATOR.join(row), index, start, encoding, column=False)
        if len(raw) > limit:
            raise _too_large(index, start, limit)
        yield Record(index, start, dict(zip(header, row, strict=True)), raw)
        index += 1


def _check_header(names: list[str], line: int) -> None:
    seen: dict[str, int] = {}
    for number, name in enumerate(names, 1):
        if not name.strip():
            raise FileParseError(None, line, f'column {number} of the header has no name')
        if name in seen:
            raise FileParseError(None, line, f'column {number} of the header is named {name!r} like column '
                                             f'{seen[name]}')
        seen[name] = number


# JSON


class _JsonFault(Exception):
    """A JSON text is not accepted: the reason, and the line within the text when known."""

    def __init__(self, reason: str, line: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.line = line


def _refuse_constant(token: str) -> Any:
    raise InvalidJson(f'has {token}; NaN/Infinity is not valid JSON')


#: NaN and Infinity refused while parsing; the other limits are checked on the parsed value
#: (runtime.json_limits.check).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)

#: The canonical form of a JSON value: what its raw bytes (and so its digest) are made of.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(',', ':'), allow_nan=False)

#: The same, as the C encoder that JSONEncoder.encode builds anew on every call (half the cost of a small
#: element); no circular-reference markers: a parsed value holds no cycle.
_C_CANONICAL = (json.encoder.c_make_encoder(None, None, json.encoder.c_encode_basestring, None, ':', ',', True,
                                            False, False)
                if json.encoder.c_make_encoder is not None and json.encoder.c_encode_basestring is not None
                else None)


def _guarded(limits: JsonLimits, parse: Callable[..., Any], *args: Any) -> Any:
    """parse(*args) with every way it can refuse a text turned into _JsonFault (JSONDecodeError left to the caller)."""
    try:
        return parse(*args)
    except json.JSONDecodeError:
        raise
    except (InvalidJson, RecursionError, ValueError) as e:
        raise _parse_fault(e, limits) from None


def _parse_fault(e: Exception, limits: JsonLimits) -> _JsonFault:
    """The fault of a parse that failed other than by a syntax error (JSONDecodeError)."""
    if isinstance(e, InvalidJson):
        return _JsonFault(f'the value {e}')
    if isinstance(e, RecursionError):
        # The C parser stops at the interpreter's recursion limit, far above any sane max_depth.
        return _JsonFault(f'the value {limits.too_deep()}')
    if 'integer string conversion' in str(e):  # Python's int-str limit, hit inside the parser
        return _JsonFault(f'the value {limits.too_long()}')
    return _JsonFault(f'invalid JSON: {e}')


def _check_limits(value: Any, limits: JsonLimits) -> None:
    try:
        check_json(value, limits)
    except InvalidJson as e:
        raise _JsonFault(f'the value {e}') from None


def _parse_json(text: str, limits: JsonLimits) -> Any:
    """One JSON value that is the whole of text, within limits; _JsonFault otherwise."""
    try:
        value = _guarded(limits, _DECODER.decode, text)
    except json.JSONDecodeError as e:
        raise _JsonFault(f'invalid JSON: {e.msg} at column {e.colno}', e.lineno) from None
    _check_limits(value, limits)
    return value


def _canonical(value: Any) -> bytes:
    text = ''.join(_C_CANONICAL(value, 0)) if _C_CANONICAL is not None else _CANONICAL.encode(value)
    # surrogatepass: a string may hold a lone surrogate written as a \\ud800 escape; it is valid JSON text.
    return text.encode('utf-8', 'surrogatepass')


_KINDS = {'{': 'an object', '"': 'a string', 't': 'a boolean', 'f': 'a boolean', 'n': 'null'}


class _JsonArray:
    """The elements of a top-level JSON array, parsed as the text streams in.

    buf holds the text not consumed yet (and the element being parsed); pos is where parsing stands
    in it; base is the offset of buf[0] in the whole text. Lines are counted up to lpos, lazily.
    """

    def __init__(self, text: _Text, limit: int, limits: JsonLimits, encoding: str) -> None:
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

    def records(self) -> Iterator[Record]:
        """Every element as a Record; FileParseError at the first fault."""
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

    def _element(self, index: int) -> Record:
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
            raise _too_large(index, line, self._limit)
        try:
            check_json(value, limits)
        except InvalidJson as e:
            raise FileParseError(index, line, f'the value {e}') from None
        raw = _canonical(value)
        if len(raw) > self._limit:
            raise _too_large(index, line, self._limit)
        self._pos = end
        return Record(index, line, value, raw)

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
            raise _too_large(index, self._line_at(self._pos), self._limit)
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
