"""A server's stop (SIGTERM): prompt, however its clients hold their connections, never cutting a request.

gunicorn's gevent worker looked at its stop flag once a second and then waited for every open
connection, idle keep-alive ones too, until the graceful time ran out: a client's connection pool or
a browser kept each stop (a restart, a deployment) waiting for the whole graceful time.
"""

from __future__ import annotations

import datetime
import ipaddress
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

#: Long enough that a stop which waits for them cannot pass for a prompt one.
SLOW_CLIENT_ENV = {'CONDUIT_SERVER_GRACEFUL_TIMEOUT_SECS': '40', 'CONDUIT_HTTP_HEADER_TIMEOUT_SECS': '60'}

SLOW = '''import gevent

from runtime import Service


class Slow(Service):
    """Answers after a while: a request still in progress when the server is told to stop."""

    name = 'test.slow'

    def handle(self):
        self.logger.info('slow request started')
        gevent.sleep(float(self.request.payload['secs']))
        self.response.payload = {'done': True}
'''


def _exit_status(server: Any, timeout: float) -> int | None:
    """SIGTERM the server and wait for it to exit on its own; its status, or None if it did not in time."""
    assert server.proc is not None
    server.proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            return server.proc.returncode
        time.sleep(0.05)
    return None


def test_idle_keep_alive_connections_do_not_hold_a_stop_back(server_factory) -> None:
    server = server_factory(env=SLOW_CLIENT_ENV).start()
    pooled = requests.Session()  # a client's connection pool: the connection stays open between requests
    assert pooled.get(server.url + '/health', timeout=10).status_code == 200
    raw = socket.create_connection(('127.0.0.1', server.port))  # connected, no request sent yet
    try:
        # Before: the stop waited for both until the graceful time (40 s here) ran out.
        assert _exit_status(server, timeout=20) == 0, server.log()[-3000:]
        log = server.log()
        assert 'graceful timeout' not in log
        assert ' ERROR ' not in log, log[-3000:]  # closed quietly, not as a failed read with a traceback
        # The idle connections were closed by the server, not left to time out.
        raw.settimeout(5)
        try:
            assert raw.recv(1) == b''
        except ConnectionResetError:
            pass  # still in the listen backlog, never accepted, when the server stopped: reset as it closed
    finally:
        raw.close()
        pooled.close()


def test_a_request_in_progress_is_answered_before_the_worker_exits(server_factory) -> None:
    server = server_factory(env=SLOW_CLIENT_ENV)
    server.write_module('slow.py', SLOW)
    server.start()
    answers: list[Any] = []

    def call() -> None:
        answers.append(server.invoke('test.slow', {'secs': 2}))

    caller = threading.Thread(target=call)
    caller.start()
    server.wait_for_log('slow request started', timeout=20)
    status = _exit_status(server, timeout=20)
    caller.join(10)
    assert answers == [{'done': True}]
    assert status == 0, server.log()[-3000:]


def _self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, '127.0.0.1')])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address('127.0.0.1'))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / 'cert.pem', directory / 'key.pem'
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def test_a_server_with_a_certificate_serves_tls_and_stops_promptly(server_factory, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv('REQUESTS_CA_BUNDLE', str(cert))  # trusted by this test's requests only
    server = server_factory(env={**SLOW_CLIENT_ENV, 'CONDUIT_SERVER_CERTFILE': str(cert),
                                 'CONDUIT_SERVER_KEYFILE': str(key)}).start()
    assert server.url.startswith('https://')
    pooled = requests.Session()
    try:
        assert pooled.get(server.url + '/health', timeout=10).json()['is_ok'] is True
        assert server.invoke('conduit.ping')['pong'] is True
        # Plain HTTP on the TLS port is refused, not served.
        with pytest.raises(requests.RequestException):
            requests.get(server.url.replace('https://', 'http://') + '/health', timeout=10)
        assert _exit_status(server, timeout=20) == 0, server.log()[-3000:]
    finally:
        pooled.close()
