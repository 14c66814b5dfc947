"""A database out of reach, as callers answer it: ``storage_errors`` turns it into StorageUnavailable (503).

The REST and WebSocket pub/sub APIs and the pull subscriber wrap their storage calls in it, so that a
database that is down or locked is one clear answer (nothing was changed) and every other database
error stays the fault it is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from runtime.errors import StorageUnavailable

_log = logging.getLogger(__name__)


@contextmanager
def storage_errors() -> Iterator[None]:
    """Turn a database that cannot be reached (or is locked) into StorageUnavailable (503)."""
    try:
        yield
    except (DBAPIError, PoolTimeout) as e:
        # Of the driver's errors, only these mean the database is out of reach: operational and interface
        # errors, and a session the server ended (one idle inside a transaction too long, after a stall:
        # runtime.db.engine.idle_transaction_options). Any other is a fault of its own.
        if isinstance(e, DBAPIError) and not (isinstance(e, (OperationalError, InterfaceError))
                                              or e.connection_invalidated):
            raise
        # The class name only: a driver's message may quote statement parameters, i.e. message data.
        cause = type(getattr(e, 'orig', None) or e).__name__
        _log.error('database unavailable: %s', cause)
        raise StorageUnavailable(f'storage unavailable, nothing was changed ({cause})') from None
