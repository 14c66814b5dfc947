"""SFTP parameters: what an SFTP source needs to know, checked before any connection is tried.

``SftpParams`` holds references to secrets, never secrets. ``check_params`` is what a channel or
subscription definition calls at configuration time (a ``ConfigError`` naming the field, never a
value that could be a password); ``parse_host_key`` and ``load_private_key`` turn the pinned host
key line and the text of a private key into paramiko keys. ``SftpSource`` (``runtime.files.sftp``)
uses all of them; they live apart so that module holds only the connection and the file operations.
paramiko (and the cryptography it loads, a good part of a second) is imported only when SFTP
parameters are checked or a key is parsed: a server with no SFTP channel or subscription never loads
it. paramiko is the optional ``sftp`` extra: without it ``check_params``, which every SFTP channel and
SFTP file subscription goes through when it is checked, refuses SFTP with a ``ConfigError`` naming the
extra (``require_paramiko``), and the server runs everything else.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runtime.errors import ConfigError
from runtime.security import secret_refs

if TYPE_CHECKING:
    import paramiko

#: The pip requirement that brings paramiko along.
SFTP_EXTRA = 'conduit[sftp]'

#: Why SFTP is refused when paramiko is not installed.
PARAMIKO_MISSING = f"SFTP needs paramiko, which is not installed: pip install '{SFTP_EXTRA}'"

#: Key types a pinned host key line may have.
HOST_KEY_TYPES = ('ssh-ed25519', 'ecdsa-sha2-nistp256', 'ecdsa-sha2-nistp384', 'ecdsa-sha2-nistp521', 'ssh-rsa')


@dataclass(frozen=True)
class SftpParams:
    """How to reach an SFTP server; secrets only as ``${CONDUIT_SECRET_...}`` references."""

    host: str
    port: int = 22
    username: str = ''
    password_ref: str = ''  # '${CONDUIT_SECRET_X}' reference; resolved at connect via runtime.security.secret_refs
    private_key_ref: str = ''  # reference whose value is the private key text (OpenSSH/PEM; ed25519, ecdsa, rsa)
    host_key: str = ''  # the server's public key line 'ssh-ed25519 AAAA...' (pinned), or
    known_hosts: str = ''  # a known_hosts file path; one of the two is required (never AutoAdd)
    timeout_secs: float = 10.0


def sftp_label(params: SftpParams, root: str) -> str:
    """How logs and errors name an SFTP directory: ``sftp://user@host:port/dir`` (``/~/dir`` if relative)."""
    host = f'[{params.host}]' if ':' in params.host else params.host
    path = root if root.startswith('/') else f'/~/{root}'.rstrip('/')
    return f'sftp://{params.username}@{host}:{params.port}{path}'


def require_paramiko(where: str) -> None:
    """Import paramiko; ConfigError naming where and the ``sftp`` extra when it is not installed."""
    try:
        import paramiko  # noqa: F401 (imported to see whether it can be)
    except ModuleNotFoundError as e:
        if e.name != 'paramiko':
            raise  # paramiko is there and one of its own dependencies is not: that is the error to see
        raise ConfigError(where, PARAMIKO_MISSING) from None


def parse_host_key(line: str, where: str) -> paramiko.PKey:
    """The public key of a pinned host key line ('ssh-ed25519 AAAA... [comment]'); ConfigError if malformed.

    A known_hosts line ('host ssh-ed25519 AAAA...') is accepted too: its host names are ignored.
    """
    require_paramiko(where)
    import paramiko

    fields = line.split() if isinstance(line, str) else []
    if fields and fields[0] not in HOST_KEY_TYPES and len(fields) > 1 and fields[1] in HOST_KEY_TYPES:
        fields = fields[1:]
    if len(fields) < 2 or fields[0] not in HOST_KEY_TYPES:
        raise ConfigError(where, f'host_key must be a public key line "<type> <base64>" with type one of '
                                 f'{", ".join(HOST_KEY_TYPES)}')
    try:
        key = paramiko.PKey.from_type_string(fields[0], base64.b64decode(fields[1], validate=True))
    except (binascii.Error, ValueError, OverflowError, IndexError, TypeError, paramiko.SSHException) as e:
        # paramiko's key parsers raise more than SSHException for crafted numbers (OverflowError, say).
        raise ConfigError(where, f'host_key is not a valid {fields[0]} public key: {type(e).__name__}') from None
    if key.get_name() != fields[0]:
        raise ConfigError(where, f'host_key says {fields[0]} but holds a {key.get_name()} key')
    return key


def check_params(params: SftpParams, where: str) -> None:
    """ConfigError naming the field unless params can make a connection (secrets are not resolved here)."""
    # First: without paramiko no field can make a connection, and a host_key could not even be parsed.
    require_paramiko(where)
    if not isinstance(params.host, str) or not params.host.strip() or any(c.isspace() for c in params.host):
        raise ConfigError(where, 'sftp host must be a host name or address')
    if isinstance(params.port, bool) or not isinstance(params.port, int) or not 0 < params.port < 65536:
        raise ConfigError(where, f'sftp port must be 1..65535, not {params.port!r}')
    if not isinstance(params.username, str) or not params.username:
        raise ConfigError(where, 'sftp needs a username')
    if not params.password_ref and not params.private_key_ref:
        raise ConfigError(where, 'sftp needs a password or a private key (as ${CONDUIT_SECRET_...} references)')
    if params.password_ref:
        secret_refs.reference_name(params.password_ref, 'sftp password', where)
    if params.private_key_ref:
        secret_refs.reference_name(params.private_key_ref, 'sftp private key', where)
    if not params.host_key and not params.known_hosts:
        raise ConfigError(where, "sftp needs the server's host_key or a known_hosts file: an unknown server "
                                 'is never trusted')
    if params.host_key:
        parse_host_key(params.host_key, where)
    if isinstance(params.timeout_secs, bool) or not isinstance(params.timeout_secs, (int, float)) \
            or not 0 < params.timeout_secs <= 3600:
        raise ConfigError(where, f'sftp timeout must be more than 0 and at most 3600 seconds, '
                                 f'not {params.timeout_secs!r}')


def load_private_key(text: str, where: str) -> paramiko.PKey:
    """The private key in text (OpenSSH or PEM; ed25519, ECDSA or RSA); ConfigError that never quotes it."""
    require_paramiko(where)
    import paramiko

    for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
        try:
            return cls.from_private_key(io.StringIO(text))
        except paramiko.PasswordRequiredException:
            raise ConfigError(where, 'the private key is encrypted: give it unencrypted') from None
        except (paramiko.SSHException, ValueError, TypeError, IndexError, binascii.Error):
            continue
    raise ConfigError(where, 'the private key cannot be read: it must be an unencrypted OpenSSH or PEM '
                             'ed25519, ECDSA or RSA key')
