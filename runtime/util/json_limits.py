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

The codec is orjson (several times faster than the standard library, NaN and Infinity refused
when parsing), with the standard library as the exact reference: whatever orjson refuses or might
read or write differently is done again by the standard library, so that what is accepted, what is
refused and every error message stay what they were. orjson turns integers beyond 64 bits into
floats when parsing, so text with a run of digits that could be such an integer (or one over
``max_int_digits``) goes to the standard library; it writes NaN and Infinity as ``null``, so output
holding ``null`` is checked; it refuses non-str keys, integers beyond 64 bits, lone surrogates,
subclasses of the JSON types and nesting over 254 levels when rendering, all of which the standard
library then renders as before. Output differs from the standard library's in one way only: floats
with an exponent are written without a ``+`` or leading zero (``1e-7``, not ``1e-07``), the same
number to any JSON reader.

The limits are checked cheaply first: text (parsed or rendered) with no more brackets than
``max_depth`` cannot be nested deeper, and text without the run of digits above has no integer
over the bound. Only otherwise is the value walked, once and iteratively (never recursive, so no
input can overflow the stack). This module imports nothing of HTTP: the broker uses it as well as
the HTTP layer.
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

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
    #: A run of digits in JSON text that may be an integer orjson does not read exactly, or one over the bound.
    _long_digits: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ('max_depth', 'max_int_digits'):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f'JSON limit {name} must be a whole number of at least 1, not {value!r}')
        object.__setattr__(self, '_int_bound', 10 ** self.max_int_digits)
        # 19 digits: the shortest integer outside orjson's 64-bit range (-9223372036854775809).
        object.__setattr__(self, '_long_digits', b'0' * min(ORJSON_SAFE_DIGITS + 1, self.max_int_digits + 1))

    def maybe_over(self, text: bytes) -> bool:
        """Whether JSON text might break a limit or hold an integer orjson reads as a float (a cheap test:
        False means it surely does not; True that the value must be checked)."""
        # One pass in C: every digit becomes '0', every opening bracket '[', anything else a space.
        shape = text.translate(_SHAPE)
        # find, not `in`: bytes.__contains__ first tries its argument as an integer and formats an error.
        return shape.count(b'[') > self.max_depth or shape.find(self._long_digits) >= 0

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


#: Digits of every integer orjson parses exactly (it reads longer ones beyond 64 bits as floats).
ORJSON_SAFE_DIGITS = 18

#: bytes.translate table of maybe_over.
_SHAPE = bytes(0x30 if 0x30 <= i <= 0x39 else 0x5B if i in (0x5B, 0x7B) else 0x20 for i in range(256))

#: The codec in use, for the benches' reports.
CODEC = f'orjson {orjson.__version__} (standard library for what it refuses)'

#: Python values orjson must hand back to the standard library rather than render its own way.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_SUBCLASS


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
    text = data.encode('utf-8', 'surrogatepass') if isinstance(data, str) else data
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        # Refused (or not UTF-8): the standard library decides, and says why in its own words.
        return _loads_reference(data, limits)
    if limits.maybe_over(text):
        return _loads_reference(data, limits)
    return value


def _loads_reference(data: str | bytes | bytearray, limits: JsonLimits) -> Any:
    """loads with the standard library and the full check."""
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
    text = _dumps_fast(value, limits)
    return text.decode() if text is not None else _dumps_reference(value, limits)


def dumpb(value: Any, limits: JsonLimits = DEFAULT_LIMITS) -> bytes:
    """dumps as UTF-8 bytes; UnicodeEncodeError for text with a lone surrogate, as str.encode raises it."""
    text = _dumps_fast(value, limits)
    return text if text is not None else _dumps_reference(value, limits).encode('utf-8')


def render(value: Any) -> bytes:
    """Compact UTF-8 JSON of a value the runtime built itself (an answer, an archive line): no limits checked.

    The standard library renders what orjson refuses, so nothing renders differently but the floats
    with an exponent (see the module docstring), and lone surrogates are kept (``surrogatepass``).
    """
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:
        return json.dumps(value, ensure_ascii=False, separators=(',', ':')).encode('utf-8', 'surrogatepass')


def _dumps_fast(value: Any, limits: JsonLimits) -> bytes | None:
    """orjson's rendering of a value within limits, None for a value it does not render as the standard library."""
    try:
        text = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:
        return None
    # orjson writes NaN and Infinity as null: a null may be one of them.
    if text.find(b'null') >= 0 or limits.maybe_over(text):  # find: see JsonLimits.maybe_over
        _walk(value, limits, True)
    return text


def _dumps_reference(value: Any, limits: JsonLimits) -> str:
    """dumps with the full check and the standard library."""
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
