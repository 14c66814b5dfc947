"""Dead-lettering: the one way a message moves to a dead-letter queue, and is announced.

Whatever dead-letters a message — the delivery loop, the sweeper, a service's pull, a REST
client's pull — does it through ``DeadLetterer.run``: the row is written through
``statements.dead_letter`` in the caller's transaction, and the observers (``after_dead_letter`` of
every observer: metrics, the archive, users' observers) hear of it once that transaction has
committed. A dead letter that was rolled back is never announced, and one whose transaction ran
twice (the group committer writes a batch again without an item that failed) is announced once.
Announcing happens outside the transaction and costs no round trip.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import Connection

from runtime.pubsub import statements
from runtime.pubsub.observers import Observers
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.statements import Delivery

_log = logging.getLogger(__name__)

T = TypeVar('T')

#: Runs work(conn) in one transaction and returns its result once committed (raises if it was not).
Write = Callable[[Callable[[Connection], T]], T]


class Moves:
    """The dead letters written in one transaction, to be announced once it commits."""

    __slots__ = ('moved',)

    def __init__(self) -> None:
        self.moved: list[tuple[SubInfo | None, Delivery, str, str, bool]] = []

    def add(self, conn: Connection, d: Delivery, reason: str, error: str, sub: SubInfo | None = None,
            log: bool = False) -> None:
        """Move d to its subscription's dead-letter queue in conn's transaction.

        ``log``: write a WARNING once committed (callers that logged the cause themselves, such as
        the delivery loop with its traceback, or that dead-letter in bulk, such as the sweeper, don't).
        """
        statements.dead_letter(conn, d, reason, error)
        self.moved.append((sub, d, reason, error, log))


class DeadLetterer:
    """Writes dead letters (runtime.pubsub.statements) and announces each to the observers after its commit."""

    def __init__(self, observers: Observers, sub_of: Callable[[int], SubInfo | None]) -> None:
        self._observers = observers
        #: The subscription of a queue, for dead letters whose writer did not name it.
        self._sub_of = sub_of

    def run(self, write: Write[T], work: Callable[[Connection, Moves], T]) -> T:
        """Run work(conn, moves) through write; announce what it dead-lettered once write returns."""
        moves = Moves()

        def attempt(conn: Connection) -> T:
            moves.moved.clear()  # of an earlier attempt, rolled back
            return work(conn, moves)

        result = write(attempt)
        self.announce(moves)
        return result

    def announce(self, moves: Moves) -> None:
        """Tell the observers of committed dead letters (one that fails is logged by ``Observers``)."""
        for sub, d, reason, error, log in moves.moved:
            sub = sub or self._sub_of(d.sub_id)
            if sub is None:  # removed meanwhile, with its dead letters
                continue
            if log:
                _log.warning('%s: message %s dead-lettered (%s): %s', sub.label, d.msg_id, reason, error)
            self._observers.emit('after_dead_letter', sub, d, reason, error)
