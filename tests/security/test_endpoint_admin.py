"""The administration layers of security definitions and REST channels on their own, without HTTP or a runtime.

SecurityAdmin and ChannelAdmin are built here from a migrated database of the backend under test and
reload callables that only count their calls, as the composition root builds them with the
synchronizer's. A write bumps its sync key and reloads; a refused one does neither.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from sqlalchemy import Engine, insert, select

from runtime.channels.admin import ChannelAdmin
from runtime.db.blocking import run_transaction
from runtime.db.models import PubSubPermission, SyncState
from runtime.errors import ObjectExists, ObjectInUse, ObjectNotFound, RouteClash
from runtime.objects.applier import CHANNELS_KEY, SECURITY_KEY
from runtime.security.admin import SecurityAdmin
from runtime.security.basic_auth import verify_password


@dataclass
class Calls:
    """Counts the calls of each reload callable."""

    counts: dict[str, int] = field(default_factory=dict)

    def of(self, what: str) -> int:
        """How many times what was called."""
        return self.counts.get(what, 0)

    def counter(self, what: str) -> Callable[[], None]:
        """A reload callable that counts its calls as what."""
        def call() -> None:
            self.counts[what] = self.of(what) + 1
        return call


@pytest.fixture
def calls() -> Calls:
    return Calls()


@pytest.fixture
def security(engine: Engine, calls: Calls) -> SecurityAdmin:
    return SecurityAdmin(engine, calls.counter('security'), calls.counter('permissions'))


@pytest.fixture
def channels(engine: Engine, calls: Calls) -> ChannelAdmin:
    return ChannelAdmin(engine, calls.counter('channels'))


def _version(engine: Engine, key: str) -> int:
    return run_transaction(engine, lambda c: c.execute(
        select(SyncState.version).where(SyncState.key == key)).scalar() or 0, write=False)


def _definition(security: SecurityAdmin, name: str = 'ea.sec', username: str = 'ea-user') -> None:
    security.create({'name': name, 'username': username, 'realm': 'Conduit', 'is_active': True, 'origin': 'api'},
                    'pw-1')


def _channel(channels: ChannelAdmin, name: str = 'ea.channel', url_path: str = '/ea/{id}', methods: str = 'GET',
             security: str = '') -> None:
    channels.create({'name': name, 'service': 'ea.service', 'url_path': url_path, 'methods': methods,
                     'data_format': 'json', 'security': security, 'is_active': True, 'origin': 'api'})


def test_a_definition_is_created_changed_repassworded_and_deleted_each_write_reloading(
        engine: Engine, security: SecurityAdmin, calls: Calls) -> None:
    row = security.create({'name': 'ea.sec', 'username': 'ea-user', 'realm': 'Shop', 'is_active': True,
                           'origin': 'api'}, 'pw-1')
    assert (row.name, row.username, row.realm, row.is_active, row.origin) == ('ea.sec', 'ea-user', 'Shop', True,
                                                                             'api')
    # Stored hashed, never as given.
    assert row.password_hash != 'pw-1' and verify_password('pw-1', row.password_hash)
    assert calls.of('security') == 1 and _version(engine, SECURITY_KEY) == 1
    assert [r.name for r in security.list()] == ['ea.sec']

    row = security.update('ea.sec', {'username': 'ea-other', 'realm': 'Shop', 'is_active': False})
    assert (row.username, row.is_active) == ('ea-other', False)
    assert calls.of('security') == 2 and _version(engine, SECURITY_KEY) == 2

    old_hash = row.password_hash
    row = security.change_password('ea.sec', 'pw-2')
    assert row.password_hash != old_hash and verify_password('pw-2', row.password_hash)
    assert not verify_password('pw-1', row.password_hash)
    assert calls.of('security') == 3 and _version(engine, SECURITY_KEY) == 3

    # Its permissions go with it, and the permissions are reloaded too.
    run_transaction(engine, lambda c: c.execute(insert(PubSubPermission).values(
        security='ea.sec', pub='[]', sub='["ea.topic"]')))
    security.delete('ea.sec')
    assert calls.of('security') == 4 and calls.of('permissions') == 1
    assert run_transaction(engine, lambda c: c.execute(select(PubSubPermission.id)).all(), write=False) == []
    with pytest.raises(ObjectNotFound, match="security definition not found: 'ea.sec'"):
        security.get('ea.sec')
    assert security.list() == []


def test_a_refused_definition_write_changes_nothing_and_reloads_nothing(
        engine: Engine, security: SecurityAdmin, channels: ChannelAdmin, calls: Calls) -> None:
    _definition(security)
    _definition(security, 'ea.second', 'ea-second')
    assert calls.of('security') == 2
    with pytest.raises(ObjectExists, match="security definition 'ea.sec' already exists"):
        _definition(security, 'ea.sec', 'ea-new')
    with pytest.raises(ObjectExists, match="username 'ea-user' already exists"):
        _definition(security, 'ea.new', 'ea-user')
    with pytest.raises(ObjectExists, match="username 'ea-second' already exists"):
        security.update('ea.sec', {'username': 'ea-second', 'realm': 'Conduit', 'is_active': True})
    with pytest.raises(ObjectNotFound):
        security.change_password('ea.none', 'pw')
    with pytest.raises(ObjectNotFound):
        security.delete('ea.none')
    _channel(channels, security='ea.sec')
    with pytest.raises(ObjectInUse) as refused:
        security.delete('ea.sec')
    assert refused.value.users == ["channel 'ea.channel'"]
    assert calls.of('security') == 2 and calls.of('permissions') == 0 and _version(engine, SECURITY_KEY) == 2
    assert security.get('ea.sec').username == 'ea-user'


def test_a_channel_is_created_changed_renamed_and_deleted_each_write_reloading(
        engine: Engine, channels: ChannelAdmin, calls: Calls) -> None:
    _channel(channels)
    row = channels.get('ea.channel')
    assert (row.service, row.url_path, row.methods, row.origin) == ('ea.service', '/ea/{id}', 'GET', 'api')
    assert calls.of('channels') == 1 and _version(engine, CHANNELS_KEY) == 1

    row = channels.update('ea.channel', {'name': 'ea.renamed', 'service': 'ea.service', 'url_path': '/ea/{id}',
                                         'methods': 'GET,POST', 'data_format': 'text', 'security': '',
                                         'is_active': False})
    assert (row.name, row.methods, row.data_format, row.is_active) == ('ea.renamed', 'GET,POST', 'text', False)
    assert calls.of('channels') == 2 and _version(engine, CHANNELS_KEY) == 2
    with pytest.raises(ObjectNotFound, match="channel not found: 'ea.channel'"):
        channels.get('ea.channel')
    assert [r.name for r in channels.list()] == ['ea.renamed']

    channels.delete('ea.renamed')
    assert calls.of('channels') == 3 and channels.list() == []
    with pytest.raises(ObjectNotFound):
        channels.delete('ea.renamed')
    assert calls.of('channels') == 3 and _version(engine, CHANNELS_KEY) == 3


def test_a_channel_answering_another_ones_path_and_method_is_refused(
        engine: Engine, channels: ChannelAdmin, calls: Calls) -> None:
    _channel(channels, 'ea.first', '/ea/{id}', 'GET,POST')
    _channel(channels, 'ea.other', '/ea/other', 'GET')
    # The same path under another parameter name, one method in common.
    with pytest.raises(RouteClash, match=r"channel 'ea.second': channel 'ea.first' already answers POST "
                                         r"/ea/\{id\} \(same path and method\)"):
        channels.check_routes('ea.second', '/ea/{key}', frozenset({'POST', 'PUT'}))
    channels.check_routes('ea.second', '/ea/{key}', frozenset({'DELETE'}))
    # A channel changed in place is not compared with itself, a renamed one neither.
    channels.check_routes('ea.first', '/ea/{id}', frozenset({'GET'}), current='ea.first')
    channels.check_routes('ea.new-name', '/ea/{id}', frozenset(), current='ea.first')
    with pytest.raises(RouteClash, match="channel 'ea.new-name': channel 'ea.other' already answers GET /ea/other"):
        channels.check_routes('ea.new-name', '/ea/other', frozenset(), current='ea.first')
    with pytest.raises(ObjectExists, match="channel 'ea.other' already exists"):
        channels.update('ea.first', {'name': 'ea.other', 'service': 'ea.service', 'url_path': '/ea/{id}',
                                     'methods': 'GET', 'data_format': 'json', 'security': '', 'is_active': True})
    with pytest.raises(ObjectExists, match="channel 'ea.first' already exists"):
        _channel(channels, 'ea.first', '/ea/elsewhere')
    assert calls.of('channels') == 2 and _version(engine, CHANNELS_KEY) == 2


def test_the_users_of_a_service_are_named(channels: ChannelAdmin) -> None:
    assert channels.service_users('ea.service') == []
    _channel(channels, 'ea.b')
    _channel(channels, 'ea.a', '/ea/a')
    assert channels.service_users('ea.service') == ["channel 'ea.a'", "channel 'ea.b'"]
    assert channels.service_users('ea.unused') == []
