"""SFTP sources: a directory on an SFTP server, read and written through paramiko."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SftpParams:
    """How to reach an SFTP server; secrets only as ``${CONDUIT_SECRET_...}`` references."""

    host: str
    port: int = 22
    username: str = ''
    password_ref: str = ''
    private_key_ref: str = ''
    host_key: str = ''
    known_hosts: str = ''
    timeout_secs: float = 10.0


class SftpSource:
    """A directory on an SFTP server (being written: step 3)."""

    def __init__(self, root: str, params: SftpParams) -> None:
        raise NotImplementedError('SFTP sources are not written yet')
