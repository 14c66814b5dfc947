"""The streaming record readers of file channels: ``runtime.files.parsers``.

What a channel's user relies on: every format yields the records it should, with the line each
starts on; a bad file fails with a ``FileParseError`` naming the record and line; hostile input
(huge lines, bad bytes, NaN, deep nesting, NULs) fails cleanly without holding the file in memory;
and large files stream in constant memory.
"""

from __future__ import annotations

import io
import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import ConfigError, FileParseError
from runtime.files import parsers
from runtime.files.parsers import Record, check_csv_delimiter, check_encoding, digest, digest_bytes, read_records
from runtime.util.json_limits import JsonLimits

pytestmark = pytest.mark.unit

LIMITS = JsonLimits()
MB = 1024 * 1024


class Trickle(io.RawIOBase):
    """A stream that hands out at most `step` bytes per read, as a socket or an SFTP file may."""

    def __init__(self, data: bytes, step: int) -> None:
        self._data = data
        self._pos = 0
        self._step = step

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        n = self._step if size < 0 else min(size, self._step)
        chunk = self._data[self._pos:self._pos + n]
        self._pos += len(chunk)
        return chunk


class Endless(io.RawIOBase):
    """A stream of `head` followed by `fill` forever; counts the bytes it handed out."""

    def __init__(self, head: bytes, fill: bytes = b'x') -> None:
        self._head = head
        self._fill = fill
        self.served = 0

    def readable(self) -> bool:
        return True

    def read(self, size: int = -1) -> bytes:
        size = 65536 if size < 0 else size
        if self._head:
            chunk, self._head = self._head[:size], self._head[size:]
        else:
            chunk = (self._fill * (size // len(self._fill) + 1))[:size]
        self.served += len(chunk)
        return chunk


def read(data: bytes | io.RawIOBase, fmt: str, records: str = 'each', *, limit: int = MB,
         limits: JsonLimits = LIMITS, **options: Any) -> list[Record]:
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    return list(read_records(stream, fmt, records=records, max_record_bytes=limit, json_limits=limits, **options))


def values(data: bytes | io.RawIOBase, fmt: str, records: str = 'each', **options: Any) -> list[Any]:
    return [r.data for r in read(data, fmt, records, **options)]


def failure(data: bytes | io.RawIOBase, fmt: str, records: str = 'each', **options: Any) -> FileParseError:
    with pytest.raises(FileParseError) as info:
        read(data, fmt, records, **options)
    return info.value


# The error


def test_error_names_record_and_line() -> None:
    e = FileParseError(12, 13, "invalid JSON: Expecting ',' delimiter")
    assert str(e) == "record 12 (line 13): invalid JSON: Expecting ',' delimiter"
    assert (e.record_index, e.line, e.reason) == (12, 13, "invalid JSON: Expecting ',' delimiter")
    assert str(FileParseError(3, None, 'bad')) == 'record 3: bad'
    assert str(FileParseError(None, 4, 'bad')) == 'line 4: bad'
    assert str(FileParseError(None, None, 'empty file')) == 'empty file'
    assert isinstance(e, ValueError)


# Arguments


@pytest.mark.parametrize('fmt, records', [('xml', 'each'), ('json', 'all'), ('bytes', 'each')])
def test_impossible_arguments_are_refused_at_once(fmt: str, records: str) -> None:
    with pytest.raises(ValueError):
        read_records(io.BytesIO(b''), fmt, records=records, max_record_bytes=10, json_limits=LIMITS)


def test_check_encoding() -> None:
    assert check_encoding('UTF8', 'ch.encoding') == 'utf-8'
    assert check_encoding('latin-1', 'ch.encoding') == 'iso8859-1'
    for bad in ('no-such-codec', 'base64', 'rot13', ''):
        with pytest.raises(ConfigError, match='ch.encoding') as info:
            check_encoding(bad, 'ch.encoding')
        assert repr(bad) in str(info.value)


def test_check_csv_delimiter() -> None:
    assert check_csv_delimiter(';', 'w') == ';'
    assert check_csv_delimiter('\t', 'w') == '\t'
    for bad in ('', ';;', '"', '\n', '\r', '\x00'):
        with pytest.raises(ConfigError, match='csv_delimiter'):
            check_csv_delimiter(bad, 'w')


# bytes and text


def test_bytes_file_is_the_file() -> None:
    data = bytes(range(256)) * 3
    [r] = read(data, 'bytes', 'file')
    assert (r.index, r.line, r.data, r.raw) == (0, None, data, data)
    assert read(b'', 'bytes', 'file') == [Record(0, None, b'', b'')]


def test_text_file_is_the_text_without_bom() -> None:
    data = '\ufeffnaïve\r\nline 2\n'.encode()
    [r] = read(data, 'text', 'file')
    assert (r.index, r.line, r.data, r.raw) == (0, 1, 'naïve\r\nline 2\n', data)
    assert read(b'', 'text', 'file') == [Record(0, 1, '', b'')]


def test_text_lines_with_their_line_numbers() -> None:
    records = read('one\r\n\ntwo  \nnaïve'.encode(), 'text')
    assert [(r.index, r.line, r.data) for r in records] == [(0, 1, 'one'), (1, 2, ''), (2, 3, 'two  '),
                                                           (3, 4, 'naïve')]
    assert records[3].raw == 'naïve'.encode()
    assert read(b'', 'text') == []
    assert values(b'a\n', 'text') == ['a']


def test_characters_cut_by_reads() -> None:
    data = 'żółw\n€uro\n𝄞\n'.encode()
    assert values(Trickle(data, 1), 'text') == ['żółw', '€uro', '𝄞']
    assert values(Trickle('żółw\n'.encode('utf-16'), 1), 'text', encoding='utf-16') == ['żółw']


def test_text_in_other_encodings() -> None:
    assert values('żółw\nb'.encode('utf-16'), 'text', encoding='utf-16') == ['żółw', 'b']
    assert values('café\n'.encode('cp1252'), 'text', encoding='cp1252') == ['café']
    # raw is UTF-8 whatever the file's encoding: the same line has the same digest.
    [r] = read('café'.encode('latin-1'), 'text', encoding='latin-1')
    assert r.raw == 'café'.encode()


def test_invalid_bytes_name_their_line() -> None:
    data = b'ok\n' * 4 + b'bad \xff byte\nok\n'
    e = failure(data, 'text')
    assert (e.record_index, e.line) == (4, 5)
    assert 'not valid utf-8: byte 0xff at column 5' in str(e)
    e = failure(data, 'text', 'file')
    assert e.line == 5 and '0xff' in e.reason
    # A sequence cut short at the end of the file.
    assert failure(b'ok\n\xe2\x82', 'text').line == 2


def test_a_line_over_the_limit_fails() -> None:
    e = failure(b'short\n' + b'y' * 101 + b'\n', 'text', limit=100)
    assert (e.record_index, e.line) == (1, 2)
    assert 'larger than the limit of 100 bytes' in str(e)
    # Counted in UTF-8: 60 characters of two bytes each.
    assert failure('é'.encode() * 60, 'text', limit=100).record_index == 0
    assert values(b'y' * 100 + b'\r\n', 'text', limit=100) == ['y' * 100]
    assert failure(b'y' * 101, 'text', 'file', limit=100).record_index is None


@pytest.mark.parametrize('fmt', ['text', 'jsonl', 'csv'])
def test_an_endless_line_fails_without_being_held(fmt: str) -> None:
    head = b'a,b\n1,2\n' if fmt == 'csv' else b'"ok"\n' if fmt == 'jsonl' else b'ok\n'
    stream = Endless(head, b'"' if fmt == 'jsonl' else b'x')
    e = failure(stream, fmt, limit=MB)
    assert 'larger than the limit' in str(e) and e.line == (3 if fmt == 'csv' else 2)
    assert stream.served < MB + 3 * parsers.CHUNK_BYTES


def test_a_whole_file_over_the_limit_is_not_read_on() -> None:
    stream = Endless(b'')
    e = failure(stream, 'bytes', 'file', limit=MB)
    assert str(e) == f'the file is larger than the limit of {MB} bytes'
    assert stream.served < MB + 2 * parsers.CHUNK_BYTES


# JSON, whole file


def test_json_file() -> None:
    [r] = read(b'\xef\xbb\xbf {"b": [1, 2.5, "x"], "a": null}\n', 'json', 'file')
    assert (r.line, r.data) == (None, {'b': [1, 2.5, 'x'], 'a': None})
    assert values(b'"just a string"', 'json', 'file') == ['just a string']


@pytest.mark.parametrize('data', [b'', b' \n\t ', b'\xef\xbb\xbf'])
def test_json_file_empty(data: bytes) -> None:
    assert str(failure(data, 'json', 'file')) == 'empty file'


def test_json_file_faults() -> None:
    e = failure(b'{\n "a": 1,\n "b" 2\n}', 'json', 'file')
    assert (e.record_index, e.line) == (None, 3)
    assert "invalid JSON: Expecting ':' delimiter" in str(e)
    assert 'NaN' in str(failure(b'{"a": NaN}', 'json', 'file'))
    assert 'Infinity' in str(failure(b'[Infinity]', 'json', 'file'))
    assert 'nested deeper than 3 levels' in str(failure(b'[[[[1]]]]', 'json', 'file', limits=JsonLimits(max_depth=3)))
    assert 'nested deeper' in str(failure(b'[' * 100_000 + b']' * 100_000, 'json', 'file'))
    assert 'more than 100 digits' in str(failure(b'1' * 101, 'json', 'file'))
    assert 'more than' in str(failure(b'1' * 5000, 'json', 'file'))
    assert 'Extra data' in str(failure(b'{} {}', 'json', 'file'))


# JSON, one record per element


ARRAY = b'''[
  {"id": 1, "text": "has ] and , and \\" and \\\\"},
  [1, [2, [3]], {"deep": ["]"]}],
  "plain",   12345678901234567890 ,-1.5e10,true,
  null, {}, []
  ,
  "last"
]
'''

ARRAY_VALUES = [{'id': 1, 'text': 'has ] and , and " and \\'}, [1, [2, [3]], {'deep': [']']}], 'plain',
                12345678901234567890, -1.5e10, True, None, {}, [], 'last']


def test_json_array_elements_with_their_lines() -> None:
    records = read(ARRAY, 'json')
    assert [r.data for r in records] == ARRAY_VALUES
    assert [r.index for r in records] == list(range(10))
    assert [r.line for r in records] == [2, 3, 4, 4, 4, 4, 5, 5, 5, 7]


@pytest.mark.parametrize('step', [1, 2, 3, 5, 7, 64])
def test_json_array_elements_split_across_reads(step: int) -> None:
    assert [(r.line, r.data) for r in read(Trickle(ARRAY, step), 'json')] == \
           [(r.line, r.data) for r in read(ARRAY, 'json')]


@pytest.mark.parametrize('shift', range(-6, 7))
def test_json_array_values_cut_by_the_chunk_boundary(shift: int) -> None:
    # Each value in turn straddles the end of the first chunk: a number, an escape, a literal, a comma.
    tail = b'"a\\"b", 123456, -1.5e+10, true, null, "\\u00e9", {"k": [1]}]'
    data = b'[' + b' ' * (parsers.CHUNK_BYTES - 2 + shift) + tail
    assert values(data, 'json') == ['a"b', 123456, -1.5e10, True, None, 'é', {'k': [1]}]


def test_many_elements_across_many_chunks() -> None:
    items = [{'id': i, 'text': f'item, "{i}" ]', 'tags': [i, [i]]} for i in range(20_000)]
    data = json.dumps(items, indent=1).encode()
    assert len(data) > 20 * parsers.CHUNK_BYTES
    records = read(data, 'json')
    assert [r.data for r in records] == items
    assert records[-1].line == data.count(b'\n') - len(json.dumps(items[-1], indent=1).splitlines()) + 1


def test_json_array_elements_larger_than_a_chunk() -> None:
    big = ['x' * (3 * parsers.CHUNK_BYTES + 17), {'n': list(range(50_000))}]
    data = json.dumps(big + [1, 2]).encode()
    assert values(data, 'json') == big + [1, 2]
    assert values(Trickle(data, 10_000), 'json') == big + [1, 2]


def test_json_array_raw_is_canonical() -> None:
    one, two = read(b'[{"b": 1, "a": ["\xc3\xa9", 2]},\n {"a":["\\u00e9",2],\n"b":1}]', 'json')
    assert one.raw == two.raw == '{"a":["é",2],"b":1}'.encode()
    assert digest(one) == digest(two) == digest_bytes(one.raw)
    assert len(digest(one)) == 32 and int(digest(one), 16) >= 0


@pytest.mark.parametrize('data', [b'', b'  \n ', b'[]', b' [ \n ] \n', b'\xef\xbb\xbf[]'])
def test_json_array_without_elements(data: bytes) -> None:
    assert read(data, 'json') == []


@pytest.mark.parametrize('data, kind', [(b'{"a": [1]}', 'an object'), (b' "s"', 'a string'), (b'-1', 'a number'),
                                        (b'null', 'null'), (b'true', 'a boolean'), (b'<xml/>', "starts with '<'")])
def test_json_each_needs_an_array(data: bytes, kind: str) -> None:
    e = failure(data, 'json')
    assert e.record_index is None and e.line == 1
    assert kind in str(e) and 'array' in str(e)


@pytest.mark.parametrize('data, index, line', [
    (b'[1, 2', 1, 1),                  # the file ends after an element
    (b'[1,\n 2,\n', 2, 3),            # after a comma
    (b'[', 0, 1),
    (b'[1, {"a": [1, 2', 1, 1),        # inside an element
    (b'[1, "abc', 1, 1),
])
def test_json_array_not_closed(data: bytes, index: int, line: int) -> None:
    e = failure(data, 'json')
    assert (e.record_index, e.line) == (index, line)
    # The same when the file trickles in.
    assert (failure(Trickle(data, 1), 'json').record_index, e.line) == (index, line)


@pytest.mark.parametrize('data', [b'[1] x', b'[1]\n\n]', b'[1],[2]', b'[]{}'])
def test_json_data_after_the_array(data: bytes) -> None:
    e = failure(data, 'json')
    assert e.record_index is None and 'after the JSON array' in str(e)


def test_json_array_syntax_errors_name_the_record() -> None:
    e = failure(b'[1,\n {"a": 1}\n {"b": 2}]', 'json')
    assert (e.record_index, e.line) == (1, 3) and "',' or ']' expected" in str(e)
    e = failure(b'[1,\n\n {"a" 1}]', 'json')
    assert (e.record_index, e.line) == (1, 3) and "Expecting ':' delimiter" in str(e)
    assert failure(b'[1, 2,]', 'json').record_index == 2
    assert failure(b"[1, 'x']", 'json').record_index == 1


@pytest.mark.parametrize('text', ['NaN', '-Infinity', 'Infinity', '1e999'])
def test_json_array_refuses_nan_and_infinity(text: str) -> None:
    e = failure(f'[1,\n {{"a": {text}}}]'.encode(), 'json')
    assert (e.record_index, e.line) == (1, 2) and 'NaN/Infinity' in str(e)


def test_json_array_within_the_json_limits() -> None:
    limits = JsonLimits(max_depth=3, max_int_digits=5)
    assert values(b'[[[1]], 99999]', 'json', limits=limits) == [[[1]], 99999]
    e = failure(b'[[[1]], [[[[1]]]]]', 'json', limits=limits)  # each element counts from its own depth
    assert e.record_index == 1 and 'nested deeper than 3 levels' in str(e)
    assert 'more than 5 digits' in str(failure(b'[1, 100000]', 'json', limits=limits))
    # Deeper than the interpreter's recursion limit: refused, never a RecursionError.
    e = failure(b'[1, ' + b'[' * 50_000 + b']' * 50_000 + b']', 'json')
    assert e.record_index == 1 and 'nested deeper than 64 levels' in str(e)
    assert 'digits' in str(failure(b'[' + b'7' * 10_000 + b']', 'json'))


def test_json_array_invalid_bytes() -> None:
    e = failure(b'[1,\n"ok",\n"b\xffd", 4]', 'json')
    assert (e.record_index, e.line) == (2, 3) and 'not valid utf-8: byte 0xff' in str(e)
    e = failure(b'[1,\n\xff]', 'json')
    assert (e.record_index, e.line) == (1, 2) and 'not valid utf-8' in str(e)
    # A valid \\ud800 escape is JSON, not a bad byte.
    [r] = read(b'["\\ud800"]', 'json')
    assert r.data == '\ud800'


def test_json_array_in_utf16() -> None:
    assert values('[1, "żółw"]'.encode('utf-16'), 'json', encoding='utf-16') == [1, 'żółw']


def test_json_element_over_the_limit() -> None:
    e = failure(b'[1,\n"' + b'x' * 200 + b'"]', 'json', limit=100)
    assert (e.record_index, e.line) == (1, 2) and 'larger than the limit of 100 bytes' in str(e)
    stream = Endless(b'[1, "')
    e = failure(stream, 'json', limit=MB)
    assert e.record_index == 1 and 'larger than the limit' in str(e)
    assert stream.served < MB + 3 * parsers.CHUNK_BYTES
    # Inside an element that never ends: still the element that is too large.
    stream = Endless(b'[{"a": [', b'1, ')
    assert failure(stream, 'json', limit=MB).record_index == 0
    assert stream.served < MB + 3 * parsers.CHUNK_BYTES


def test_json_syntax_error_in_a_small_file_is_not_called_too_large() -> None:
    e = failure(b'[{"a": x}]', 'json', limit=4)
    assert 'invalid JSON' in str(e)


# JSON Lines


def test_json_lines() -> None:
    data = b'{"a": 1}\r\n\n   \n[1, "x"]\n  "s"  \n'
    records = read(data, 'jsonl')
    assert [(r.index, r.line, r.data) for r in records] == [(0, 1, {'a': 1}), (1, 4, [1, 'x']), (2, 5, 's')]
    assert records[2].raw == b'"s"'
    assert read(data, 'jsonl', 'file') == [Record(0, 1, [{'a': 1}, [1, 'x'], 's'], data)]
    assert read(b'\n\n', 'jsonl') == read(b'', 'jsonl', 'file') == []


def test_json_lines_faults() -> None:
    e = failure(b'1\n\n{"a": 1 "b": 2}\n', 'jsonl')
    assert str(e) == "record 1 (line 3): invalid JSON: Expecting ',' delimiter at column 9"
    assert failure(b'1\n[1,\n2]\n', 'jsonl').line == 2
    assert failure(b'1\n2 3\n', 'jsonl').line == 2
    e = failure(b'1\n{"x": NaN}\n', 'jsonl')
    assert e.line == 2 and 'NaN' in str(e)
    assert 'nested deeper' in str(failure(b'[[[1]]]', 'jsonl', limits=JsonLimits(max_depth=2)))
    assert 'nested deeper' in str(failure(b'[' * 5000 + b']' * 5000, 'jsonl'))
    e = failure(b'1\n"\xc3("\n', 'jsonl')
    assert (e.record_index, e.line) == (1, 2) and 'not valid utf-8: byte 0xc3' in str(e)
    e = failure(b'1\n2\n"bad \xff"\n', 'jsonl', 'file')
    assert (e.record_index, e.line) == (2, 3)


# CSV


def test_csv_rows_as_objects() -> None:
    data = 'id,name,note\r\n1,Anna,\r\n2,"Łukasz, Jr.","said ""hi"""\r\n\r\n3,Zoë\r\n'.encode()
    records = read(data, 'csv')
    assert [(r.index, r.line, r.data) for r in records] == [
        (0, 2, {'id': '1', 'name': 'Anna', 'note': ''}),
        (1, 3, {'id': '2', 'name': 'Łukasz, Jr.', 'note': 'said "hi"'}),
        (2, 5, {'id': '3', 'name': 'Zoë', 'note': ''}),       # fewer fields: missing ones are ''
    ]
    assert records[1].raw == '2\x1fŁukasz, Jr.\x1fsaid "hi"'.encode()
    assert records[2].raw == '3\x1fZoë\x1f'.encode()
    assert read(data, 'csv', 'file') == [Record(0, 1, [r.data for r in records], data)]


def test_csv_quoted_newline_is_one_record_at_its_first_line() -> None:
    data = b'a,b\n1,"two\nlines"\n3,"x\r\n\r\ny"\n4,z\n'
    records = read(data, 'csv')
    assert [(r.line, r.data['b']) for r in records] == [(2, 'two\nlines'), (4, 'x\r\n\r\ny'), (7, 'z')]
    assert [(r.line, r.data['b']) for r in read(Trickle(data, 3), 'csv')] == [(2, 'two\nlines'), (4, 'x\r\n\r\ny'),
                                                                             (7, 'z')]


@pytest.mark.parametrize('data', [b'', b'\n\n', b'a,b\n', b'a,b', b'\xef\xbb\xbfa,b\r\n\r\n'])
def test_csv_without_rows(data: bytes) -> None:
    assert read(data, 'csv') == []
    assert read(data, 'csv', 'file') == []


def test_csv_delimiter_encoding_and_bom() -> None:
    data = '\ufeffkod;miasto\n1;Łódź\n'.encode('utf-8')
    assert values(data, 'csv', csv_delimiter=';') == [{'kod': '1', 'miasto': 'Łódź'}]
    data = 'k\tv\n1\tcafé\n'.encode('cp1252')
    assert values(data, 'csv', csv_delimiter='\t', encoding='cp1252') == [{'k': '1', 'v': 'café'}]


def test_csv_row_with_more_fields_than_the_header() -> None:
    e = failure(b'a,b\n1,2\n1,2,3\n', 'csv')
    assert (e.record_index, e.line) == (1, 3) and '3 fields, the header 2' in str(e)


@pytest.mark.parametrize('header, column', [(b'id,name,id', "column 3 of the header is named 'id' like column 1"),
                                            (b'id,,x', 'column 2 of the header has no name'),
                                            (b'id, ', 'column 2 of the header has no name')])
def test_csv_header_names_must_be_unique_and_present(header: bytes, column: str) -> None:
    e = failure(b'\n' + header + b'\n1,2,3\n', 'csv')
    assert (e.record_index, e.line) == (None, 2) and column in str(e)


def test_csv_nul_character() -> None:
    e = failure(b'a,b\n1,2\n3,x\x00y\n', 'csv')
    assert (e.record_index, e.line) == (1, 3) and 'NUL' in str(e)
    assert failure(b'a\x00,b\n', 'csv').record_index is None


def test_csv_malformed_quoting() -> None:
    e = failure(b'a,b\n1,2\n3,"unterminated\n4,5\n', 'csv')
    assert (e.record_index, e.line) == (1, 3) and 'invalid CSV' in str(e)
    assert failure(b'a,b\n1,"x"y\n', 'csv').line == 2


def test_csv_invalid_bytes_name_the_row() -> None:
    e = failure(b'a,b\n1,2\n3,\xff\n', 'csv')
    assert (e.record_index, e.line) == (1, 3) and 'not valid utf-8: byte 0xff' in str(e)
    assert failure(b'a,\xfe\n1,2\n', 'csv').record_index is None


def test_csv_fields_beyond_the_csv_module_default_limit() -> None:
    big = 'x' * 200_000
    assert values(f'a,b\n1,"{big}"\n'.encode(), 'csv') == [{'a': '1', 'b': big}]


def test_csv_row_over_the_limit() -> None:
    e = failure(b'a,b\n1,2\n3,"' + b'x\n' * 60 + b'"\n', 'csv', limit=100)
    assert (e.record_index, e.line) == (1, 3) and 'larger than the limit of 100 bytes' in str(e)
    stream = Endless(b'a,b\n1,"', b'xx\n')
    e = failure(stream, 'csv', limit=MB)
    assert (e.record_index, e.line) == (0, 2)
    assert stream.served < MB + 3 * parsers.CHUNK_BYTES


# Constant memory


def _peak_traced_bytes(records: Iterator[Record]) -> tuple[int, int]:
    """How many records, and the peak of traced memory while they were taken one by one."""
    tracemalloc.start()
    try:
        count = sum(1 for _ in records)
        return count, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_json_array_streams_in_constant_memory(tmp_path: Path) -> None:
    path = tmp_path / 'big.json'
    with path.open('w') as f:
        f.write('[\n')
        f.write(',\n'.join(f'{{"id": {i}, "name": "item {i}"}}' for i in range(200_000)))
        f.write('\n]\n')
    assert path.stat().st_size > 7 * MB
    with path.open('rb') as f:
        count, peak = _peak_traced_bytes(read_records(f, 'json', records='each', max_record_bytes=MB,
                                                      json_limits=LIMITS))
    assert count == 200_000
    assert peak < 5 * MB


def test_a_large_csv_streams_in_constant_memory(tmp_path: Path) -> None:
    path = tmp_path / 'big.csv'
    with path.open('w') as f:
        f.write('id,name,amount\n')
        f.writelines(f'{i},"item, {i}",{i}.50\n' for i in range(200_000))
    assert path.stat().st_size > 4 * MB
    with path.open('rb') as f:
        count, peak = _peak_traced_bytes(read_records(f, 'csv', records='each', max_record_bytes=MB,
                                                      json_limits=LIMITS))
    assert count == 200_000
    assert peak < 5 * MB
