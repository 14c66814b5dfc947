"""Bounded JSON: what Conduit accepts as JSON from a client, and what it agrees to render.

Three things that Python's ``json`` module accepts are refused everywhere JSON enters Conduit (a
request body, a published message, a stored message about to be handed to a subscriber):

- nesting deeper than ``max_depth`` arrays and objects (64 by default): deep values overflow the
  interpreter's recursion limit later, when they are rendered, long after they were accepted;
- integers of more than ``max_int_digits`` digits (100 by default): converting huge integers
  between text and ``int`` costs quadratic time, and past 4,300 digits Python refuses it;
- ``NaN``, ``Infinity``, ``-Infinity`` and numbers that overflow to infinity (``1e999``): they are
  not JSON, and ``json.dumps`` would write them out as invalid JSON.

``loads`` parses text and checks the result; ``check`` checks a value built in Python (what a
service publishes); ``dumps`` checks and renders. All three raise ``InvalidJson`` (a
``ValueError``) whose message is a phrase about the value, e.g. ``is nested deeper than 64
levels``, so that callers prefix what the value is (``request body …``, ``data …``) and wrap it in
their own error. Nothing else escapes them: ``RecursionError`` and the ``ValueError`` of Python's
integer-string limit are turned into ``InvalidJson`` too.

The check is one iterative walk over the parsed value (never recursive, so no input can overflow
the stack), costing a fraction of the parse itself. This module imports nothing of HTTP: the
broker uses it as well as the HTTP layer.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.config import HttpSection

class InvalidJson(ValueError):
    """A value is not JSON as Conduit accepts it; the message says why ("is nested deeper than 64 levels")."""


class JsonTooComplex(InvalidJson):
    """A value is valid JSON but over a limit: nested too deeply, or an integer with too many digits."""


@dataclass(frozen=True)
class JsonLimits:
    """The bounds of JSON values: deepest nesting of arrays and objects, most digits of an integer."""

    max_depth: int = 64
    max_int_digits: int = 100
    #: Integers must be strictly between -_int_bound and _int_bound (10 ** max_int_digits).
    _int_bound: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ('max_depth', 'max_int_digits'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'JSON limit {name} must be a whole number of at least 1, not {value!r}')
        object.__setattr__(self, '_int_bound', 10 ** self.max_int_digits)

    @classmethod
    def from_settings(cls, http: HttpSection) -> JsonLimits:
        """The limits configured in the [http] section (max_json_depth, max_json_int_digits)."""
        return cls(max_depth=http.max_json_depth, max_int_digits=http.max_json_int_digits)

    def too_deep(self) -> JsonTooComplex:
        """The error of a value nested deeper than max_depth."""
        return JsonTooComplex(f'is nested deeper than {self.max_depth} levels')

    def too_long(self) -> JsonTooComplex:
        """The error of an integer with more than max_int_digits digits."""
        # Python refuses more than its int-str limit (4,300 digits) whatever max_int_digits says.
        digits = self.max_int_digits
        python_limit = sys.get_int_max_str_digits()
        if python_limit and python_limit < digits:
            digits = python_limit
        return JsonTooComplex(f'has an integer of more than {digits} digits')


#: The limits of anything that is not told otherwise.
DEFAULT_LIMITS = JsonLimits()


def _refuse_constant(token: str) -> Any:
    raise InvalidJson(f'has {token}; NaN/Infinity is not valid JSON')


def _not_finite(v: float) -> InvalidJson:
    if v != v:
        return InvalidJson('has NaN; NaN/Infinity is not valid JSON')
    return InvalidJson('has a number too large for a float (it overflows to Infinity); '
                       'NaN/Infinity is not valid JSON')


#: One decoder for every call: json.loads with an argument would build a new one each time (microseconds
#: per delivered message).
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def loads(data: str | bytes | bytearray, limits: JsonLimits = DEFAULT_LIMITS) -> Any:
    """Parse JSON text within limits; InvalidJson (a ValueError) naming the problem otherwise."""
    try:
        if not isinstance(data, str):
            # As json.loads does: UTF-8, -16 or -32 by the first bytes.
            data = data.decode(json.detect_encoding(data), 'surrogatepass')
        value = _DECODER.decode(data)
    except InvalidJson:
        raise
    except RecursionError:
        # The C parser stops at the interpreter's recursion limit, far above any sane max_depth.
        raise limits.too_deep() from None
    except json.JSONDecodeError as e:
        raise InvalidJson(f'is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}') from None
    except UnicodeDecodeError:
        raise InvalidJson('is not valid UTF-8') from None
    except ValueError as e:
        if 'integer string conversion' in str(e):  # Python's int-str limit, hit inside the parser
            raise limits.too_long() from None
        raise InvalidJson(f'is not valid JSON: {e}') from None
    _walk(value, limits, False)
    return value


def check(value: Any, limits: JsonLimits = DEFAULT_LIMITS) -> None:
    """Check a Python value against the limits as if it were parsed JSON; InvalidJson if it breaks one.

    Types json.dumps cannot render at all (a set, an object) are left to json.dumps to refuse.
    """
    _walk(value, limits, True)


def dumps(value: Any, limits: JsonLimits = DEFAULT_LIMITS) -> str:
    """Compact JSON text of a value (non-ASCII kept), checked first; InvalidJson if it cannot be rendered."""
    _walk(value, limits, True)
    try:
        return json.dumps(value, ensure_ascii=False, separators=(',', ':'), allow_nan=False)
    except RecursionError:
        raise limits.too_deep() from None
    except (TypeError, ValueError) as e:
        raise InvalidJson(f'cannot be rendered as JSON: {e}') from None


def _walk(value: Any, limits: JsonLimits, python: bool) -> None:
    """Breadth-first over every container, one level of nesting at a time (no recursion, no stack of pairs).

    python: the value was built in Python, not parsed. Parsed JSON holds only dict, list, str,
    int, float, bool and None, with str keys, so the exact type tests below cover it; values built
    in Python may hold subclasses, tuples and non-str keys (json.dumps writes int and float keys as
    text), which the slower isinstance path covers.
    """
    bound = limits._int_bound
    t = type(value)
    if t is not dict and t is not list and not (python and isinstance(value, (dict, list, tuple))):
        _scalar(value, bound, limits)
        return
    level: list[Any] = [value]
    depth = 1
    while level:
        if depth > limits.max_depth:
            raise limits.too_deep()
        below: list[Any] = []
        add = below.append
        for container in level:
            if isinstance(container, dict):
                if python:
                    for key in container:
                        if type(key) is not str:
                            _scalar(key, bound, limits)
                container = container.values()
            for v in container:
                t = type(v)
                if t is str:
                    continue
                if t is dict or t is list:
                    add(v)
                elif t is int:
                    if not -bound < v < bound:
                        raise limits.too_long()
                elif t is float:
                    if v - v != 0.0:  # inf - inf and nan - nan are both nan: one test for both
                        raise _not_finite(v)
                elif python:
                    if isinstance(v, (dict, list, tuple)):
                        add(v)
                    else:
                        _scalar(v, bound, limits)
        level = below
        depth += 1


def _scalar(v: Any, bound: int, limits: JsonLimits) -> None:
    if isinstance(v, bool) or v is None or isinstance(v, str):
        return
    if isinstance(v, int):
        if not -bound < v < bound:
            raise limits.too_long()
    elif isinstance(v, float):
        if not math.isfinite(v):
            raise _not_finite(v)
