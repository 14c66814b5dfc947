"""What only an SFTP source has to get right: the server's identity, credentials, and a network that breaks.

Against the real OpenSSH server of ``tests/sshd.py``: a source connects at its first call, refuses
a server whose host key is not the pinned one (or not in the known_hosts file) before sending any
credential, says why when it cannot connect, comes back by itself after the server restarts, and
never lets a password or a private key reach an error text or a log line. The server takes keys
only, so password authentication is checked on the parameters the client is given.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest

from runtime.errors import ConfigError, SourceUnavailable
from runtime.files.sftp import SftpParams, SftpSource, check_params, load_private_key, parse_host_key, sftp_label
from runtime.testing import wait_until
from tests.sshd import SSH_KEYGEN, SshServer, make_key

PASSWORD = 'hunter2-sftp-Secret-value'
PASSWORD_VAR = 'CONDUIT_SECRET_TEST_SFTP_PASSWORD'


@pytest.fixture
def root(sshd: SshServer) -> Path:
    """A directory with one file, in the server's SFTP directory."""
    (sshd.root / 'in').mkdir()
    (sshd.root / 'in' / 'a.csv').write_bytes(b'a,b\n1,2\n')
    return sshd.root / 'in'


@pytest.fixture
def password_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(PASSWORD_VAR, PASSWORD)
    return '${' + PASSWORD_VAR + '}'


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    """Every log line, paramiko's own at DEBUG included."""
    caplog.set_level(logging.DEBUG)
    yield caplog


def _source(server: SshServer, root: Path, **overrides: Any) -> SftpSource:
    return SftpSource(str(root), server.params(**overrides))


def _names(source: SftpSource) -> list[str]:
    return [e.path for e in source.list(recursive=True)]


# Connecting


def test_the_first_call_connects_and_later_calls_reuse_the_connection(sshd: SshServer, root: Path) -> None:
    source = _source(sshd, root)
    assert source._client is None  # nothing happens at construction
    assert _names(source) == ['a.csv']
    client = source._client
    assert source.exists('a.csv') and source._client is client
    source.close()
    assert source._client is None
    assert _names(source) == ['a.csv']
    source.close()


def test_a_relative_root_is_relative_to_the_login_directory(sshd: SshServer, root: Path) -> None:
    source = SftpSource('in', sshd.params())
    assert source.label == f'sftp://{sshd.username}@127.0.0.1:{sshd.port}/~/in'
    assert _names(source) == ['a.csv']
    source.close()


def test_an_unreachable_server_raises_source_unavailable_naming_the_source(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        port = s.getsockname()[1]  # nothing listens once closed
    params = SftpParams('127.0.0.1', port, 'u', private_key_ref='${CONDUIT_SECRET_X}',
                        host_key='ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM8QaLmlZg1WPZmJ/+3o0mwjbu7ly6Zo5nSSuJhS+iyk')
    source = SftpSource('/in', params)
    with pytest.raises(SourceUnavailable) as info:
        source.list(recursive=False)
    assert f'sftp://u@127.0.0.1:{port}/in' in str(info.value)


def test_a_silent_server_times_out(sshd: SshServer, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as silent:
        silent.bind(('127.0.0.1', 0))
        silent.listen(1)  # the kernel completes the handshake; nobody ever speaks
        source = SftpSource(str(root), sshd.params(port=silent.getsockname()[1], timeout_secs=0.3))
        with pytest.raises(SourceUnavailable, match='cannot connect'):
            source.exists('a.csv')


def test_the_source_comes_back_after_the_server_was_down(sshd: SshServer, root: Path) -> None:
    source = _source(sshd, root)
    assert _names(source) == ['a.csv']
    sshd.stop()
    with pytest.raises(SourceUnavailable):
        source.list(recursive=False)
    with pytest.raises(SourceUnavailable):
        source.stat('a.csv')
    sshd.start()
    assert _names(source) == ['a.csv']
    source.close()


def test_a_restart_between_polls_costs_at_most_one_failed_call(sshd: SshServer, root: Path) -> None:
    source = _source(sshd, root)
    assert _names(source) == ['a.csv']
    sshd.restart()
    failures = []

    def listed() -> bool:
        try:
            return _names(source) == ['a.csv']
        except SourceUnavailable as e:
            failures.append(e)
            return False

    wait_until(listed, timeout=10, message='listing after the restart')
    assert len(failures) <= 1
    source.close()


def test_a_stream_open_across_a_restart_fails_and_a_new_one_reads(sshd: SshServer, root: Path) -> None:
    (root / 'big.bin').write_bytes(os.urandom(200_000))
    source = _source(sshd, root)
    stream = source.open_read('big.bin')
    assert len(stream.read(1000)) == 1000
    sshd.restart()
    with pytest.raises(SourceUnavailable, match='reading a file'):
        stream.read()
    stream.close()
    wait_until(lambda: _try(lambda: source.exists('big.bin')), timeout=10, message='reconnecting')
    with source.open_read('big.bin') as again:
        assert again.read() == (root / 'big.bin').read_bytes()
    source.close()


def _try(call: Any) -> Any:
    try:
        return call()
    except SourceUnavailable:
        return False


def test_a_write_cut_off_by_a_restart_leaves_the_target_alone(sshd: SshServer, root: Path) -> None:
    source = _source(sshd, root)
    source.exists('a.csv')

    def chunks() -> Iterator[bytes]:
        yield b'x' * 1000
        sshd.stop()
        yield b'y' * 100_000

    with pytest.raises(SourceUnavailable):
        source.write_atomic('a.csv', chunks())
    assert (root / 'a.csv').read_bytes() == b'a,b\n1,2\n'
    sshd.start()
    source.write_atomic('a.csv', [b'new'])
    assert (root / 'a.csv').read_bytes() == b'new'
    source.close()


# The server's identity


def test_a_different_host_key_is_refused_before_any_credential_is_sent(sshd: SshServer, root: Path,
                                                                         tmp_path: Path) -> None:
    other = make_key(tmp_path / 'other')
    source = _source(sshd, root, host_key=other)
    with pytest.raises(SourceUnavailable) as info:
        source.list(recursive=False)
    text = str(info.value)
    assert f'127.0.0.1:{sshd.port}' in text and 'host key' in text and 'does not match' in text
    assert 'Accepted publickey' not in sshd.log_tail(100)


def test_a_host_key_of_another_type_is_refused(sshd: SshServer, root: Path, tmp_path: Path) -> None:
    subprocess.run([SSH_KEYGEN, '-q', '-t', 'ecdsa', '-N', '', '-f', str(tmp_path / 'ec')], check=True)
    ecdsa_line = (tmp_path / 'ec.pub').read_text()
    source = _source(sshd, root, host_key=ecdsa_line)
    with pytest.raises(SourceUnavailable, match='does not match'):
        source.list(recursive=False)
    assert 'Accepted publickey' not in sshd.log_tail(100)


def test_known_hosts_files_plain_and_hashed(sshd: SshServer, root: Path, tmp_path: Path) -> None:
    plain = sshd.known_hosts(tmp_path / 'known_hosts')
    source = _source(sshd, root, host_key='', known_hosts=str(plain))
    assert _names(source) == ['a.csv']
    source.close()
    hashed = sshd.known_hosts(tmp_path / 'hashed')
    subprocess.run([SSH_KEYGEN, '-H', '-f', str(hashed)], check=True, capture_output=True)
    assert '127.0.0.1' not in hashed.read_text()
    source = _source(sshd, root, host_key='', known_hosts=str(hashed))
    assert _names(source) == ['a.csv']
    source.close()


def test_a_server_missing_from_known_hosts_is_refused_and_never_added(sshd: SshServer, root: Path,
                                                                        tmp_path: Path) -> None:
    known = tmp_path / 'known_hosts'
    known.write_text(f'[127.0.0.1]:{sshd.port + 1} {sshd.host_key_line}\nexample.org {sshd.host_key_line}\n')
    before = known.read_text()
    source = _source(sshd, root, host_key='', known_hosts=str(known))
    with pytest.raises(SourceUnavailable, match='not in the known_hosts file'):
        source.list(recursive=False)
    assert known.read_text() == before
    assert 'Accepted publickey' not in sshd.log_tail(100)


def test_a_known_hosts_file_with_another_key_is_refused(sshd: SshServer, root: Path, tmp_path: Path) -> None:
    known = tmp_path / 'known_hosts'
    known.write_text(f'[127.0.0.1]:{sshd.port} {make_key(tmp_path / "other")}\n')
    with pytest.raises(SourceUnavailable, match='does not match'):
        _source(sshd, root, host_key='', known_hosts=str(known)).list(recursive=False)


def test_a_missing_known_hosts_file_is_named(sshd: SshServer, root: Path, tmp_path: Path) -> None:
    with pytest.raises(SourceUnavailable, match='cannot read known_hosts file .*nowhere'):
        _source(sshd, root, host_key='', known_hosts=str(tmp_path / 'nowhere')).list(recursive=False)


# Credentials


def test_a_wrong_key_fails_authentication_and_no_secret_shows(sshd: SshServer, root: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               logs: pytest.LogCaptureFixture) -> None:
    make_key(tmp_path / 'stranger')
    stranger = (tmp_path / 'stranger').read_text()
    monkeypatch.setenv('CONDUIT_SECRET_TEST_STRANGER', stranger)
    source = _source(sshd, root, private_key_ref='${CONDUIT_SECRET_TEST_STRANGER}')
    with pytest.raises(SourceUnavailable, match=f"authentication as '{sshd.username}' failed") as info:
        source.list(recursive=False)
    _assert_hidden([stranger, sshd.client_key_text], str(info.value), logs.text)


def test_a_password_is_refused_by_a_key_only_server_and_never_shows(sshd: SshServer, root: Path, password_env: str,
                                                                      logs: pytest.LogCaptureFixture) -> None:
    source = _source(sshd, root, private_key_ref='', password_ref=password_env)
    with pytest.raises(SourceUnavailable, match='authentication') as info:
        source.list(recursive=False)
    _assert_hidden([PASSWORD], str(info.value), repr(info.value), logs.text)


def test_successful_sessions_log_no_secret(sshd: SshServer, root: Path, logs: pytest.LogCaptureFixture) -> None:
    source = _source(sshd, root)
    source.write_atomic('b.json', [b'{}'])
    assert _names(source) == ['a.csv', 'b.json']
    source.close()
    _assert_hidden([sshd.client_key_text], logs.text)
    assert any('connected' in r.getMessage() and source.label in r.getMessage() for r in logs.records)


def _assert_hidden(secrets: list[str], *texts: str) -> None:
    for secret in secrets:
        lines = [line for line in secret.splitlines() if len(line) > 20 and 'PRIVATE KEY' not in line] or [secret]
        for text in texts:
            for line in lines:
                assert line not in text


def test_password_and_key_are_read_at_connection_and_handed_to_paramiko_only(
        sshd: SshServer, root: Path, password_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    def connect(self: paramiko.SSHClient, hostname: str, port: int, **kwargs: Any) -> None:
        seen.update(kwargs, hostname=hostname, port=port)
        raise paramiko.AuthenticationException('no')

    monkeypatch.setattr(paramiko.SSHClient, 'connect', connect)
    source = _source(sshd, root, private_key_ref='', password_ref=password_env)
    monkeypatch.setenv(PASSWORD_VAR, 'changed-after-construction')
    with pytest.raises(SourceUnavailable, match='authentication'):
        source.exists('a.csv')
    assert (seen['hostname'], seen['port'], seen['username']) == ('127.0.0.1', sshd.port, sshd.username)
    assert seen['password'] == 'changed-after-construction' and seen['pkey'] is None
    assert seen['allow_agent'] is False and seen['look_for_keys'] is False
    assert seen['timeout'] == seen['auth_timeout'] == seen['banner_timeout'] == 5.0
    assert PASSWORD not in repr(source.__dict__) and 'changed-after' not in repr(source.__dict__)

    seen.clear()
    source = _source(sshd, root, password_ref=password_env)
    with pytest.raises(SourceUnavailable):
        source.exists('a.csv')
    assert isinstance(seen['pkey'], paramiko.Ed25519Key) and seen['password']


def test_an_unset_variable_is_named_at_connection(sshd: SshServer, root: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PASSWORD_VAR, raising=False)
    source = _source(sshd, root, private_key_ref='', password_ref='${' + PASSWORD_VAR + '}')
    with pytest.raises(SourceUnavailable, match=f'{PASSWORD_VAR}.*not set'):
        source.exists('a.csv')


def test_a_variable_that_is_not_a_private_key_is_refused_without_quoting_it(
        sshd: SshServer, root: Path, password_env: str) -> None:
    source = _source(sshd, root, private_key_ref=password_env)
    with pytest.raises(SourceUnavailable, match='private key cannot be read') as info:
        source.exists('a.csv')
    assert PASSWORD not in str(info.value)


@pytest.mark.parametrize('kind', [['-t', 'rsa', '-b', '2048', '-m', 'PEM'], ['-t', 'ecdsa'], ['-t', 'ed25519'],
                                  ['-t', 'rsa', '-b', '2048']])
def test_private_keys_of_every_accepted_kind_load(tmp_path: Path, kind: list[str]) -> None:
    subprocess.run([SSH_KEYGEN, '-q', *kind, '-N', '', '-f', str(tmp_path / 'k')], check=True)
    assert isinstance(load_private_key((tmp_path / 'k').read_text(), 'x'), paramiko.PKey)


def test_an_encrypted_private_key_is_refused_as_such(tmp_path: Path) -> None:
    subprocess.run([SSH_KEYGEN, '-q', '-t', 'ed25519', '-N', 'passphrase', '-f', str(tmp_path / 'k')], check=True)
    with pytest.raises(ConfigError, match='encrypted'):
        load_private_key((tmp_path / 'k').read_text(), 'x')


# Parameters


KEY_LINE = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIM8QaLmlZg1WPZmJ/+3o0mwjbu7ly6Zo5nSSuJhS+iyk'
GOOD = dict(host='sftp.example', port=22, username='u', private_key_ref='${CONDUIT_SECRET_K}', host_key=KEY_LINE)


@pytest.mark.parametrize('change, message', [
    (dict(host=''), 'host'), (dict(host='a b'), 'host'), (dict(port=0), 'port'), (dict(port=70000), 'port'),
    (dict(port=True), 'port'), (dict(username=''), 'username'),
    (dict(private_key_ref=''), 'password or a private key'),
    (dict(password_ref='plain-password'), 'reference'), (dict(private_key_ref='${HOME}'), 'CONDUIT_SECRET_'),
    (dict(host_key=''), 'host_key or a known_hosts'), (dict(host_key='ssh-ed25519'), 'host_key'),
    (dict(host_key='ssh-ed25519 not!base64'), 'host_key'), (dict(host_key='ssh-dss AAAA'), 'host_key'),
    (dict(host_key='ssh-rsa ' + KEY_LINE.split()[1]), 'ssh-rsa'),
    (dict(timeout_secs=0), 'timeout'), (dict(timeout_secs=float('nan')), 'timeout'),
])
def test_bad_parameters_are_refused_naming_the_field(change: dict[str, Any], message: str) -> None:
    params = SftpParams(**{**GOOD, **change})
    with pytest.raises(ConfigError, match=message) as info:
        check_params(params, 'file channel x')
    assert 'plain-password' not in str(info.value)
    with pytest.raises(ConfigError):
        SftpSource('/in', params)


def test_good_parameters_pass() -> None:
    check_params(SftpParams(**GOOD), 'x')
    check_params(SftpParams(**{**GOOD, 'host_key': '', 'known_hosts': '/etc/ssh/ssh_known_hosts',
                               'password_ref': '${CONDUIT_SECRET_P}'}), 'x')


def test_host_key_lines_with_comment_or_host_names_are_accepted() -> None:
    key = parse_host_key(KEY_LINE + ' root@host', 'x')
    assert parse_host_key(f'[127.0.0.1]:2222 {KEY_LINE}', 'x') == key
    assert key.get_name() == 'ssh-ed25519'


def test_labels() -> None:
    params = SftpParams(**GOOD)
    assert sftp_label(params, '/data/in') == 'sftp://u@sftp.example:22/data/in'
    assert sftp_label(params, 'in') == 'sftp://u@sftp.example:22/~/in'
    assert sftp_label(SftpParams(**{**GOOD, 'host': '::1', 'port': 2222}), '/in') == 'sftp://u@[::1]:2222/in'



def test_an_unavailable_source_is_retried_as_a_socket_error() -> None:
    from runtime.pubsub.retry import is_socket_error

    assert is_socket_error(SourceUnavailable('sftp://u@h:22/in', 'cannot connect to h:22: Connection refused'))


def test_a_killed_request_drops_the_connection(sshd: SshServer, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = _source(sshd, root)
    assert source.exists('a.csv')

    class Killed(BaseException):
        pass

    def lstat(self: paramiko.SFTPClient, path: str) -> None:
        raise Killed()

    with monkeypatch.context() as m:
        m.setattr(paramiko.SFTPClient, 'lstat', lstat)
        with pytest.raises(Killed):
            source.exists('a.csv')
    assert source._client is None
    assert source.exists('a.csv')
    source.close()


@pytest.mark.parametrize('ci, outcome', [('', pytest.skip.Exception), ('true', pytest.fail.Exception)])
def test_without_sshd_and_without_root_the_fixture_skips_or_fails_in_ci(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, ci: str, outcome: type[BaseException]) -> None:
    from tests import sshd as sshd_fixture

    monkeypatch.setattr(sshd_fixture, 'SSHD', str(tmp_path / 'no-sshd'))
    monkeypatch.setattr(sshd_fixture.os, 'geteuid', lambda: 1000)
    monkeypatch.setenv('CI', ci)
    with pytest.raises(outcome, match='openssh-server'):
        sshd_fixture.ensure_sshd()


def test_a_crafted_host_key_is_a_config_error_naming_the_field() -> None:
    # Numbers crafted to overflow paramiko's RSA parser: a channel definition or a subscription naming
    # such a key is refused with a message, never an OverflowError from the admin API.
    crafted = ('ssh-rsa AAAAB3NzaC1yc2GE0gHX5c/sNsY1SWiOh7dcRLJGLnd4PWahda/zNE2DXO96HPq7M2qxr6FPGVUAVvA0onAkW5s'
               'bYgZyTtzra50aw597UrDDQvSxZ6+v/JgHGyf4iWrz5SmiN378Zb/daNS7429MhUCREgpz/n4=')
    with pytest.raises(ConfigError, match='host_key is not a valid ssh-rsa public key'):
        parse_host_key(crafted, 'file channel x')
