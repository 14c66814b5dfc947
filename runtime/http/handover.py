"""An answer whose messages count as delivered only once it was written to the client's socket.

An auto-ack pull (``POST /pubsub/messages/get`` with ``ack: "auto"``) holds what it hands over
(``runtime.pubsub.subscribers.pull.hold``) and answers with a ``HandOver`` body. Gunicorn writes a
WSGI body item by item with ``sendall`` and asks for the next item only once the previous one was
written, and it closes the body whatever happened. So the messages are settled (removed from their
queues) when the body was written and the client had not gone, and released (due again, as they
were) when the write failed, the client had closed its connection before it or reset it right
after it, or the body was never asked for. What the kernel accepted for a client that then never reads
it cannot be told from here: that is the limit of an acknowledgement without a reply, and
``ack: "manual"`` is the way to be sure.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from typing import Any

from runtime.errors import StorageUnavailable
from runtime.pubsub.subscribers.pull import Held

_log = logging.getLogger(__name__)


def peer_gone(sock: Any, closed_counts: bool = True) -> bool:
    """Whether the client has reset (or, with closed_counts, closed) its connection; checked without waiting.

    False when it cannot be told. A client that read a whole answer may close at once, so after the
    write only a reset means the answer was lost: Linux resets instead of closing when the client's
    process closed with data it had not read.
    """
    if sock is None:
        return False
    timeout = sock.gettimeout()
    try:
        sock.settimeout(0.0)
        # A pipelined next request is data (not gone); an orderly close reads as b''.
        return sock.recv(1, socket.MSG_PEEK) == b'' and closed_counts
    except (BlockingIOError, InterruptedError):
        return False  # nothing waiting: still there
    except ValueError:
        return False  # a TLS socket takes no flags: unknown
    except OSError:
        return True  # reset, or the socket is already closed
    finally:
        try:
            sock.settimeout(timeout)
        except OSError:
            pass


class HandOver:
    """A WSGI body of held messages: settled once it was written, released when it was not."""

    def __init__(self, body: bytes, held: Held, sock: Any) -> None:
        self._body = body
        self._held = held
        self._sock = sock

    def __iter__(self) -> Iterator[bytes]:
        if peer_gone(self._sock):
            return  # the client gave up while the pull ran: close() releases what it held
        yield self._body
        # Asked for more: the server's sendall of the body returned.
        if not peer_gone(self._sock, closed_counts=False):
            self._end(self._held.settle, 'acknowledge')

    def close(self) -> None:
        """Called by the server whatever happened: what was not settled is released."""
        self._end(self._held.release, 'put back')

    def _end(self, action: Callable[[], None], what: str) -> None:
        if self._held.settled:
            return
        try:
            action()
        except StorageUnavailable:
            # The answer is out (or not) already; the hold runs out and the messages come again.
            _log.warning('Could not %s %d pulled message(s): the database is unavailable; they are due again '
                         'when their hold ends', what, len(self._held.pulled))
