"""Input bounded at the door: hostile bodies get a 4xx naming the problem, and the server keeps serving.

Against a real server (``target``): JSON nested too deeply, integers with too many digits, NaN and
Infinity, numbers that overflow to Infinity, invalid UTF-8, oversize bodies, broken chunked framing
(raw sockets, since no HTTP client sends it) and a body that arrives too slowly; unauthenticated to
an open channel, and authenticated to the pub/sub API. Each answer is a JSON error whose details
name the problem, ``/health`` answers afterwards, and the server log shows no traceback (checked by
``target`` at the end of the module). In-process, the broker refuses the same values when a
service publishes them.
"""

from __future__ import annotations

import base64
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runtime.errors import InvalidMessage
from runtime.http.pubsub_access import _publish_options
from runtime.service import Service
from runtime.testing import TestRuntime
from tests.live_server import LiveServer
from tests.security.conftest import PASSWORD, USER, forbidden_log_lines, start_target

OPEN = '/api/sec/open'
PUBLISH = '/pubsub/topic/sec.topic'
AUTH = (USER, PASSWORD)

#: (what it is, JSON text of a value, words the error must contain).
HOSTILE_VALUES = [
    ('nested 65 deep', '[' * 65 + ']' * 65, 'nested deeper than 64 levels'),
    ('nested 1,000 deep', '[' * 1000 + ']' * 1000, 'nested deeper than 64 levels'),
    ('nested 100,000 deep', '[' * 100_000 + ']' * 100_000, 'nested deeper than 64 levels'),
    ('objects nested 1,000 deep', '{"a":' * 1000 + '1' + '}' * 1000, 'nested deeper than 64 levels'),
    ('an integer of 101 digits', '1' * 101, 'integer of more than 100 digits'),
    ('an integer of 5,000 digits', '[-' + '7' * 5000 + ']', 'integer of more than 100 digits'),
    ('NaN', '{"x": NaN}', 'NaN'),
    ('Infinity', '[Infinity]', 'Infinity'),
    ('-Infinity', '[1, -Infinity]', '-Infinity'),
    ('1e999', '{"big": 1e999}', 'overflows to Infinity'),
]

_IDS = [v[0] for v in HOSTILE_VALUES]


def assert_error(r: Any, status: int, *named: str) -> dict[str, Any]:
    """A JSON error answer with this status whose details contain every one of named."""
    assert r.status_code == status, f'expected {status}, got {r.status_code}: {r.text[:500]}'
    body = r.json()
    assert body['is_ok'] is False and body['status'].startswith(str(status)), body
    for words in named:
        assert words in body['details'], body
    return body


def assert_healthy(server: LiveServer) -> None:
    """The server still answers /health."""
    assert server.request('GET', '/health').status_code == 200


# JSON values at the door


@pytest.mark.parametrize(('what', 'text', 'named'), HOSTILE_VALUES, ids=_IDS)
def test_an_open_channel_refuses_hostile_json_with_a_400_naming_it(target: LiveServer, what: str, text: str,
                                                                     named: str) -> None:
    r = target.request('POST', OPEN, data=text.encode(), headers={'Content-Type': 'application/json'})
    assert_error(r, 400, 'request body', named)
    assert_healthy(target)


@pytest.mark.parametrize(('what', 'text', 'named'), HOSTILE_VALUES, ids=_IDS)
def test_publishing_refuses_hostile_json_with_a_400_naming_it(target: LiveServer, what: str, text: str,
                                                                named: str) -> None:
    body = '{"data": ' + text + '}'
    r = target.request('POST', PUBLISH, data=body.encode(), auth=AUTH, headers={'Content-Type': 'application/json'})
    assert_error(r, 400, 'request body', named)
    assert_healthy(target)


def test_the_limits_are_exact_64_levels_and_100_digits_pass(target: LiveServer) -> None:
    deepest = '[' * 64 + ']' * 64
    longest = '9' * 100
    for text in (deepest, longest, '[1e308, -1e308, 0.5]'):
        r = target.request('POST', OPEN, data=text.encode(), headers={'Content-Type': 'application/json'})
        assert r.status_code == 200, r.text
        assert r.json()['echo'] == json.loads(text)
    # A publish body is an object around the data: data nested 63 deep makes a body 64 deep.
    r = target.request('POST', PUBLISH, data=('{"data": ' + '[' * 63 + ']' * 63 + '}').encode(), auth=AUTH)
    assert r.status_code == 200, r.text
    r = target.request('POST', PUBLISH, data=('{"data": ' + longest + '}').encode(), auth=AUTH)
    assert r.status_code == 200, r.text


def test_expiration_nan_or_infinity_is_refused_not_turned_into_one_second(target: LiveServer) -> None:
    for value in ('NaN', 'Infinity', '-Infinity', '1e999'):
        body = '{"data": 1, "expiration": ' + value + '}'
        r = target.request('POST', PUBLISH, data=body.encode(), auth=AUTH)
        assert_error(r, 400, 'request body', 'Infinity')
    assert_healthy(target)


def test_invalid_utf8_is_a_400_naming_it(target: LiveServer) -> None:
    for path, auth in ((OPEN, None), (PUBLISH, AUTH)):
        r = target.request('POST', path, data=b'{"data": "\xff\xfe"}', auth=auth,
                           headers={'Content-Type': 'application/json'})
        assert_error(r, 400, 'not valid UTF-8')
    assert_healthy(target)


def test_an_oversize_body_is_a_413_with_or_without_content_length(target: LiveServer) -> None:
    limit = 5 * 1024 * 1024
    big = b'[' + b'1,' * (limit // 2) + b'1]'
    r = target.request('POST', OPEN, data=big, headers={'Content-Type': 'application/json'})
    assert_error(r, 413, f'exceeds the limit of {limit} bytes')

    def chunks() -> Any:  # no Content-Length: requests sends it chunked
        for i in range(0, len(big), 256 * 1024):
            yield big[i:i + 256 * 1024]
    r = target.request('POST', PUBLISH, data=chunks(), auth=AUTH, headers={'Content-Type': 'application/json'})
    assert_error(r, 413, f'over the limit of {limit} bytes')  # at the chunk size that takes it past
    assert_healthy(target)


# Framing, over raw sockets


def raw_exchange(server: LiveServer, request: bytes, close_write: bool = False,
                 timeout: float = 10.0) -> tuple[int, bytes]:
    """Send bytes as they are, optionally close our side, and read one answer: (status, body)."""
    with socket.create_connection(('127.0.0.1', server.port), timeout=timeout) as sock:
        sock.sendall(request)
        if close_write:
            sock.shutdown(socket.SHUT_WR)
        data = b''
        while True:
            try:
                chunk = sock.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            data += chunk
            head, sep, body = data.partition(b'\r\n\r\n')
            if sep:
                length = [int(line.split(b':', 1)[1]) for line in head.split(b'\r\n')
                          if line.lower().startswith(b'content-length:')]
                if length and len(body) >= length[0]:
                    break
    head, _, body = data.partition(b'\r\n\r\n')
    assert head.startswith(b'HTTP/1.1 '), data[:300]
    return int(head.split()[1]), body


def _chunked(path: str, body: bytes, auth: bool = False) -> bytes:
    headers = [f'POST {path} HTTP/1.1', 'Host: 127.0.0.1', 'Content-Type: application/json',
               'Transfer-Encoding: chunked']
    if auth:
        headers.append('Authorization: Basic ' + base64.b64encode(f'{USER}:{PASSWORD}'.encode()).decode())
    return ('\r\n'.join(headers) + '\r\n\r\n').encode() + body


#: (what it is, chunked body bytes, whether we close our side after them, words the error must contain).
BROKEN_FRAMING = [
    ('a chunk size that is not hex', b'zz\r\n{}\r\n0\r\n\r\n', False,
     'broken chunked encoding (invalid chunk size)'),
    ('a chunk without its CRLF', b'2\r\n{}XX0\r\n\r\n', False, 'broken chunked encoding (missing chunk terminator)'),
    ('no CRLF after the last chunk', b'2\r\n{}\r\n0\r\n', True, 'broken chunked encoding (missing chunk terminator)'),
    ('a chunk cut short', b'10\r\n{"data": ', True, 'the connection ended before the whole body arrived'),
]


@pytest.mark.parametrize(('what', 'body', 'close_write', 'named'), BROKEN_FRAMING, ids=[b[0] for b in BROKEN_FRAMING])
@pytest.mark.parametrize('path', [OPEN, PUBLISH])
def test_broken_chunked_framing_is_a_400_naming_it(target: LiveServer, path: str, what: str, body: bytes,
                                                   close_write: bool, named: str) -> None:
    status, answer = raw_exchange(target, _chunked(path, body, auth=path == PUBLISH), close_write)
    assert status == 400, answer
    assert json.loads(answer)['details'] == f'request body: {named}'
    assert_healthy(target)


@pytest.mark.parametrize(('size_line', 'told'), [
    (b'f' * 40, 'more than 10^15'),  # 2^160 bytes announced
    (b'%x' % (5 * 1024 * 1024 + 1), str(5 * 1024 * 1024 + 1)),  # one byte over
    (b'10;ext=1\r\n' + b'x' * 16 + b'\r\n' + b'%x' % (5 * 1024 * 1024 - 15), str(5 * 1024 * 1024 + 1)),  # by a sum
], ids=['huge', 'one byte over', 'two chunks'])
def test_a_chunk_size_over_the_body_limit_is_a_413_without_more_input(target: LiveServer, size_line: bytes,
                                                                      told: str) -> None:
    # Before, the server waited for the announced data until the rate rule's 408 (over 10 s).
    status, answer = raw_exchange(target, _chunked(PUBLISH, size_line + b'\r\n{"data"', auth=True), timeout=5)
    assert status == 413, answer
    details = json.loads(answer)['details']
    assert details == f'request body: its chunks announce {told} bytes, over the limit of {5 * 1024 * 1024} bytes'
    assert_healthy(target)


def test_a_body_shorter_than_its_content_length_is_a_400(target: LiveServer) -> None:
    request = (f'POST {OPEN} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
               f'Content-Length: 100\r\n\r\n{{"a": ').encode()
    status, answer = raw_exchange(target, request, close_write=True)
    assert status == 400 and 'request body' in json.loads(answer)['details'], answer
    assert_healthy(target)


# Time


def test_a_body_that_arrives_too_slowly_is_a_408(tmp_path: Path) -> None:
    # Tight limits so the test is quick: 0.5 s of grace, then 1 MB/s.
    server = start_target(tmp_path, f'sqlite:///{tmp_path / "conduit.db"}',
                          extra_config='[http]\nbody_grace_secs = 0.5\nbody_min_rate_bytes = 1000000\n')
    try:
        request = (f'POST {OPEN} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n'
                   f'Content-Length: 1000\r\n\r\n[1, ').encode()
        started = time.monotonic()
        status, answer = raw_exchange(server, request)  # and then nothing more
        took = time.monotonic() - started
        assert status == 408, answer
        assert 'request body arrived too slowly' in json.loads(answer)['details']
        # Allowed: grace + what arrived (4 bytes) / rate, plus at most the smallest read's worth (0.5 s).
        assert 0.5 <= took < 3.0, took
        assert_healthy(server)
        # A body sent at once is read as always.
        assert server.request('POST', OPEN, json={'a': 1}).json() == {'echo': {'a': 1}}
    finally:
        server.stop()
    bad = forbidden_log_lines(server.log())
    assert not bad, bad


def test_publish_options_refuse_a_non_finite_expiration() -> None:
    for value in (float('nan'), float('inf'), float('-inf')):
        with pytest.raises(InvalidMessage, match='expiration must be a finite number'):
            _publish_options({'data': 1, 'expiration': value}, 60.0)
    assert _publish_options({'data': 1, 'expiration': 0.5}, 60.0)['expiration'] == 1  # Zato's leniency stays


# The broker, when a service publishes


class Publisher(Service):
    """Publishes its payload's data to sec.topic, with its payload's options."""

    name = 'sec.publisher'

    def handle(self) -> None:
        p = self.request.payload
        self.response.payload = self.publish('sec.topic', p['data'], **p.get('kw', {}))


@pytest.mark.parametrize(('data', 'kw', 'named'), [
    (json.loads('[' * 65 + ']' * 65), {}, 'data is nested deeper than 64 levels'),
    ({'n': 10 ** 100}, {}, 'data has an integer of more than 100 digits'),
    ({'n': -10 ** 5000}, {}, 'data has an integer of more than 100 digits'),
    ([float('nan')], {}, 'data has NaN'),
    ({'x': float('inf')}, {}, 'overflows to Infinity'),
    ({float('nan'): 1}, {}, 'data has NaN'),
    ({'ok': 1}, {'expiration': float('nan')}, 'expiration must be a positive, finite number'),
    ({'ok': 1}, {'expiration': float('inf')}, 'expiration must be a positive, finite number'),
], ids=['deep', 'digits', '5000-digits', 'nan', 'inf', 'nan-key', 'expiration-nan', 'expiration-inf'])
def test_the_broker_refuses_what_the_door_refuses(runtime_factory: Callable[..., TestRuntime], db_url: str,
                                                  data: Any, kw: dict[str, Any], named: str) -> None:
    rt = runtime_factory(Publisher, db_url=db_url)
    rt.catalog.create_topic('sec.topic')
    with pytest.raises(InvalidMessage) as e:
        rt.broker.publish('sec.topic', data, **kw)
    assert named in str(e.value)
    with pytest.raises(InvalidMessage):
        rt.invoke(Publisher, {'data': data, 'kw': kw})
    # Within the limits, published as before.
    assert rt.broker.publish('sec.topic', {'n': 10 ** 99, 'deep': json.loads('[' * 63 + ']' * 63)})
