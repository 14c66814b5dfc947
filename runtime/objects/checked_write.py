"""A write of shared objects whose checks run in its transaction and may refuse it with an error.

The administration layers of security definitions and channels (``runtime.security.admin``,
``runtime.channels.admin``) write through ``write_checked``.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import IntegrityError

from runtime.cluster.sync import write_and_reload


def write_checked(engine: Engine, key: str, work: Callable[[Connection], Exception | None],
                  reload: Callable[[], None], conflict: Exception | None = None) -> None:
    """Run work(conn) with the sync key bumped in its transaction; reload this worker at once.

    work returns the error to raise when a check fails before it wrote anything: raising it inside
    the transaction would have gevent's thread pool (SQLite) print it as a crash. conflict, when
    given, is raised instead of an IntegrityError.
    """
    try:
        error = write_and_reload(engine, key, work, reload, wrote=lambda error: error is None)
    except IntegrityError:
        if conflict is None:
            raise
        raise conflict from None  # a concurrent request made the same object after work's check
    if error is not None:
        raise error
