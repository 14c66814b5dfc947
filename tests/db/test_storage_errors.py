"""Database errors a pull or an HTTP call can meet: which are the database being away (503), which are faults."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import DBAPIError, IntegrityError, InternalError, OperationalError

from runtime.db.unavailable import storage_errors
from runtime.errors import StorageUnavailable

pytestmark = pytest.mark.unit


class _DriverError(Exception):
    pass


def _raise(error: Exception) -> None:
    with storage_errors():
        raise error


def test_a_session_the_server_ended_is_storage_unavailable() -> None:
    # What psycopg raises once PostgreSQL has ended a session idle in a transaction for too long: before,
    # it went out as an internal error, not the 503 of the database being away.
    ended = InternalError('SELECT 1', None, _DriverError('terminating connection'), connection_invalidated=True)
    with pytest.raises(StorageUnavailable, match='_DriverError'):
        _raise(ended)


def test_a_connection_lost_is_storage_unavailable() -> None:
    with pytest.raises(StorageUnavailable):
        _raise(OperationalError('SELECT 1', None, _DriverError('server closed the connection')))


def test_other_database_errors_are_left_as_they_are() -> None:
    for error in (IntegrityError('INSERT', None, _DriverError('duplicate key')),
                  InternalError('SELECT 1', None, _DriverError('internal'))):
        with pytest.raises(DBAPIError):
            _raise(error)
