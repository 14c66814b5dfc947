"""Declarative objects (config/objects/*.yaml) applied at run time, and secrets kept out of sight.

Channels and security definitions come from YAML files in the sections of Zato's enmasse files;
a changed file takes effect without a restart, a broken one is rejected whole with the previous
configuration left in force, and no password ever appears in a log line or an error body.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from runtime.channels.objects import section_handler as channels_section
from runtime.db.engine import make_engine, transaction
from runtime.db.migrate import upgrade
from runtime.db.models import RestChannel
from runtime.objects.applier import ObjectsApplier, SectionHandler
from runtime.security.objects import section_handler as security_section
from tests.live_server import ADMIN_PASSWORD, LiveServer, poll

SERVICES = '''
from runtime import Service


class Hello(Service):
    name = 'test.hello'

    def handle(self):
        self.response.payload = {'hello': self.request.input.get('who', 'world')}
'''

SECURITY = '''
security:
  - name: test.sec
    type: basic_auth
    username: api-user
    password: {password}
    realm: Test realm
    is_active: {active}
'''

CHANNEL = '''
channel_rest:
  - name: hello
    service: test.hello
    url_path: {url_path}
    method: {method}
    data_format: json
    security: {security}
'''

API_PASSWORD = 'api-secret-pw-1'


def channel_yaml(url_path: str = '/api/hello/{who}', method: str = 'GET', security: str = '') -> str:
    """A file with the hello channel."""
    return CHANNEL.format(url_path=url_path, method=method, security=security or "''")


def security_yaml(password: str = API_PASSWORD, active: bool = True) -> str:
    """A file with the test.sec definition."""
    return SECURITY.format(password=password, active=str(active).lower())


def status_of(server: LiveServer, path: str, method: str = 'GET', **kwargs: Any) -> int:
    """The status code a request gets."""
    return server.request(method, path, **kwargs).status_code


def wait_status(server: LiveServer, path: str, status: int, method: str = 'GET', **kwargs: Any) -> None:
    """Wait (bounded) until a request gets the given status: the files are re-applied in the background."""
    poll(lambda: status_of(server, path, method, **kwargs) == status, timeout=10,
         message=f'{method} {path} answering {status}')


@pytest.fixture
def hello_server(server_factory: Callable[..., LiveServer]) -> LiveServer:
    """A started server with the hello service and no object files yet."""
    server = server_factory()
    server.write_module('hello.py', SERVICES)
    return server.start()


def test_channel_added_changed_and_removed_in_a_file_takes_effect_without_restart(
        hello_server: LiveServer) -> None:
    server = hello_server
    pid = server.request('GET', '/admin/status', auth=server.admin).json()['pid']
    assert status_of(server, '/api/hello/ada') == 404

    server.write_objects('channels.yaml', channel_yaml())
    wait_status(server, '/api/hello/ada', 200)
    assert server.request('GET', '/api/hello/ada').json() == {'hello': 'ada'}

    # A new path and method: the old ones stop answering, the new ones start.
    server.write_objects('channels.yaml', channel_yaml(url_path='/api/v2/hello/{who}', method='POST'))
    wait_status(server, '/api/v2/hello/bob', 200, method='POST', json={})
    assert server.request('POST', '/api/v2/hello/bob', json={}).json() == {'hello': 'bob'}
    assert status_of(server, '/api/hello/ada') == 404
    assert status_of(server, '/api/v2/hello/bob') == 405

    # Removing the channel from the file removes it.
    server.write_objects('channels.yaml', 'channel_rest: []\n')
    wait_status(server, '/api/v2/hello/bob', 404, method='POST', json={})

    # Deleting the file removes what it declared, too.
    server.write_objects('channels.yaml', channel_yaml())
    wait_status(server, '/api/hello/ada', 200)
    (server.objects / 'channels.yaml').unlink()
    wait_status(server, '/api/hello/ada', 404)

    # All of it without a restart.
    assert server.request('GET', '/admin/status', auth=server.admin).json()['pid'] == pid


def test_security_definition_changes_take_effect_without_restart(hello_server: LiveServer) -> None:
    server = hello_server
    server.write_objects('a-security.yaml', security_yaml())
    server.write_objects('b-channels.yaml', channel_yaml(security='test.sec'))
    wait_status(server, '/api/hello/ada', 200, auth=('api-user', API_PASSWORD))
    assert status_of(server, '/api/hello/ada') == 401

    server.write_objects('a-security.yaml', security_yaml(password='new-secret-pw-2'))
    wait_status(server, '/api/hello/ada', 200, auth=('api-user', 'new-secret-pw-2'))
    assert status_of(server, '/api/hello/ada', auth=('api-user', API_PASSWORD)) == 401

    server.write_objects('a-security.yaml', security_yaml(password='new-secret-pw-2', active=False))
    wait_status(server, '/api/hello/ada', 401, auth=('api-user', 'new-secret-pw-2'))


def test_password_may_reference_an_environment_variable(server_factory: Callable[..., LiveServer]) -> None:
    server = server_factory(env={'CONDUIT_SECRET_TEST_API_PASSWORD': 'from-env-pw-3'})
    server.write_module('hello.py', SERVICES)
    server.write_objects('a-security.yaml', security_yaml(password='${CONDUIT_SECRET_TEST_API_PASSWORD}'))
    server.write_objects('b-channels.yaml', channel_yaml(security='test.sec'))
    server.start()
    assert status_of(server, '/api/hello/ada', auth=('api-user', 'from-env-pw-3')) == 200
    assert status_of(server, '/api/hello/ada', auth=('api-user', '${CONDUIT_SECRET_TEST_API_PASSWORD}')) == 401


def test_broken_files_are_rejected_whole_and_the_previous_configuration_stays(
        hello_server: LiveServer) -> None:
    server = hello_server
    server.write_objects('a-security.yaml', security_yaml())
    server.write_objects('b-channels.yaml', channel_yaml(security='test.sec'))
    wait_status(server, '/api/hello/ada', 200, auth=('api-user', API_PASSWORD))

    # A channel naming a security definition that does not exist: nothing of the set is applied,
    # not even the valid new channel next to it.
    broken = channel_yaml(security='no.such.sec') + '''
  - name: other
    service: test.hello
    url_path: /api/other
'''
    path = server.write_objects('b-channels.yaml', broken)
    log = server.wait_for_log("'no.such.sec' does not exist")
    line = next(x for x in log.splitlines() if "'no.such.sec' does not exist" in x)
    assert str(path) in line and '[channel_rest]' in line and "'hello'" in line
    assert status_of(server, '/api/other') == 404
    assert status_of(server, '/api/hello/ada', auth=('api-user', API_PASSWORD)) == 200

    # Malformed YAML: the log names the file and the line, and the old definitions stay.
    path = server.write_objects('a-security.yaml', security_yaml(password='"unterminated-secret-pw'))
    log = server.wait_for_log(f'{path}: not valid YAML')
    line = next(x for x in log.splitlines() if f'{path}: not valid YAML' in x)
    assert 'line 6' in line
    assert status_of(server, '/api/hello/ada', auth=('api-user', API_PASSWORD)) == 200

    # Once the files are fixed they apply again.
    server.write_objects('a-security.yaml', security_yaml())
    server.write_objects('b-channels.yaml', broken.replace('no.such.sec', 'test.sec'))
    wait_status(server, '/api/other', 200)


def test_no_password_appears_in_the_log_or_in_error_bodies(server_factory: Callable[..., LiveServer]) -> None:
    # Two workers re-apply the same files at the same moment, which once failed with the
    # password hash in the logged SQL.
    server = server_factory(workers=2)
    server.write_module('hello.py', SERVICES)
    server.start()
    secrets = [API_PASSWORD, ADMIN_PASSWORD, 'wrong-guess-pw-4', 'unterminated-secret-pw', 'scrypt$']
    bodies = []
    for n in range(5):
        password = f'{API_PASSWORD}-{n}'
        server.write_objects('objects.yaml', security_yaml(password=password)
                             + channel_yaml(url_path=f'/api/{n}/hello/{{who}}', security='test.sec'))
        wait_status(server, f'/api/{n}/hello/ada', 200, auth=('api-user', password))
        secrets.append(password)
    server.write_objects('objects.yaml', security_yaml(password='"unterminated-secret-pw'))
    server.wait_for_log('not valid YAML')

    for auth in [('api-user', 'wrong-guess-pw-4'), ('api-user', API_PASSWORD), ('nobody', 'wrong-guess-pw-4')]:
        r = server.request('GET', '/api/4/hello/ada', auth=auth)
        assert r.status_code == 401
        bodies.append(r.text)
    for auth in [('admin', 'wrong-guess-pw-4'), ('api-user', f'{API_PASSWORD}-4')]:
        r = server.request('GET', '/admin/services', auth=auth)
        assert r.status_code == 401
        bodies.append(r.text)
    r = server.request('POST', '/admin/services/test.hello/invoke', data='{"password": ', auth=server.admin)
    assert r.status_code == 400
    bodies.append(r.text)

    log = server.log()
    assert 'applying object files failed' not in log
    for secret in secrets:
        assert secret not in log, secret
        for body in bodies:
            assert secret not in body, secret


def test_a_file_change_that_fails_to_apply_is_retried(tmp_path: Path, db_url: str) -> None:
    """A database error while applying does not make the watcher forget that the files changed."""
    engine = make_engine(db_url, pool_size=2)
    try:
        upgrade(engine)
        objects = tmp_path / 'objects'
        objects.mkdir()
        applier = ObjectsApplier(engine, [objects])
        applier.add_handler(security_section())
        applier.add_handler(channels_section())
        applier.apply()
        failures = []

        def flaky(conn: Any, items: list[dict[str, Any]], scope: Any) -> None:
            if not failures:
                failures.append(1)
                raise OperationalError('UPDATE ...', {}, Exception('connection lost'))

        applier.add_handler(SectionHandler('flaky', flaky))
        (objects / 'channels.yaml').write_text(channel_yaml())
        assert applier.changed_on_disk()
        with pytest.raises(OperationalError):
            applier.apply()
        assert applier.changed_on_disk()
        applier.apply()
        assert not applier.changed_on_disk()
        with transaction(engine) as conn:
            assert conn.execute(select(RestChannel.name)).scalars().all() == ['hello']
    finally:
        engine.dispose()
