"""Signed-in dashboard users: sessions kept in the database, so that every worker knows them.

The cookie holds a random token; the table (``DashboardSession``) holds only its sha256, so a
copy of the database signs nobody in. A session ends ``ttl_secs`` after sign-in whatever its
activity, or after ``idle_secs`` without a request, or at sign-out. Activity is written at most
once a ``TOUCH_INTERVAL_SECS`` per session, not at every request: idleness is known to that
precision. Each session has its own CSRF token, sent back with every change.

A session also ends when the password it signed in with changes. ``bind_credentials`` (each
worker, at start) checks the configured admin and viewer passwords against the scrypt hashes in
``DashboardCredential``; when one no longer matches, or its user name changed, that role gets a new
random generation and its sessions are deleted. Every session records its role's generation at
sign-in, and ``lookup`` compares it with the stored one in the same query that finds the session,
so a worker that still runs with an older password cannot keep its sessions alive elsewhere.
``end_all`` ends every session at once (the admin API, the CLI and the dashboard's button).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import Connection, Engine, delete, func, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from runtime.db.blocking import run_transaction
from runtime.db.models import DashboardCredential, DashboardSession
from runtime.security.basic_auth import hash_password, verify_password

_log = logging.getLogger(__name__)

#: Activity is written at most this often per session.
TOUCH_INTERVAL_SECS = 60.0

#: Roles a session may have.
ROLES = ('admin', 'viewer')

#: Longest cookie token accepted (a token is 43 characters; anything much longer is not one).
MAX_TOKEN_CHARS = 128

#: Tries at recording a changed credential while other workers record it too (each try re-reads the row).
MAX_CREDENTIAL_TRIES = 5

#: Most sessions ``live`` lists.
MAX_LISTED = 1000

#: What a token made by ``create`` looks like (secrets.token_urlsafe(32)): anything else is never looked up.
TOKEN_SHAPE = re.compile(r'[A-Za-z0-9_-]{43}')


@dataclass(frozen=True, slots=True)
class SignedIn:
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


def csrf_matches(session: SignedIn, sent: str | None) -> bool:
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
        #: The credential generation of each role, as this worker's passwords have it (bind_credentials).
        self._generations: dict[str, str] = {}

    def bind_credentials(self, credentials: Mapping[str, tuple[str, str]]) -> dict[str, str]:
        """Record each role's (user name, password) of this worker; a changed one ends that role's sessions.

        Returns each role's scrypt hash of its password (the stored one, or the one stored anew), which
        the worker checks sign-ins against, so that it need not hash the passwords once more. Costs one
        scrypt per role (two when a password changed): called once, when a worker starts.
        """
        hashes: dict[str, str] = {}
        for role, (username, password) in credentials.items():
            if role not in ROLES:
                raise ValueError(f'role must be one of {ROLES}, not {role!r}')
            self._generations[role], hashes[role] = self._generation_of(role, username[:200], password)
        return hashes

    def _generation_of(self, role: str, username: str, password: str) -> tuple[str, str]:
        """The stored generation of a role's credentials (made anew when they changed), and their hash."""
        for _ in range(MAX_CREDENTIAL_TRIES):
            row = run_transaction(self._engine, lambda c: c.execute(
                select(DashboardCredential).where(DashboardCredential.role == role)).first(), write=False)
            if row is not None and row.username == username and verify_password(password, row.password_hash):
                return row.generation, row.password_hash
            # Hashed before the transaction: scrypt takes tens of milliseconds, the write lock must not wait.
            new = {'role': role, 'username': username, 'password_hash': hash_password(password),
                   'generation': secrets.token_urlsafe(32), 'changed_at': self._clock()}
            ended = run_transaction(self._engine, partial(_replace_credential, old=row, new=new))
            if ended is not None:
                if row is not None:
                    _log.info('the dashboard %s credentials changed: %d of its sessions ended', role, ended)
                return new['generation'], new['password_hash']
            # Another worker recorded this role's credentials meanwhile: read again, it may be this password.
        raise RuntimeError(f'the dashboard {role} credentials kept changing under this worker; start it again')

    def create(self, actor: str, role: str, client: str = '') -> tuple[str, SignedIn]:
        """A new session: (the cookie's token, the session). Only the token's hash is stored."""
        if role not in ROLES:
            raise ValueError(f'role must be one of {ROLES}, not {role!r}')
        generation = self._generations.get(role)
        if generation is None:
            raise ValueError(f'no {role} credentials were bound to the session store')
        token = secrets.token_urlsafe(32)
        now = self._clock()
        session = SignedIn(token_hash(token), actor[:200], role, secrets.token_urlsafe(32), now + self.ttl_secs, now)
        row = {'token_hash': session.token_hash, 'actor': session.actor, 'role': role,
               'csrf_token': session.csrf_token, 'client': client[:100], 'created_at': now,
               'expires_at': session.expires_at, 'last_seen_at': now, 'credential': generation}
        run_transaction(self._engine, lambda c: c.execute(insert(DashboardSession).values(**row)))
        return token, session

    def lookup(self, token: str | None) -> SignedIn | None:
        """The live session of a cookie token, or None (unknown, expired, idle too long or its password changed)."""
        if not token or len(token) > MAX_TOKEN_CHARS or not TOKEN_SHAPE.fullmatch(token):
            return None
        key = token_hash(token)
        # The role's current generation comes with the session, in one query: no extra round trip.
        row = run_transaction(self._engine, lambda c: c.execute(
            select(DashboardSession, DashboardCredential.generation)
            .outerjoin(DashboardCredential, DashboardCredential.role == DashboardSession.role)
            .where(DashboardSession.token_hash == key)).first(), write=False)
        if row is None:
            return None
        now = self._clock()
        if (row.expires_at <= now or row.last_seen_at + self.idle_secs <= now or row.generation is None
                or row.credential != row.generation):
            self.delete(token)
            return None
        return SignedIn(row.token_hash, row.actor, row.role, row.csrf_token, row.expires_at, row.last_seen_at)

    def touch(self, session: SignedIn) -> None:
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

    def end_all(self, role: str | None = None) -> int:
        """End every session (of one role only, when given); returns how many were live or not yet purged."""
        if role is not None and role not in ROLES:
            raise ValueError(f'role must be one of {ROLES}, not {role!r}')

        def work(conn: Connection) -> int:
            stmt = delete(DashboardSession)
            if role is not None:
                stmt = stmt.where(DashboardSession.role == role)
            return conn.execute(stmt).rowcount or 0
        return run_transaction(self._engine, work)

    def live(self, limit: int = MAX_LISTED) -> tuple[int, list[dict[str, Any]]]:
        """(how many sessions are live, the newest of them): who, role, client and times, never a token."""
        now = self._clock()
        alive = (DashboardSession.expires_at > now, DashboardSession.last_seen_at > now - self.idle_secs,
                 DashboardSession.credential == DashboardCredential.generation)

        def work(conn: Connection) -> tuple[int, list[dict[str, Any]]]:
            joined = select(DashboardSession).join(DashboardCredential,
                                                   DashboardCredential.role == DashboardSession.role)
            total = conn.execute(select(func.count()).select_from(joined.where(*alive).subquery())).scalar_one()
            rows = conn.execute(joined.where(*alive).order_by(DashboardSession.created_at.desc()).limit(limit))
            return total, [{'actor': r.actor, 'role': r.role, 'client': r.client, 'created_at': r.created_at,
                            'last_seen_at': r.last_seen_at, 'expires_at': r.expires_at} for r in rows]
        return run_transaction(self._engine, work, write=False)

    def purge_expired(self) -> int:
        """Remove every session that has ended; returns how many."""
        now = self._clock()

        def work(conn: Connection) -> int:
            result = conn.execute(delete(DashboardSession).where(or_(
                DashboardSession.expires_at <= now, DashboardSession.last_seen_at <= now - self.idle_secs)))
            return result.rowcount or 0
        return run_transaction(self._engine, work)


def _replace_credential(conn: Connection, old: Any, new: dict[str, Any]) -> int | None:
    """Store a role's new credentials unless another worker changed them since old was read.

    Returns how many of the role's sessions ended, or None when the row had changed (read it again).
    """
    if old is None:
        insert_ = postgresql.insert if conn.dialect.name == 'postgresql' else sqlite.insert
        # ON CONFLICT DO NOTHING: a worker inserting the same role at once makes this one do nothing.
        if not conn.execute(insert_(DashboardCredential).values(**new).on_conflict_do_nothing()).rowcount:
            return None
    elif not conn.execute(update(DashboardCredential).where(
            DashboardCredential.role == new['role'], DashboardCredential.generation == old.generation)
            .values(**new)).rowcount:
        return None
    # lookup would refuse them anyway; deleting them keeps the table to live sessions.
    return conn.execute(delete(DashboardSession).where(
        DashboardSession.role == new['role'], DashboardSession.credential != new['generation'])).rowcount or 0
