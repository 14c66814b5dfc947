"""The redelivery policy: ``runtime.pubsub.retry``, pure functions.

Socket-level errors wait ``wait_sock_err``, others ``wait_non_sock_err``; the wait doubles with
each attempt, is capped by ``max_wait_secs`` and gets ±20 % jitter. After ``max_attempts``, or
when the next attempt would come after the message's expiration, the message is dead-lettered.
"""

from __future__ import annotations

import errno
import socket

import pytest

from runtime.errors import UnrenderableMessage
from runtime.pubsub.options import DeliveryOptions
from runtime.pubsub.retry import JITTER, REASON_UNRENDERABLE, RedeliveryDecision, decide, is_socket_error

pytestmark = pytest.mark.unit

NOW = 1_000_000.0
NEVER = NOW + 10 ** 9

OPTIONS = DeliveryOptions(wait_sock_err=10.0, wait_non_sock_err=3.0, max_wait_secs=600.0, max_attempts=25)


def _wrapped(inner: BaseException) -> RuntimeError:
    """A RuntimeError raised 'from' inner, as a client library wraps a low-level error."""
    try:
        try:
            raise inner
        except BaseException as e:
            raise RuntimeError('the request failed') from e
    except RuntimeError as outer:
        return outer


def _wait(exc: BaseException, attempt: int, options: DeliveryOptions = OPTIONS) -> float:
    decision = decide(options, attempt, exc, NOW, NEVER)
    assert not decision.dead_letter
    return decision.at - NOW


@pytest.mark.parametrize('exc', [
    ConnectionRefusedError(errno.ECONNREFUSED, 'Connection refused'),
    ConnectionResetError(errno.ECONNRESET, 'Connection reset by peer'),
    socket.timeout('timed out'),  # noqa: UP041 - the name users write; an alias of TimeoutError
    TimeoutError('timed out'),
    OSError(errno.EHOSTUNREACH, 'No route to host'),
    socket.gaierror(-2, 'Name or service not known'),
    _wrapped(ConnectionRefusedError(errno.ECONNREFUSED, 'Connection refused')),
    _wrapped(socket.timeout('timed out')),  # noqa: UP041
], ids=lambda e: f'{type(e).__name__}({e})')
def test_socket_errors_are_recognised(exc: BaseException) -> None:
    assert is_socket_error(exc)


@pytest.mark.parametrize('exc', [
    ValueError('bad data'),
    KeyError('customer_id'),
    RuntimeError('the service failed'),
    OSError(errno.ENOENT, 'No such file or directory'),
    _wrapped(ValueError('bad data')),
], ids=lambda e: f'{type(e).__name__}({e})')
def test_other_errors_are_not_socket_errors(exc: BaseException) -> None:
    assert not is_socket_error(exc)


def test_a_cycle_of_causes_ends() -> None:
    a, b = ValueError('a'), ValueError('b')
    a.__cause__, b.__cause__ = b, a
    assert not is_socket_error(a)


@pytest.mark.parametrize('exc, base', [
    (ConnectionRefusedError(errno.ECONNREFUSED, 'refused'), 10.0),
    (socket.timeout('timed out'), 10.0),  # noqa: UP041
    (_wrapped(ConnectionRefusedError(errno.ECONNREFUSED, 'refused')), 10.0),
    (ValueError('bad data'), 3.0),
])
def test_first_wait_depends_on_the_kind_of_error(exc: BaseException, base: float) -> None:
    for _ in range(200):
        assert base * (1 - JITTER) <= _wait(exc, 1) <= base * (1 + JITTER)


def test_waits_grow_exponentially_and_are_capped() -> None:
    options = DeliveryOptions(wait_non_sock_err=1.0, max_wait_secs=20.0, max_attempts=100)
    for attempt in range(1, 12):
        expected = min(1.0 * 2 ** (attempt - 1), 20.0)
        waits = [_wait(ValueError('x'), attempt, options) for _ in range(200)]
        assert all(expected * (1 - JITTER) <= w <= expected * (1 + JITTER) for w in waits), (attempt, waits)
    # The capped wait never grows again, whatever the attempt.
    assert max(_wait(ValueError('x'), 60, options) for _ in range(200)) <= 20.0 * (1 + JITTER)


def test_jitter_spreads_the_waits() -> None:
    waits = {round(_wait(ValueError('x'), 1), 6) for _ in range(100)}
    assert len(waits) > 50
    assert min(waits) < 3.0 < max(waits)


def test_max_attempts_dead_letters() -> None:
    options = DeliveryOptions(max_attempts=3, wait_non_sock_err=0.05)
    assert not decide(options, 1, ValueError('x'), NOW, NEVER).dead_letter
    assert not decide(options, 2, ValueError('x'), NOW, NEVER).dead_letter
    for count in (3, 4):
        decision = decide(options, count, ValueError('x'), NOW, NEVER)
        assert decision.dead_letter
        assert decision.reason == 'max_attempts'
    # A socket error does not earn more attempts.
    assert decide(options, 3, ConnectionRefusedError(), NOW, NEVER).reason == 'max_attempts'


def test_retry_past_expiration_dead_letters() -> None:
    # The next attempt (about 3 s away) would come after the message expired (in 1 s).
    decision = decide(OPTIONS, 1, ValueError('x'), NOW, NOW + 1.0)
    assert decision.dead_letter
    assert decision.reason == 'expired'
    # One that still lands before the expiration is retried.
    decision = decide(OPTIONS, 1, ValueError('x'), NOW, NOW + 100.0)
    assert not decision.dead_letter
    assert NOW < decision.at < NOW + 100.0


def test_an_unrenderable_message_is_dead_lettered_at_once() -> None:
    decision = decide(OPTIONS, 1, UnrenderableMessage('zpsm1', 'not JSON'), NOW, NEVER)
    assert decision == RedeliveryDecision(True, reason=REASON_UNRENDERABLE)


def test_an_http_client_library_s_connection_error_is_a_socket_error() -> None:
    # Matched by module and name, so that the retry policy imports no HTTP library.
    connection_error = type('ConnectionError', (IOError,), {'__module__': 'requests.exceptions'})
    read_timeout = type('ReadTimeout', (type('Timeout', (IOError,), {'__module__': 'requests.exceptions'}),),
                        {'__module__': 'requests.exceptions'})
    assert is_socket_error(connection_error('refused'))
    assert is_socket_error(read_timeout('no answer'))
    assert not is_socket_error(type('HTTPError', (IOError,), {'__module__': 'requests.exceptions'})('500'))


class _LeftEarly(Exception):
    retry_at_once = True


def test_an_error_marked_retry_at_once_is_due_again_at_once_whatever_the_attempt() -> None:
    for attempt in (1, 2, 10, 24):
        assert decide(OPTIONS, attempt, _LeftEarly('gone'), NOW, NEVER) == RedeliveryDecision(False, at=NOW)


def test_retry_at_once_still_dead_letters_after_max_attempts_and_past_expiry() -> None:
    assert decide(OPTIONS, 25, _LeftEarly('gone'), NOW, NEVER) == RedeliveryDecision(True, reason='max_attempts')
    assert decide(OPTIONS, 3, _LeftEarly('gone'), NOW, NOW) == RedeliveryDecision(True, reason='expired')


def test_only_a_true_retry_at_once_counts() -> None:
    class Truthy(Exception):
        retry_at_once = 'yes'
    assert _wait(Truthy('x'), 1) >= 3.0 * (1 - JITTER)


def test_the_websocket_errors_say_how_they_are_retried() -> None:
    from runtime.pubsub.subscribers.websocket import AckTimeout, ClientGone
    assert decide(OPTIONS, 3, ClientGone(), NOW, NEVER) == RedeliveryDecision(False, at=NOW)
    wait = _wait(AckTimeout(30), 3)
    assert 3.0 * 4 * (1 - JITTER) <= wait <= 3.0 * 4 * (1 + JITTER)
