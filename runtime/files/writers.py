"""Rendering messages' data as file bodies: JSON, JSON Lines and CSV (what file subscribers write).

A file holds one item (a message's data) or several (a delivery batch). Each item is rendered on
its own first (``render_item``), so that one that cannot be written in the format is named
(``FileRenderError`` with its index) and left out while the others are written; ``file_body``
then joins the rendered items into the chunks of one file:

- ``json``: one item is its JSON text; several, or a batch of any size (``array``), are a JSON
  array, one item per line;
- ``jsonl``: one line of JSON text per item;
- ``csv``: a header row and one row per item. An item must be a flat JSON object (values that are
  strings, numbers, booleans or null); its keys are the columns. The columns are the given ones,
  else the keys of the file's items in the order first seen, the first item's first; a column an
  item lacks is an empty cell, and a key outside given columns is not written. Numbers are
  written as JSON writes them, booleans as ``true``/``false``, null as an empty cell.

Every file ends with a line end (CSV rows end with CRLF, as RFC 4180 has them). Text is UTF-8
without a byte order mark. JSON is written within the broker's JSON limits (no NaN or Infinity,
nesting within bounds). This module knows nothing of messages or pub/sub: it takes data values.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.errors import ConfigError, FileRenderError
from runtime.util import json_limits
from runtime.util.json_limits import DEFAULT_LIMITS, JsonLimits

#: File formats a file subscriber writes.
FORMATS = ('json', 'jsonl', 'csv')

#: Most columns a CSV file may be given (file_csv_columns).
MAX_COLUMNS = 1000

#: Rows are written to the CSV writer and taken out as bytes in chunks of about this size.
_CHUNK_CHARS = 64 * 1024


@dataclass(frozen=True)
class Rendered:
    """One item, rendered: its JSON text (json, jsonl) or its cells by column (csv)."""

    text: bytes = b''
    cells: dict[str, str] | None = None


def extension(fmt: str) -> str:
    """The file name extension of a format (``{ext}`` of name templates)."""
    if fmt not in FORMATS:
        raise ValueError(f'unknown file format {fmt!r}')
    return fmt


def check_columns(text: str, where: str, field: str = 'file_csv_columns') -> tuple[str, ...]:
    """Comma-separated column names as a tuple ('' gives none); ConfigError naming the field if malformed."""
    if not isinstance(text, str):
        raise ConfigError(where, f'{field} must be a string of comma-separated column names')
    if not text.strip():
        return ()
    columns = tuple(name.strip() for name in text.split(','))
    if any(not name for name in columns):
        raise ConfigError(where, f'{field} has an empty column name')
    if len(set(columns)) != len(columns):
        raise ConfigError(where, f'{field} names a column twice')
    if len(columns) > MAX_COLUMNS:
        raise ConfigError(where, f'{field} names more than {MAX_COLUMNS} columns')
    for name in columns:
        if any(ord(c) < 32 or c == '\x7f' for c in name) or not _is_unicode(name):
            raise ConfigError(where, f'{field}: column names must not contain control characters')
    return columns


def _is_unicode(text: str) -> bool:
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return True


_KINDS = {dict: 'an object', list: 'a list', str: 'a string', bytes: 'bytes', bool: 'a boolean',
          type(None): 'null', int: 'a number', float: 'a number'}


def _kind(value: Any) -> str:
    return _KINDS.get(type(value), type(value).__name__)


def render_item(fmt: str, data: Any, index: int = 0, limits: JsonLimits = DEFAULT_LIMITS) -> Rendered:
    """One item as a file of fmt holds it; FileRenderError (naming index) if it cannot be written so."""
    if fmt == 'csv':
        return Rendered(cells=_cells(data, index))
    if fmt not in FORMATS:
        raise ValueError(f'unknown file format {fmt!r}')
    if isinstance(data, (bytes, bytearray)):
        raise FileRenderError(index, f'its data is bytes, which {fmt} cannot hold')
    try:
        text = json_limits.dumps(data, limits)
    except json_limits.InvalidJson as e:
        raise FileRenderError(index, f'its data {e}') from None
    try:
        return Rendered(text=text.encode('utf-8'))
    except UnicodeEncodeError:
        raise FileRenderError(index, 'its data has text that is not valid Unicode (a lone surrogate)') from None


def _cells(data: Any, index: int) -> dict[str, str]:
    """A flat object's values as CSV cells."""
    if not isinstance(data, dict):
        raise FileRenderError(index, f'csv takes a flat JSON object per row, not {_kind(data)}')
    cells: dict[str, str] = {}
    for key, value in data.items():
        if not isinstance(key, str) or not _is_unicode(key):
            raise FileRenderError(index, 'csv column names must be valid Unicode text')
        if value is None:
            text = ''
        elif isinstance(value, bool):
            text = 'true' if value else 'false'
        elif isinstance(value, str):
            text = value
        elif isinstance(value, (int, float)):
            try:
                text = json.dumps(value, allow_nan=False)
            except ValueError:
                raise FileRenderError(index, f'the value of {key!r} is not a finite number') from None
        else:
            raise FileRenderError(index, f'the value of {key!r} is {_kind(value)}: csv takes flat objects only')
        if not _is_unicode(text):
            raise FileRenderError(index, f'the value of {key!r} has text that is not valid Unicode')
        cells[key] = text
    return cells


def as_is(data: str | bytes, index: int = 0) -> bytes:
    """Text (UTF-8) or bytes written as they are: a single message's non-JSON data in a json file."""
    if isinstance(data, (bytes, bytearray)):
        return bytes(data)
    try:
        return data.encode('utf-8')
    except UnicodeEncodeError:
        raise FileRenderError(index, 'its data has text that is not valid Unicode (a lone surrogate)') from None


def columns_of(items: Sequence[Rendered], given: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns of a CSV file of these items: the given ones, else every key in the order first seen."""
    if given:
        return tuple(given)
    seen: dict[str, None] = {}
    for item in items:
        for key in item.cells or {}:
            seen.setdefault(key, None)
    return tuple(seen)


def file_body(fmt: str, items: Sequence[Rendered], columns: Sequence[str] = (), *,
              array: bool = False) -> Iterator[bytes]:
    """The chunks of one file holding these rendered items (at least one) in fmt; array: json as a list always."""
    if not items:
        raise ValueError('a file holds at least one item')
    if fmt == 'json':
        if len(items) == 1 and not array:
            yield items[0].text + b'\n'
            return
        yield b'[\n'
        last = len(items) - 1
        for i, item in enumerate(items):
            yield item.text + (b'\n' if i == last else b',\n')
        yield b']\n'
    elif fmt == 'jsonl':
        for item in items:
            yield item.text + b'\n'
    elif fmt == 'csv':
        yield from _csv_body(items, columns_of(items, columns))
    else:
        raise ValueError(f'unknown file format {fmt!r}')


def _csv_body(items: Sequence[Rendered], columns: tuple[str, ...]) -> Iterator[bytes]:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator='\r\n')
    writer.writerow(columns)
    for item in items:
        cells = item.cells or {}
        writer.writerow([cells.get(name, '') for name in columns])
        if buffer.tell() >= _CHUNK_CHARS:
            yield buffer.getvalue().encode('utf-8')
            buffer.seek(0)
            buffer.truncate()
    if buffer.tell():
        yield buffer.getvalue().encode('utf-8')
