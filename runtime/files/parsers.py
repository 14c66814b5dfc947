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
- **JSON as Conduit accepts it** everywhere else (``runtime.util.json_limits``): nesting depth and integer
  digits within the limits, no NaN or Infinity.
- **A canonical ``raw``** per record, whose ``digest`` identifies the record across drops of the same
  data: a line's or JSON Lines line's text (line end and, for JSON Lines, surrounding blanks
  dropped), a CSV row's values joined by U+001F, an array element re-dumped compactly with sorted
  keys, the file's bytes for a ``'file'`` record; all UTF-8.

Empty input: ``'each'`` gives no records; so do a CSV of a header only and a file of no rows or
lines read as ``'file'`` (csv, jsonl); a ``'file'`` text or bytes record of an empty file is empty;
JSON read as ``'file'`` fails with "empty file". A CSV row with fewer fields than the header has ''
for the missing ones; more is an error, and so are empty or repeated header names and NUL characters.

The decoding and line layer is ``runtime.files.text_stream``, JSON parsing and the streamed array
``runtime.files.json_stream``; this module holds the formats and the records.

The size of a record is the size of its text in the file (characters, checked while reading) and of
its ``raw`` bytes (checked once it is complete); either over ``max_record_bytes`` is an error. Lines
end at ``\\n`` (a ``\\r`` before it is dropped); a byte-order mark at the start is dropped.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from runtime.errors import ConfigError, FileParseError
from runtime.files.json_stream import JsonArray, JsonFault, parse_json
from runtime.files.text_stream import CHUNK_BYTES, LineTooLong, TextStream, decode_whole, line_batches, too_large, utf8
from runtime.util.json_limits import JsonLimits

__all__ = ['CHUNK_BYTES', 'FORMATS', 'RECORD_MODES', 'Record', 'check_csv_delimiter', 'check_encoding', 'digest',
           'digest_bytes', 'read_records']

#: The formats a file channel reads.
FORMATS = ('bytes', 'text', 'json', 'jsonl', 'csv')

#: 'file': the whole file is one record; 'each': one record per line, element or row.
RECORD_MODES = ('file', 'each')

#: Separator of a CSV row's values in its raw bytes: a control character no CSV value normally holds.
_CSV_RAW_SEPARATOR = '\x1f'


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
    text = TextStream(stream, encoding)
    if fmt == 'text':
        return _text_lines(text, max_record_bytes, encoding)
    if fmt == 'jsonl':
        return _json_lines(text, max_record_bytes, json_limits, encoding)
    if fmt == 'csv':
        return _csv_rows(text, max_record_bytes, csv_delimiter, encoding)
    elements = JsonArray(text, max_record_bytes, json_limits, encoding).elements()
    return (Record(index, line, value, raw) for index, line, value, raw in elements)


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
        rows = [r.data for r in each(TextStream(io.BytesIO(raw), encoding), limit, extra, encoding)]
        if rows:
            yield Record(0, 1, rows, raw)
        return
    text = decode_whole(raw, encoding)
    if fmt == 'text':
        yield Record(0, 1, text, raw)
        return
    if not text.strip(' \t\r\n'):
        raise FileParseError(None, None, 'empty file')
    try:
        value = parse_json(text, limits)
    except JsonFault as e:
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

def _text_lines(text: TextStream, limit: int, encoding: str) -> Iterator[Record]:
    index = 0
    try:
        for lines in line_batches(text, limit):
            for line in lines:
                if line.endswith('\r'):
                    line = line[:-1]
                raw = utf8(line, index, index + 1, encoding)
                if len(raw) > limit:
                    raise too_large(index, index + 1, limit)
                yield Record(index, index + 1, line, raw)
                index += 1
    except LineTooLong:
        raise too_large(index, index + 1, limit) from None


def _json_lines(text: TextStream, limit: int, limits: JsonLimits, encoding: str) -> Iterator[Record]:
    index = 0
    lineno = 0
    try:
        for lines in line_batches(text, limit):
            for line in lines:
                lineno += 1
                line = line.strip(' \t\r')
                if not line:
                    continue
                raw = utf8(line, index, lineno, encoding)
                if len(raw) > limit:
                    raise too_large(index, lineno, limit)
                try:
                    value = parse_json(line, limits)
                except JsonFault as e:
                    raise FileParseError(index, lineno, e.reason) from None
                yield Record(index, lineno, value, raw)
                index += 1
    except LineTooLong:
        raise too_large(index, lineno + 1, limit) from None


# CSV


class _NulInCsv(Exception):
    """A CSV line holds a NUL character (the csv module would take it as data)."""


def _csv_rows(text: TextStream, limit: int, delimiter: str, encoding: str) -> Iterator[Record]:
    # The csv module refuses fields over its process-wide limit (128 KiB by default) with an error that
    # would blame the wrong thing; the record limit below is the one that counts, so the module's is
    # raised to it (never lowered: other readers in the process keep what they had).
    if csv.field_size_limit() < limit:
        csv.field_size_limit(limit)
    size = 0  # characters of the current record read so far

    def lines() -> Iterator[str]:
        nonlocal size
        for batch in line_batches(text, limit):
            for line in batch:
                size += len(line)
                if size > limit + 1:
                    raise LineTooLong
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
        except LineTooLong:
            raise too_large(index if header else None, start, limit) from None
        except _NulInCsv:
            raise FileParseError(index if header else None, reader.line_num + 1,
                                 'a NUL character is not valid in CSV text') from None
        if not row:
            continue  # a blank line
        if header is None:
            utf8(''.join(row), None, start, encoding, column=False)
            _check_header(row, start)
            header = row
            width = len(row)
            continue
        if len(row) != width:
            if len(row) > width:
                raise FileParseError(index, start, f'the row has {len(row)} fields, the header {width}')
            row += [''] * (width - len(row))
        raw = utf8(_CSV_RAW_SEPARATOR.join(row), index, start, encoding, column=False)
        if len(raw) > limit:
            raise too_large(index, start, limit)
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
