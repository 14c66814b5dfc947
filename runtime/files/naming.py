"""Name templates of file transfer: where a processed file is moved, what an outbound file is called.

A template is a path with ``{field}`` placeholders, ``{{`` and ``}}`` standing for braces::

    render('processed/{date}/{name}', inbound_values('in/a b.csv', 'invoices', now), where)
    # 'processed/2026-11-23/a b.csv'

Fields of an inbound move (``inbound_values``): ``name`` (the file's name), ``stem`` and ``suffix``
(``a.tar.gz`` → ``a.tar`` and ``.gz``; ``{stem}{suffix}`` is the name), ``channel``, ``date``
(``YYYY-MM-DD``), ``time`` (``HHMMSS``), ``year``, ``month``, ``day``. Fields of an outbound file
(``outbound_values``): ``topic``, ``msg_id``, ``date``, ``time``, ``ext`` (no dot), ``seq``, and
``year``, ``month``, ``day`` as well. Times are UTC, as everywhere in Conduit.

Guarantees, whatever the values hold (they come from file names and messages, not from the admin):

- a value never adds a path component: ``/``, ``\\``, NUL and other control characters in it become
  ``_`` (``safe_part``); spaces and non-ASCII letters are kept as they are;
- a value never makes a hidden file or an empty, ``.`` or ``..`` component: a value that starts a
  component has a leading ``.`` replaced by ``_`` and is ``_`` when empty, and a component that
  still comes out as ``.`` or ``..`` (a literal dot before a value ``.``) is replaced by underscores;
- so a rendered path never goes upward, and is absolute only when the template is.

The template itself is the admin's: it may hold literal ``/`` between fields and start with ``/``,
but ``check_template`` (at configuration time) and ``render`` refuse empty, ``.`` and ``..``
components, format specifications (``{date:%Y}``) and fields outside the allowed set, with a
``ConfigError`` naming where the template is configured.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Collection, Mapping
from datetime import UTC, datetime
from pathlib import PurePosixPath

from runtime.errors import ConfigError

#: Fields of the template that names where a processed inbound file is moved.
INBOUND_FIELDS = ('name', 'stem', 'suffix', 'channel', 'date', 'time', 'year', 'month', 'day')

#: Fields of the template that names an outbound file.
OUTBOUND_FIELDS = ('topic', 'msg_id', 'date', 'time', 'ext', 'seq', 'year', 'month', 'day')

#: Characters a value may not bring into a path: separators, control characters (C0, DEL, C1), line and
#: paragraph separators, and lone surrogates (undecodable bytes of a local file name).
_UNSAFE = re.compile('[/\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]')

#: Characters refused in a template's own text.
_TEMPLATE_UNSAFE = re.compile('[\x00-\x1f\x7f]')

#: What a field stands for when a template's shape is checked: anything but a dot or a slash.
_FIELD_MARK = 'F'

_FORMATTER = string.Formatter()


def safe_part(value: str, leading: bool = True) -> str:
    """value fit to be (part of) one path component: never '', no separator, no control character.

    leading: value starts the component, so a leading '.' is replaced too (no hidden file, no '..').
    """
    part = _UNSAFE.sub('_', value)
    if leading and part.startswith('.'):
        part = '_' + part[1:]
    return part or '_'


def check_template(template: str, allowed: Collection[str], where: str) -> None:
    """ConfigError naming where unless template is a well-formed path template using only allowed fields."""
    for _, name in _pieces(template, where):
        if name is not None and name not in allowed:
            raise _unknown(template, name, allowed, where)


def render(template: str, values: Mapping[str, object], where: str) -> str:
    """template with every field replaced by its value made safe (safe_part); ConfigError for an unknown field."""
    out: list[str] = []
    at_start = True  # the next text starts a path component
    for literal, name in _pieces(template, where):
        if literal:
            out.append(literal)
            at_start = literal.endswith('/')
        if name is None:
            continue
        if name not in values:
            raise _unknown(template, name, values, where)
        value = str(values[name])
        if value or at_start:  # inside a component an empty value is just nothing ('{stem}{suffix}')
            out.append(safe_part(value, leading=at_start))
            at_start = False
    path = ''.join(out)
    if '/.' not in path and not path.startswith('.'):
        return path
    # A literal dot next to a value ('.{x}' with x '.') can still make a dot component.
    return '/'.join('_' * len(part) if part in ('.', '..') else part for part in path.split('/'))


def time_values(now: float) -> dict[str, str]:
    """The time fields of a moment (UTC): date YYYY-MM-DD, time HHMMSS, year, month, day."""
    t = datetime.fromtimestamp(now, UTC)
    return {'date': t.strftime('%Y-%m-%d'), 'time': t.strftime('%H%M%S'),
            'year': f'{t.year:04d}', 'month': f'{t.month:02d}', 'day': f'{t.day:02d}'}


def inbound_values(path: str, channel: str, now: float) -> dict[str, str]:
    """The values of INBOUND_FIELDS for a file at path ('/'-separated, relative) processed at now."""
    name = path.rpartition('/')[2]
    pure = PurePosixPath(name) if name not in ('', '.', '..') else None
    stem, suffix = (pure.stem, pure.suffix) if pure is not None else (name, '')
    return {'name': name, 'stem': stem, 'suffix': suffix, 'channel': channel, **time_values(now)}


def outbound_values(topic: str, msg_id: str, ext: str, seq: int, now: float) -> dict[str, str]:
    """The values of OUTBOUND_FIELDS for an outbound file written at now."""
    return {'topic': topic, 'msg_id': msg_id, 'ext': ext, 'seq': str(seq), **time_values(now)}


def _unknown(template: str, name: str, known: Collection[str], where: str) -> ConfigError:
    return ConfigError(where, f'template {template!r} uses the unknown field {{{name}}}; known fields: '
                              f'{", ".join(sorted(known))}')


def _pieces(template: str, where: str) -> tuple[tuple[str, str | None], ...]:
    try:
        return _parse(template)
    except ValueError as e:
        raise ConfigError(where, f'template {template!r} {e}') from None


@functools.lru_cache(maxsize=256)
def _parse(template: str) -> tuple[tuple[str, str | None], ...]:
    """(literal text, field name or None) pairs of a template; ValueError saying what is wrong with it."""
    if not isinstance(template, str) or not template:
        raise ValueError('is empty')
    if _TEMPLATE_UNSAFE.search(template):
        raise ValueError('holds a control character')
    try:
        parsed = list(_FORMATTER.parse(template))
    except ValueError as e:
        raise ValueError(f'is malformed: {e} (write {{{{ and }}}} for literal braces)') from None
    pieces = []
    shape = []
    for literal, name, spec, conversion in parsed:
        shape.append(literal)
        if name is None:
            pieces.append((literal, None))
            continue
        if not name.isidentifier():
            raise ValueError(f'has the field {{{name}}}: a field is a plain name such as {{date}}')
        if spec or conversion:
            raise ValueError(f'has a format or conversion on {{{name}}}: only plain fields such as {{date}}')
        pieces.append((literal, name))
        shape.append(_FIELD_MARK)
    parts = ''.join(shape).split('/')
    if parts[0] == '' and len(parts) > 1:
        parts = parts[1:]  # an absolute template
    for part in parts:
        if part in ('', '.', '..'):
            raise ValueError("has an empty, '.' or '..' path component: it must name a file below its directory")
    return tuple(pieces)
