"""Basic Auth security definitions: password hashing and request authentication.

Passwords are stored as scrypt hashes (``scrypt$n$r$p$salt$hash``, base64) and compared in
constant time. scrypt is slow on purpose (tens of milliseconds), so it runs in gevent's thread
pool and does not freeze the hub; and a successful check is remembered, keyed by an HMAC of the
credentials under a per-process random key, so that a client sending the same valid
credentials again costs one HMAC instead of one scrypt. The memory is cleared whenever
definitions change. A failed check is remembered the same way for ``FAILED_CHECK_TTL_SECS``, so a
client repeating a wrong password costs one HMAC, not one scrypt each time (the HTTP layer also
throttles failed sign-ins per client address: runtime.http.auth).

A username or password with a NUL character never authenticates: the KDF would not tell
``secret`` from ``secret\0`` (HMAC pads short keys with zero bytes).

Nothing here logs a password, a hash or the Authorization header.
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import logging
import os
import time
from dataclasses import dataclass

import gevent

from runtime.errors import Unauthorized

_log = logging.getLogger(__name__)

#: scrypt cost parameters: 2**14 * 8 * 128 bytes = 16 MiB of memory per check.
SCRYPT_N = 2 ** 14
SCRYPT_R = 8
SCRYPT_P = 1
SCRYPT_DKLEN = 32
SALT_BYTES = 16

#: Upper bound of remembered successful (and, separately, failed) checks per worker.
MAX_CACHED_CHECKS = 10_000

#: How long a failed check is remembered.
FAILED_CHECK_TTL_SECS = 60.0


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode('ascii')


def hash_password(password: str) -> str:
    """A new scrypt hash of password, with a random salt; ValueError for a password with a NUL."""
    if '\x00' in password:
        raise ValueError('a password must not contain NUL characters')
    salt = os.urandom(SALT_BYTES)
    digest = hashlib.scrypt(password.encode('utf-8'), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P,
                            dklen=SCRYPT_DKLEN)
    return f'scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${_b64(salt)}${_b64(digest)}'


def verify_password(password: str, encoded: str) -> bool:
    """Whether password matches an encoded hash; False for a malformed hash."""
    try:
        scheme, n, r, p, salt, digest = encoded.split('$')
        if scheme != 'scrypt':
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(password.encode('utf-8'), salt=base64.b64decode(salt), n=int(n), r=int(r),
                                p=int(p), dklen=len(expected))
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(actual, expected)


def _in_pool(func, *args):  # type: ignore[no-untyped-def]
    """Run a CPU-heavy call in gevent's thread pool so other greenlets keep running."""
    return gevent.get_hub().threadpool.apply(func, args)


@dataclass(frozen=True)
class BasicAuth:
    """One Basic Auth definition as a worker holds it in memory."""

    name: str
    username: str
    password_hash: str
    realm: str = 'Conduit'
    is_active: bool = True


def parse_basic_header(header: str | None) -> tuple[str, str] | None:
    """Username and password from an Authorization header, or None if absent or malformed."""
    if not header:
        return None
    scheme, _, value = header.partition(' ')
    if scheme.lower() != 'basic' or not value:
        return None
    try:
        # ValueError: a header with non-ASCII characters (binascii.Error is one too).
        decoded = base64.b64decode(value.strip(), validate=True).decode('utf-8')
    except ValueError:
        return None
    username, sep, password = decoded.partition(':')
    if not sep or '\x00' in decoded:
        return None
    return username, password


class SecurityRegistry:
    """The Basic Auth definitions of this worker, by name and by username."""

    def __init__(self) -> None:
        self._by_name: dict[str, BasicAuth] = {}
        self._by_username: dict[str, BasicAuth] = {}
        self._ok_cache: dict[bytes, str] = {}
        #: HMAC of failed credentials -> when the failure is forgotten (monotonic).
        self._failed_cache: dict[bytes, float] = {}
        self._cache_key = os.urandom(32)

    def replace_all(self, defs: list[BasicAuth]) -> None:
        """Swap in a new set of definitions and forget remembered checks."""
        self._by_name = {d.name: d for d in defs}
        self._by_username = {d.username: d for d in defs}
        self._ok_cache = {}
        self._failed_cache = {}

    def get(self, name: str) -> BasicAuth | None:
        """A definition by name."""
        return self._by_name.get(name)

    def names(self) -> list[str]:
        """Every definition name, sorted."""
        return sorted(self._by_name)

    def authenticate(self, header: str | None, required: str | None = None, realm: str = 'Conduit') -> BasicAuth:
        """The definition matching an Authorization header, or Unauthorized.

        With ``required``, only that definition is accepted (a channel's own security).
        """
        if required is not None:
            definition = self._by_name.get(required)
            realm = definition.realm if definition else realm
        creds = parse_basic_header(header)
        if creds is None:
            raise Unauthorized(realm, 'Authentication required')
        username, password = creds
        # The caches of the definitions this check started with: a reload while the check runs in the
        # thread pool swaps in fresh ones, which must not learn a verdict reached against the old ones.
        ok_cache, failed_cache = self._ok_cache, self._failed_cache
        key = hmac.new(self._cache_key, f'{username}\0{password}'.encode(), hashlib.sha256).digest()
        definition = self._by_username.get(username)
        if definition is None or (required is not None and definition.name != required):
            failed_key = self._failed_key(required, username, password)
            if not _failed_recently(failed_cache, failed_key):
                # Spend the same time as a real check so usernames cannot be probed by timing.
                _in_pool(_verify_unknown, password)
                _remember_failure(failed_cache, failed_key)
            raise Unauthorized(realm)
        if ok_cache.get(key) != definition.password_hash:
            failed_key = self._failed_key(required, username, password)
            if _failed_recently(failed_cache, failed_key) or not _in_pool(verify_password, password,
                                                                          definition.password_hash):
                _remember_failure(failed_cache, failed_key)
                raise Unauthorized(realm)
            if len(ok_cache) >= MAX_CACHED_CHECKS:
                ok_cache.clear()
            ok_cache[key] = definition.password_hash
        # Checked after the password, so that only a caller who knows it learns the definition exists.
        if not definition.is_active:
            raise Unauthorized(realm, 'security definition is inactive')
        return definition

    def _failed_key(self, required: str | None, username: str, password: str) -> bytes:
        # Per required definition: credentials refused by one channel may be right for another.
        return hmac.new(self._cache_key, f'{required}\0{username}\0{password}'.encode(), hashlib.sha256).digest()



def _failed_recently(cache: dict[bytes, float], key: bytes) -> bool:
    until = cache.get(key)
    return until is not None and until > time.monotonic()


def _remember_failure(cache: dict[bytes, float], key: bytes) -> None:
    if len(cache) >= MAX_CACHED_CHECKS:
        cache.clear()
    cache[key] = time.monotonic() + FAILED_CHECK_TTL_SECS


def _verify_unknown(password: str) -> bool:
    """An unknown user's password check: a scrypt like a real one (the first makes the hash too); never true."""
    return verify_password(password, _dummy_hash())


@functools.cache
def _dummy_hash() -> str:
    """A hash no password matches, checked against for an unknown user (made on the first: a process
    that never sees one, such as every CLI command, never spends the scrypt)."""
    return hash_password(os.urandom(8).hex())
