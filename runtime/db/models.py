"""SQLAlchemy models of everything the runtime keeps in its database.

The schema itself is created and upgraded by the Alembic migrations in ``migrations/``; these
models must match them (a test compares the two).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, Boolean, DateTime, Integer, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Base of every model."""


class Deployment(Base):
    """One hot deployment or undeployment, in the order every worker applies them."""

    __tablename__ = 'conduit_deployment'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: 'deploy' (a module's source) or 'undeploy' (one service name).
    kind: Mapped[str] = mapped_column(String(16))
    module_name: Mapped[str] = mapped_column(String(200))
    file_name: Mapped[str] = mapped_column(String(400), default='')
    source: Mapped[str] = mapped_column(Text, default='')
    source_hash: Mapped[str] = mapped_column(String(64), default='')
    #: JSON list of the service names the module defined (or the one undeployed).
    service_names: Mapped[str] = mapped_column(Text, default='[]')
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class BasicAuthDef(Base):
    """A Basic Auth security definition; the password is stored only as a scrypt hash."""

    __tablename__ = 'conduit_sec_basic_auth'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    username: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str] = mapped_column(String(400))
    realm: Mapped[str] = mapped_column(String(200), default='Conduit')
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    #: 'config' for objects from config/objects (re-applied from files), 'api' otherwise.
    origin: Mapped[str] = mapped_column(String(16), default='api')


class RestChannel(Base):
    """A REST channel: URL path template and methods mapped to a service."""

    __tablename__ = 'conduit_channel_rest'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    service: Mapped[str] = mapped_column(String(200))
    url_path: Mapped[str] = mapped_column(String(1000))
    #: Comma-separated upper-case methods; empty means any.
    methods: Mapped[str] = mapped_column(String(200), default='')
    data_format: Mapped[str] = mapped_column(String(16), default='json')
    #: Name of a BasicAuthDef, or empty for no security.
    security: Mapped[str] = mapped_column(String(200), default='')
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    origin: Mapped[str] = mapped_column(String(16), default='api')


class SyncState(Base):
    """A version counter per kind of shared object; workers reload a kind when it changes."""

    __tablename__ = 'conduit_sync_state'

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Free text, e.g. the hash of the config/objects files last applied.
    value: Mapped[str] = mapped_column(Text, default='')
