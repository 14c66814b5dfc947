"""Reading admin API input: JSON object bodies whose fields are checked one by one, and paging.

Every error names the field that is wrong (``InvalidInput``, a 400). Strings are refused when
they hold control characters or invalid Unicode: PostgreSQL refuses NUL, and a lone surrogate is
not UTF-8 at all, so either would otherwise fail in the database as a 500.
"""

from __future__ import annotations

import json
import math
from typing import Any

import falcon

from runtime.errors import BadRequest, InvalidInput
from runtime.http.body import read_json
from runtime.http.openapi import integer, query
from runtime.pubsub.queue_statements import MAX_PAGE

#: Largest value a whole-number column holds on every backend (PostgreSQL INTEGER).
MAX_DB_INT = 2 ** 31 - 1

#: Page size of a browse that does not say.
DEFAULT_PAGE = 50


def has_bad_chars(value: str) -> bool:
    """Control characters (PostgreSQL refuses NUL) or lone surrogates (not UTF-8 at all)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        return True
    try:
        value.encode('utf-8')
    except UnicodeEncodeError:
        return True
    return False


class Body:
    """A JSON object body with typed accessors; errors name the field that is wrong."""

    def __init__(self, req: falcon.Request, allowed: set[str], required: bool = True) -> None:
        value = read_json(req)
        if value is None and not required:
            value = {}
        if not isinstance(value, dict):
            raise BadRequest(f'body must be a JSON object with some of: {", ".join(sorted(allowed))}')
        unknown = sorted(set(value) - allowed)
        if unknown:
            raise BadRequest(f'unknown field(s): {", ".join(repr(k) for k in unknown)}')
        self.data: dict[str, Any] = value

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def require(self, *keys: str) -> None:
        """Refuse a body lacking any of keys (absent or null), naming every one that is missing."""
        missing = [key for key in keys if self.data.get(key) is None]
        if missing:
            raise InvalidInput(missing)

    def text(self, key: str, required: bool = False, default: str = '', max_len: int = 200,
             allow_empty: bool = True) -> str:
        """A string field without control characters."""
        value = self.data.get(key)
        if value is None:
            if required:
                raise InvalidInput(key)
            return default
        if not isinstance(value, str):
            raise InvalidInput(key, 'must be a string')
        if len(value) > max_len:
            raise InvalidInput(key, f'must be at most {max_len} characters')
        if not value and not allow_empty:
            raise InvalidInput(key, 'must not be empty')
        if has_bad_chars(value):
            raise InvalidInput(key, 'must not contain control characters or invalid Unicode')
        return value

    def flag(self, key: str, default: bool | None = None) -> bool | None:
        """A boolean field."""
        value = self.data.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InvalidInput(key, 'must be true or false')
        return value

    def whole(self, key: str, low: int, high: int, default: int | None = None) -> int | None:
        """A whole-number field within [low, high]."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(key, f'must be a whole number from {low} to {high}')
        return value

    def seconds(self, key: str, default: float | None = None) -> float | None:
        """A positive, finite number of seconds."""
        value = self.data.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InvalidInput(key, 'must be a positive number of seconds')
        return float(value)


def check_data(data: Any, key: str = 'data') -> Any:
    """Message data that can be stored: present, and valid Unicode once serialised."""
    if data is None:
        raise InvalidInput(key, 'is required and must not be null')
    try:
        text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        text.encode('utf-8')
    except (UnicodeEncodeError, ValueError):
        raise InvalidInput(key, 'is not valid Unicode') from None
    if isinstance(data, str) and '\x00' in data:
        raise InvalidInput(key, 'must not contain NUL characters')
    return data


def check_numbers(value: Any, where: str) -> None:
    """Refuse numbers JSON cannot carry back (NaN, infinities) anywhere inside a value."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidInput(where, 'must not contain NaN or infinite numbers')
    if isinstance(value, dict):
        for v in value.values():
            check_numbers(v, where)
    elif isinstance(value, list):
        for v in value:
            check_numbers(v, where)


def page(req: falcon.Request) -> tuple[int, int]:
    limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_PAGE) or DEFAULT_PAGE
    offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
    return limit, offset




PAGE_PARAMS = [query('limit', integer(1, MAX_PAGE), f'Page size (default {DEFAULT_PAGE})'),
               query('offset', integer(0, MAX_DB_INT), 'Rows to skip')]
