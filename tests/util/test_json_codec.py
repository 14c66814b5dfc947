"""The JSON codec (orjson, the standard library for what orjson refuses) keeps Conduit's JSON rules and output."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from runtime.pubsub.message import InvalidMessage, encode_data
from runtime.util import json_limits
from runtime.util.json_limits import DEFAULT_LIMITS, InvalidJson, JsonLimits, JsonTooComplex

pytestmark = pytest.mark.unit

#: What clients exchange every day: its rendering must be byte for byte what the standard library wrote.
TYPICAL = {'order_id': 1234567, 'customer': {'id': 'C-981', 'name': 'Zoë Müller 東京 🚀', 'vip': True},
           'lines': [{'sku': 'A-1', 'qty': 2, 'price': 9.99}, {'sku': 'B-7', 'qty': 1, 'price': 120.0}],
           'total': 0.1 + 0.2, 'paid': False, 'note': None, 'tags': [], 'extra': {}, 'neg': -0.5,
           'escapes': 'quote " backslash \\ tab \t newline \n nul \x00 del \x7f', 'big': 2 ** 63 - 1}


def _reference(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(',', ':'), allow_nan=False)


def _nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth - 1):
        value = [value]
    return [value] if depth else value


def test_typical_output_is_what_the_standard_library_wrote() -> None:
    assert json_limits.dumps(TYPICAL) == _reference(TYPICAL)
    assert json_limits.dumpb(TYPICAL) == _reference(TYPICAL).encode()
    assert encode_data(TYPICAL, None) == (_reference(TYPICAL), 'application/json')
    assert json_limits.render({'is_ok': True, 'msg_id': 'abc', 'n': 3}) == b'{"is_ok":true,"msg_id":"abc","n":3}'


def test_typical_input_reads_as_the_standard_library_reads_it() -> None:
    text = _reference(TYPICAL)
    assert json_limits.loads(text) == json.loads(text) == TYPICAL
    assert json_limits.loads(text.encode()) == TYPICAL
    assert json_limits.loads('{"a": 1, "a": 2}') == {'a': 2}  # the last duplicate wins, as before


@pytest.mark.parametrize('text', ['NaN', '[Infinity]', '{"x": -Infinity}', '1e999', '[-1e400]'])
def test_nan_and_infinity_are_refused_when_parsing(text: str) -> None:
    with pytest.raises(InvalidJson, match='NaN/Infinity is not valid JSON'):
        json_limits.loads(text)


@pytest.mark.parametrize('value', [math.nan, [1, math.inf], {'x': {'y': -math.inf}}, {'note': None, 'v': math.nan}])
def test_nan_and_infinity_are_refused_when_rendering(value: Any) -> None:
    # orjson alone would write them as null.
    with pytest.raises(InvalidJson, match='NaN/Infinity is not valid JSON'):
        json_limits.dumps(value)
    with pytest.raises(InvalidMessage, match='data'):
        encode_data(value, None)


def test_null_itself_is_fine() -> None:
    assert json_limits.dumps({'a': None, 'b': [None]}) == '{"a":null,"b":[null]}'


def test_deep_nesting_is_refused_at_the_projects_limit() -> None:
    assert json_limits.loads(json.dumps(_nested(DEFAULT_LIMITS.max_depth))) == _nested(DEFAULT_LIMITS.max_depth)
    too_deep = json.dumps(_nested(DEFAULT_LIMITS.max_depth + 1))
    with pytest.raises(JsonTooComplex, match='is nested deeper than 64 levels'):
        json_limits.loads(too_deep)
    with pytest.raises(JsonTooComplex, match='is nested deeper than 64 levels'):
        json_limits.dumps(_nested(DEFAULT_LIMITS.max_depth + 1))
    # Deeper than orjson goes (1,024 parsing, 254 rendering): the same answer.
    with pytest.raises(JsonTooComplex, match='is nested deeper than 64 levels'):
        json_limits.loads('[' * 5000 + ']' * 5000)
    with pytest.raises(JsonTooComplex, match='is nested deeper than 64 levels'):
        json_limits.dumps(_nested(300))


def test_a_configured_depth_above_orjsons_own_is_honoured() -> None:
    limits = JsonLimits(max_depth=400)
    assert json_limits.loads(json.dumps(_nested(400)), limits) == _nested(400)
    assert json_limits.dumps(_nested(300), limits) == json.dumps(_nested(300), separators=(',', ':'))


def test_brackets_in_strings_do_not_count_as_nesting() -> None:
    value = {'text': '[' * 500 + '{' * 500}
    assert json_limits.loads(json.dumps(value)) == value
    assert json_limits.dumps(value) == _reference(value)


@pytest.mark.parametrize('number', [2 ** 63, 2 ** 64 - 1, 2 ** 64, -(2 ** 63) - 1, 10 ** 99 - 1, -(10 ** 99)])
def test_big_integers_stay_exact_integers(number: int) -> None:
    # orjson would read those beyond 64 bits as floats.
    parsed = json_limits.loads(f'{{"n": {number}}}')
    assert parsed == {'n': number} and type(parsed['n']) is int
    assert json_limits.dumps({'n': number}) == f'{{"n":{number}}}'


def test_integers_over_the_digit_limit_are_refused() -> None:
    with pytest.raises(JsonTooComplex, match='has an integer of more than 100 digits'):
        json_limits.loads('[' + '9' * 101 + ']')
    with pytest.raises(JsonTooComplex, match='has an integer of more than 100 digits'):
        json_limits.dumps([10 ** 100])
    small = JsonLimits(max_int_digits=5)
    assert json_limits.loads('[99999]', small) == [99999]
    with pytest.raises(JsonTooComplex, match='more than 5 digits'):
        json_limits.loads('[100000]', small)
    with pytest.raises(JsonTooComplex, match='more than 5 digits'):
        json_limits.dumps({'n': 100000}, small)


def test_long_digit_runs_in_strings_and_floats_are_read_right() -> None:
    value = {'phone': '00441234567890123456789', 'pi': 3.14159265358979323846}
    assert json_limits.loads(json.dumps(value)) == json.loads(json.dumps(value))


def test_non_str_keys_render_as_the_standard_library_renders_them() -> None:
    value = {1: 'a', 2.5: 'b', False: 'c', None: 'd', 'e': {7: [1]}}
    assert json_limits.dumps(value) == _reference(value)
    with pytest.raises(InvalidJson, match='NaN/Infinity'):
        json_limits.dumps({math.nan: 1})


def test_unicode_and_surrogates() -> None:
    text = '{"s": "Zoë \\u00fc \\ud83d\\ude80 東京"}'
    assert json_limits.loads(text) == {'s': 'Zoë ü 🚀 東京'}
    # A lone surrogate escape is read as before (the standard library keeps it).
    assert json_limits.loads('["\\ud800"]') == ['\ud800']
    assert json_limits.dumps(['\ud800']) == '["\ud800"]'
    with pytest.raises(UnicodeEncodeError):
        json_limits.dumpb(['\ud800'])
    with pytest.raises(InvalidJson, match='is not valid UTF-8'):
        json_limits.loads(b'["\xff"]')


def test_other_encodings_and_bom_are_read_as_before() -> None:
    assert json_limits.loads('{"a": "ü"}'.encode('utf-16')) == {'a': 'ü'}
    assert json_limits.loads(b'\xef\xbb\xbf[1]') == [1]


@pytest.mark.parametrize('text', ['{"a": 1,}', '[1 2]', '{"a"}', "{'a': 1}", '"\x01"', '01', '[1] x'])
def test_syntax_errors_keep_the_standard_librarys_message(text: str) -> None:
    with pytest.raises(InvalidJson) as caught:
        json_limits.loads(text)
    try:
        json.loads(text)
    except json.JSONDecodeError as e:
        expected = f'is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}'
    assert str(caught.value) == expected


def test_values_json_cannot_render_are_refused_as_before() -> None:
    import datetime
    for value in ({1, 2}, object(), datetime.datetime(2026, 1, 1)):
        with pytest.raises(InvalidJson, match='cannot be rendered as JSON'):
            json_limits.dumps({'v': value})


def test_subclasses_render_as_the_standard_library_renders_them() -> None:
    class Name(str):
        pass

    class Count(int):
        pass

    value = {Name('k'): [Name('v'), Count(3)], 'd': type('D', (dict,), {})(a=1)}
    assert json_limits.dumps(value) == _reference(value)
