"""runtime.files.writers: messages' data as JSON, JSON Lines and CSV file bodies, read back by ordinary readers."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

import pytest

from runtime.errors import ConfigError, FileRenderError
from runtime.files import writers
from runtime.util.json_limits import JsonLimits

pytestmark = pytest.mark.unit


def body(fmt: str, items: list[Any], columns: tuple[str, ...] = ()) -> bytes:
    rendered = [writers.render_item(fmt, data, i) for i, data in enumerate(items)]
    return b''.join(writers.file_body(fmt, rendered, columns))


def read_csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode('utf-8'), newline='')))


# JSON and JSON Lines


def test_json_one_item_is_its_json_and_several_are_an_array_read_back_whole() -> None:
    value = {'name': 'Zoë 🚀', 'n': 1, 'nested': {'list': [1, 2.5, None, True]}, 'quote': '"\n\\'}
    one = body('json', [value])
    assert one.endswith(b'\n') and one.count(b'\n') == 1
    assert json.loads(one) == value
    assert 'Zoë 🚀'.encode() in one  # UTF-8 text, not \\u escapes
    many = body('json', [value, 'text', 7, [1]])
    assert json.loads(many) == [value, 'text', 7, [1]]
    assert many.startswith(b'[\n') and many.endswith(b']\n')
    assert len(many.splitlines()) == 6  # one item per line between the brackets
    batch_of_one = b''.join(writers.file_body('json', [writers.render_item('json', value)], array=True))
    assert json.loads(batch_of_one) == [value]


def test_jsonl_is_one_line_per_item_even_for_text_with_line_ends() -> None:
    items = [{'a': 1}, 'line one\nline two\r\n', None, [], 'Zoë']
    data = body('jsonl', items)
    lines = data.split(b'\n')
    assert lines[-1] == b'' and len(lines) == len(items) + 1
    assert [json.loads(line) for line in lines[:-1]] == items


@pytest.mark.parametrize('fmt', ['json', 'jsonl'])
@pytest.mark.parametrize('bad, reason', [
    (float('nan'), 'NaN'), (float('inf'), 'Infinity'), ({'x': float('-inf')}, 'Infinity'),
    ('\ud800', 'Unicode'), (b'\x00\xff', 'bytes'), ({1, 2}, 'JSON')])
def test_what_json_cannot_hold_is_named_with_its_index(fmt: str, bad: Any, reason: str) -> None:
    with pytest.raises(FileRenderError) as e:
        writers.render_item(fmt, bad, 3)
    assert e.value.index == 3 and reason in e.value.reason, e.value.reason


def test_json_limits_bound_nesting_and_integer_digits() -> None:
    limits = JsonLimits(max_depth=5, max_int_digits=10)
    deep: Any = 1
    for _ in range(6):
        deep = [deep]
    with pytest.raises(FileRenderError):
        writers.render_item('json', deep, 0, limits)
    with pytest.raises(FileRenderError):
        writers.render_item('jsonl', 10 ** 20, 0, limits)
    assert writers.render_item('json', [[[1]]], 0, limits).text == b'[[[1]]]'


def test_as_is_keeps_bytes_and_text_exactly() -> None:
    raw = bytes(range(256))
    assert writers.as_is(raw) == raw
    assert writers.as_is('plain ünïcode\r\n') == 'plain ünïcode\r\n'.encode()
    with pytest.raises(FileRenderError):
        writers.as_is('\udfff')


# CSV


def test_csv_header_from_the_keys_in_order_first_seen_and_values_as_text() -> None:
    rows = [{'id': 1, 'name': 'Ann, "the" first', 'ok': True},
            {'id': 2.5, 'note': 'multi\nline', 'ok': False, 'name': None},
            {'id': -3}]
    data = body('csv', rows)
    assert data.endswith(b'\r\n')
    assert read_csv(data) == [['id', 'name', 'ok', 'note'],
                              ['1', 'Ann, "the" first', 'true', ''],
                              ['2.5', '', 'false', 'multi\nline'],
                              ['-3', '', '', '']]


def test_csv_given_columns_pick_and_order_the_cells() -> None:
    columns = writers.check_columns(' total , id,missing ', 'sub')
    assert columns == ('total', 'id', 'missing')
    data = body('csv', [{'id': 'a', 'total': 10, 'secret': 'not written'}], columns)
    assert read_csv(data) == [['total', 'id', 'missing'], ['10', 'a', '']]
    assert b'not written' not in data


def test_csv_cells_that_look_like_formulas_or_hold_separators_survive_a_round_trip() -> None:
    hostile = {'a': '=1+2', 'b': '+cmd|x', 'c': ',;\t', 'd': '"', 'e': '\r', 'f': ' lead and trail ', 'g': 'é\u2028'}
    [header, row] = read_csv(body('csv', [hostile]))
    assert dict(zip(header, row, strict=True)) == hostile


@pytest.mark.parametrize('bad, reason', [
    ([1, 2], 'not a list'), ('text', 'not a string'), (7, 'not a number'), (None, 'not null'),
    ({'a': {'b': 1}}, "'a' is an object"), ({'a': [1]}, "'a' is a list"), ({'n': float('nan')}, 'finite'),
    ({'a': '\ud800'}, 'Unicode'), ({'\udc00': 1}, 'Unicode'), (b'{}', 'not bytes')])
def test_csv_takes_flat_objects_only(bad: Any, reason: str) -> None:
    with pytest.raises(FileRenderError) as e:
        writers.render_item('csv', bad, 5)
    assert e.value.index == 5 and reason in str(e.value), str(e.value)


@pytest.mark.parametrize('text, problem', [
    ('a,,b', 'empty'), ('a,b,a', 'twice'), ('a,\x00', 'control'), ('a,b\nc', 'control'), (',', 'empty'),
    (','.join(f'c{i}' for i in range(writers.MAX_COLUMNS + 1)), 'more than')])
def test_malformed_column_lists_are_refused_naming_the_option(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as e:
        writers.check_columns(text, 'subscription x')
    assert 'file_csv_columns' in str(e.value) and problem in str(e.value) and e.value.where == 'subscription x'


def test_no_columns_given_is_an_empty_tuple() -> None:
    assert writers.check_columns('', 'w') == () and writers.check_columns('  ', 'w') == ()


def test_large_csv_comes_in_several_chunks_and_reads_back_whole() -> None:
    rows = [{'n': i, 'text': 'x' * 100} for i in range(2000)]
    chunks = list(writers.file_body('csv', [writers.render_item('csv', r) for r in rows]))
    assert len(chunks) > 1
    parsed = read_csv(b''.join(chunks))
    assert parsed[0] == ['n', 'text'] and [int(r[0]) for r in parsed[1:]] == list(range(2000))


def test_extensions_and_unknown_formats() -> None:
    assert [writers.extension(f) for f in writers.FORMATS] == ['json', 'jsonl', 'csv']
    for call in (lambda: writers.extension('xml'), lambda: writers.render_item('xml', {}),
                 lambda: list(writers.file_body('xml', [writers.Rendered(b'1')])),
                 lambda: list(writers.file_body('json', []))):
        with pytest.raises(ValueError):
            call()
