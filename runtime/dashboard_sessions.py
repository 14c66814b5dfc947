"""Signed-in dashboard users: sessions kept in the database, so that every worker knows them.

The cookie holds a random token; the table (``DashboardSession``) holds only its sha256, so a
copy of the database signs nobody in. A session ends ``ttl_secs`` after sign-in whatever its
activity, or after ``idle_secs`` without a request, or at sign-out. Activity is written at most
once a ``TOUCH_INTERVAL_SECS`` per session, not at every request: idleness is known to that
precision. Each session has its own CSRF token, sent back with every change.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, delete, insert, or_, select, update

from runtime.db.blocking import run_transaction
from runtime.db.models import DashboardSession

#: Activity is written at most this often per session.
TOUCH_INTERVAL_SECS = 60.0

#: Roles a session may have.
ROLES = ('admin', 'viewer')

#: Longest cookie token accepted (a token is 43 characters; anything much longer is not one).
MAX_TOKEN_CHARS = 128

#: What a token made by ``create`` looks like (secrets.token_urlsafe(32)): anything else is never looked up.
TOKEN_SHAPE = re.compile(r'[A-Za-z0-9_-]{43}')


@dataclass(frozen=True, slots=True)
class Session:
    """One signed-in user, as a request sees it."""

    token_hash: str
    actor: str
    role: str
    csrf_token: str
    expires_at: float
    last_seen_at: float

    @property
    def can_write(self) -> bool:
        """Whether this user may change anything (a viewer may not)."""
        return self.role == 'admin'


def token_hash(token: str) -> str:
    """The stored form of a cookie token."""
    return hashlib.sha256(token.encode('utf-8', 'replace')).hexdigest()


def csrf_matches(session: Session, sent: str | None) -> bool:
    """Whether a request's CSRF token is this session's (compared in constant time)."""
    return bool(sent) and hmac.compare_digest(session.csrf_token.encode(), str(sent).encode('utf-8', 'replace'))


class SessionStore:
    """Creates, finds, refreshes and ends dashboard sessions."""

    def __init__(self, engine: Engine, ttl_secs: float, idle_secs: float,
                 clock: Callable[[], float] = time.time) -> None:
        self._engine = engine
        self.ttl_secs = ttl_secs
        self.idle_secs = idle_secs
        self._clock = clock

    def create(self, actor: str, role: str, client: str = '') -> tuple[str, Session]:
        """A new session: (the cookie's token, the session). Only the token's hash is stored."""
        if role not in ROLES:
            raise ValueError(f'role must be one of {ROLES}, not {role!r}')
        token = secrets.token_urlsafe(32)
        now = self._clock()
        session = Session(token_hash(token), actor[:200], role, secrets.token_urlsafe(32), now + self.ttl_secs, now)
        row = {'token_hash': session.token_hash, 'actor': session.actor, 'role': role,
               'csrf_token': session.csrf_token, 'client': client[:100], 'created_at': now,
               'expires_at': session.expires_at, 'last_seen_at': now}
        run_transaction(self._engine, lambda c: c.execute(insert(DashboardSession).values(**row)))
        return token, session

    def lookup(self, token: str | None) -> Session | None:
        """The live session of a cookie token, or None (unknown, expired or idle too long)."""
        if not token or len(token) > MAX_TOKEN_CHARS or not TOKEN_SHAPE.fullmatch(token):
            return None
        key = token_hash(token)
        row = run_transaction(self._engine, lambda c: c.execute(
            select(DashboardSession).where(DashboardSession.token_hash == key)).first(), write=False)
        if row is None:
            return None
        now = self._clock()
        if row.expires_at <= now or row.last_seen_at + self.idle_secs <= now:
            self.delete(token)
            return None
        return Session(row.token_hash, row.actor, row.role, row.csrf_token, row.expires_at, row.last_seen_at)

    def touch(self, session: Session) -> None:
        """Record activity, unless it was recorded less than TOUCH_INTERVAL_SECS ago."""
        now = self._clock()
        if now - session.last_seen_at < TOUCH_INTERVAL_SECS:
            return
        run_transaction(self._engine, lambda c: c.execute(
            update(DashboardSession).where(DashboardSession.token_hash == session.token_hash)
            .values(last_seen_at=now)))

    def delete(self, token: str) -> None:
        """End a session (sign-out); nothing happens for an unknown token."""
        key = token_hash(token)
        run_transaction(self._engine, lambda c: c.execute(
            delete(DashboardSession).where(DashboardSession.token_hash == key)))

    def purge_expired(self) -> int:
        """Remove every session that has ended; returns how many."""
        now = self._clock()

        def work(conn: Connection) -> int:
            result = conn.execute(delete(DashboardSession).where(or_(
                DashboardSession.expires_at <= now, DashboardSession.last_seen_at <= now - self.idle_secs)))
            return result.rowcount or 0
        return run_transaction(self._engine, work)
