"""When to try a failed delivery again, and when to give up.

Socket-level errors (the subscriber could not be reached: connection refused or reset, timeouts,
and their ``requests``/``urllib3`` counterparts) start from ``wait_sock_err``; any other error
(an HTTP error status among them) from ``wait_non_sock_err``. The wait doubles with each attempt,
is capped by ``max_wait_secs``, and gets ±20 % jitter so that many failed messages do not all
come back at the same instant. After ``max_attempts``, or once the message has
expired, the decision is to dead-letter it. A message that cannot be rendered for its subscriber
(``UnrenderableMessage``: stored data that is not JSON within the limits) is dead-lettered at the
first attempt, with reason ``unrenderable``: trying again cannot change it. An error whose class
says ``retry_at_once = True`` (a WebSocket client that left with messages unacknowledged: nothing
went wrong with the messages themselves) is due again at once, with its attempt counted all the
same, so that ``max_attempts`` and expiry still dead-letter it.
"""

from __future__ import annotations

import errno
import random
import socket
from dataclasses import dataclass

from runtime.errors import UnrenderableMessage
from runtime.pubsub.options import DeliveryOptions

#: Share of the wait added or removed at random.
JITTER = 0.2

#: Dead-letter reason of a message that cannot be rendered for its subscriber (pulled, pushed or invoked).
REASON_UNRENDERABLE = 'unrenderable'

_SOCKET_ERRNOS = {errno.ECONNREFUSED, errno.ECONNRESET, errno.ECONNABORTED, errno.EHOSTUNREACH,
                  errno.ENETUNREACH, errno.ETIMEDOUT, errno.EPIPE}

#: Classes of HTTP client libraries (requests, urllib3) that mean "could not reach or hear from the
#: server"; matched by module and name along the MRO, so that this module imports no HTTP library.
_HTTP_CLIENT_MODULES = ('requests', 'urllib3')
_HTTP_CLIENT_SOCKET_ERRORS = {'ConnectionError', 'Timeout', 'TimeoutError', 'ProtocolError', 'ChunkedEncodingError',
                              'NewConnectionError'}


def _is_http_client_socket_error(exc: BaseException) -> bool:
    # requests' ConnectionError and Timeout are not the builtin ones and carry no errno; ReadTimeout
    # (no answer in time) does not even keep the socket.timeout it came from.
    return any(cls.__module__.startswith(_HTTP_CLIENT_MODULES) and cls.__name__ in _HTTP_CLIENT_SOCKET_ERRORS
               for cls in type(exc).__mro__)


def is_socket_error(exc: BaseException) -> bool:
    """Whether an error means the subscriber could not be reached (rather than that it failed)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, (ConnectionError, socket.timeout, TimeoutError, socket.gaierror)):
            return True
        if isinstance(exc, OSError) and exc.errno in _SOCKET_ERRNOS:
            return True
        if _is_http_client_socket_error(exc):
            return True
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
    return False


@dataclass(frozen=True)
class RedeliveryDecision:
    """What to do with a message whose delivery failed."""

    dead_letter: bool
    at: float = 0.0
    reason: str = ''


def decide(options: DeliveryOptions, delivery_count: int, exc: BaseException, now: float,
           expiration_time: float) -> RedeliveryDecision:
    """Retry at a time, or dead-letter (with the reason)."""
    if isinstance(exc, UnrenderableMessage):
        return RedeliveryDecision(True, reason=REASON_UNRENDERABLE)
    if delivery_count >= options.max_attempts:
        return RedeliveryDecision(True, reason='max_attempts')
    if getattr(exc, 'retry_at_once', False) is True:
        at = now
    else:
        base = options.wait_sock_err if is_socket_error(exc) else options.wait_non_sock_err
        wait = min(base * (2 ** (delivery_count - 1)), options.max_wait_secs)
        wait *= 1 + random.uniform(-JITTER, JITTER)
        at = now + wait
    if at >= expiration_time:
        return RedeliveryDecision(True, reason='expired')
    return RedeliveryDecision(False, at=at)
