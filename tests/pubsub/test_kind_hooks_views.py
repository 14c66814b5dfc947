"""What a subscriber kind adds to the admin API's views (``KindHooks.admin_fields``), and how the object files'
``pubsub_subscription`` items map to kinds, on their own: no database, no HTTP."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

from runtime.errors import ConfigError
from runtime.http.admin.subscription_views import kind_fields, sub_details, sub_views
from runtime.http.admin.websockets import websocket_view
from runtime.pubsub.kinds import Kinds
from runtime.pubsub.objects import _subscription_kind
from runtime.pubsub.registry import KIND_SERVICE, SubInfo
from runtime.pubsub.subscribers import (
    KIND_FILE,
    KIND_PULL,
    KIND_REST_PUSH,
    KIND_WEBSOCKET,
    SUBSCRIBER_KINDS,
    shown_client,
)
from runtime.pubsub.subscribers.base import KindHooks
from runtime.pubsub.subscribers.websocket import clients
from runtime.util.timefmt import iso
from tests.example_kind.memo import KIND_MEMO, MemoSubscriber

pytestmark = pytest.mark.unit

#: The fields every subscription's view has, whatever its kind.
COMMON = {'id', 'topic', 'kind', 'service', 'security', 'push_url', 'is_active', 'options', 'origin',
          'created_at_iso', 'queue_depth', 'oldest_message', 'dead_letters'}


def _client_row(sub_id: int, connected: bool = True, last_active_at: float = 1_700_000_000.0) -> dict[str, Any]:
    """A row as the WebSocket kind's ``websocket_clients`` gives it (sub_key included: it must never be shown)."""
    return {'sub_id': sub_id, 'sub_key': f'sk.secret{sub_id}', 'security': 'browser', 'pattern': 'orders.*',
            'is_active': True, 'window': 7, 'owner': 'host-a:1:beef' if connected else '',
            'peer': '10.0.0.7:5000' if connected else '', 'connected': connected,
            'connected_at': last_active_at - 60 if connected else None, 'last_active_at': last_active_at,
            'in_flight': 2, 'queue_depth': 3}


class _Reads:
    """A stand-in for ``QueueAdmin.read``: answers each work with canned client rows and counts the calls."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        self.works: list[Callable[..., Any]] = []

    def __call__(self, work: Callable[..., Any]) -> Any:
        self.works.append(work)
        assert work is clients.websocket_clients, 'only the WebSocket kind reads, and only its client rows'
        return [dict(r) for r in self.rows]


def _never_read(work: Callable[..., Any]) -> Any:
    raise AssertionError('this kind must show its fields without reading anything')


class _StatsRow(NamedTuple):
    origin: str
    created_at: float


class _Queues:
    """The two methods of ``QueueAdmin`` the views call."""

    def __init__(self, reads: _Reads) -> None:
        self.read = reads

    def subscription_stats(self, sub_ids: list[int]) -> tuple[dict[int, dict[str, Any]], dict[int, Any]]:
        return ({i: {'depth': 1, 'oldest_message': None, 'dead_letters': 0} for i in sub_ids},
                {i: _StatsRow('config', 1_700_000_000.0) for i in sub_ids})


def _sub(sub_id: int, kind: str, **more: Any) -> SubInfo:
    return SubInfo(sub_id, f'sk.secret{sub_id}', 'orders.*', kind, **more)


# Each kind's admin fields


def test_the_websocket_kind_shows_each_client_read_once_for_all_and_null_without_a_row() -> None:
    reads = _Reads([_client_row(1), _client_row(2, connected=False), _client_row(99)])
    subs = [_sub(1, KIND_WEBSOCKET, security='browser'), _sub(2, KIND_WEBSOCKET, security='browser'),
            _sub(3, KIND_WEBSOCKET, security='browser')]
    fields = SUBSCRIBER_KINDS.plugin(KIND_WEBSOCKET).admin_fields(reads, subs)
    assert len(reads.works) == 1
    assert set(fields) == {1, 2, 3}, 'a client row of a subscription not asked about is not shown'
    assert fields[3] == {'client': None}
    live, waiting = fields[1]['client'], fields[2]['client']
    assert set(live) == {'connected', 'owner', 'peer', 'window', 'in_flight', 'connected_at', 'connected_at_iso',
                         'last_active_at', 'last_active_at_iso', 'idle_secs'}
    assert (live['connected'], live['owner'], live['peer'], live['window'], live['in_flight']) == \
        (True, 'host-a:1:beef', '10.0.0.7:5000', 7, 2)
    assert live['connected_at_iso'] == iso(1_700_000_000.0 - 60)
    assert live['last_active_at_iso'] == iso(1_700_000_000.0) and live['idle_secs'] > 0
    assert waiting['connected'] is False and waiting['connected_at'] is None and waiting['connected_at_iso'] is None
    assert 'sk.secret' not in repr(fields)


def test_the_websocket_kind_reads_nothing_for_no_subscription() -> None:
    assert SUBSCRIBER_KINDS.plugin(KIND_WEBSOCKET).admin_fields(_never_read, []) == {}


def test_a_clients_idle_time_is_never_negative_and_counts_from_now() -> None:
    row = _client_row(1, last_active_at=1000.0)
    assert shown_client(row, now=1012.3456)['idle_secs'] == 12.346
    assert shown_client(row, now=900.0)['idle_secs'] == 0.0


def test_the_file_kind_shows_its_target_without_credentials_and_reads_nothing() -> None:
    subs = [_sub(5, KIND_FILE, push_url='sftp://drop:hunter2@files.example.com:2222/out?token=x#y'),
            _sub(6, KIND_FILE, push_url='file:///var/outbox'),
            _sub(7, KIND_FILE, push_url='sftp://[::1')]
    fields = SUBSCRIBER_KINDS.plugin(KIND_FILE).admin_fields(_never_read, subs)
    assert fields == {5: {'target': 'sftp://drop@files.example.com:2222/out'}, 6: {'target': 'file:///var/outbox'},
                      7: {'target': '(invalid URL)'}}


@pytest.mark.parametrize('kind', [KIND_SERVICE, KIND_PULL, KIND_REST_PUSH])
def test_the_other_standard_kinds_add_no_field(kind: str) -> None:
    sub = _sub(1, kind, service='billing' if kind == KIND_SERVICE else '',
               push_url='https://user:pw@example.com/hook' if kind == KIND_REST_PUSH else '')
    assert SUBSCRIBER_KINDS.plugin(kind).admin_fields(_never_read, [sub]) == {}


def test_the_example_kind_adds_no_field_by_default() -> None:
    assert MemoSubscriber.admin_fields is KindHooks.admin_fields
    assert MemoSubscriber.admin_fields(_never_read, [_sub(1, KIND_MEMO)]) == {}
    kinds = Kinds([*(SUBSCRIBER_KINDS.plugin(k) for k in SUBSCRIBER_KINDS.names), MemoSubscriber])
    view = sub_details(_Queues(_Reads([])), _sub(1, KIND_MEMO), kinds)
    assert set(view) == COMMON and view['kind'] == KIND_MEMO


# The views: each kind asked once for its subscriptions of a page, its fields merged


def test_a_page_of_every_kind_reads_once_and_each_view_gets_only_its_kinds_fields() -> None:
    reads = _Reads([_client_row(2), _client_row(3, connected=False)])
    subs = [_sub(1, KIND_SERVICE, service='billing'), _sub(2, KIND_WEBSOCKET, security='browser'),
            _sub(3, KIND_WEBSOCKET, security='browser'), _sub(4, KIND_WEBSOCKET, security='mobile'),
            _sub(5, KIND_FILE, push_url='sftp://drop:hunter2@files.example.com/out'),
            _sub(6, KIND_PULL, security='browser'), _sub(7, KIND_REST_PUSH, push_url='https://u:pw@example.com/in')]
    queues = _Queues(reads)
    stats, rows = queues.subscription_stats([s.id for s in subs])
    views = {v['id']: v for v in sub_views(queues, subs, stats, rows)}
    assert len(reads.works) == 1, 'the clients of a page are read in one go, not one query per subscription'
    for sub_id in (1, 6, 7):
        assert set(views[sub_id]) == COMMON
    for sub_id in (2, 3, 4):
        assert set(views[sub_id]) == COMMON | {'client'}
    assert views[2]['client']['connected'] is True and views[3]['client']['connected'] is False
    assert views[4]['client'] is None
    assert set(views[5]) == COMMON | {'target'} and views[5]['target'] == 'sftp://drop@files.example.com/out'
    assert views[7]['push_url'] == 'https://u:***@example.com/in'
    assert (views[5]['origin'], views[5]['queue_depth']) == ('config', 1)
    assert 'sk.secret' not in repr(views) and 'hunter2' not in repr(views)


def test_no_websocket_subscription_on_a_page_reads_no_client() -> None:
    subs = [_sub(1, KIND_SERVICE, service='billing'), _sub(2, KIND_FILE, push_url='file:///out')]
    assert kind_fields(_Queues(_never_read), subs) == {2: {'target': 'file:///out'}}
    assert kind_fields(_Queues(_never_read), []) == {}


def test_a_kind_the_server_does_not_register_gets_no_field() -> None:
    view = sub_details(_Queues(_never_read), _sub(1, KIND_MEMO))
    assert set(view) == COMMON


def test_a_kind_only_adds_fields_to_its_own_subscriptions() -> None:
    class Greedy(KindHooks):
        kind = 'greedy'
        options = None

        @staticmethod
        def admin_fields(read: Any, subs: list[SubInfo]) -> dict[int, dict[str, Any]]:
            return {1: {'stolen': True}, 2: {'mine': True}}

    kinds = Kinds([SUBSCRIBER_KINDS.plugin(KIND_SERVICE), Greedy])
    fields = kind_fields(_Queues(_never_read), [_sub(1, KIND_SERVICE, service='s'), _sub(2, 'greedy')], kinds)
    assert fields == {2: {'mine': True}}


def test_the_websocket_list_shows_a_client_as_the_subscription_views_do() -> None:
    row = _client_row(4)
    view = websocket_view(row, now=1_700_000_010.0)
    assert view == {'sub_id': 4, 'security': 'browser', 'pattern': 'orders.*', 'is_active': True, 'queue_depth': 3,
                    **shown_client(row, now=1_700_000_010.0)}
    assert view['idle_secs'] == 10.0 and 'sub_key' not in view


# The object files' vocabulary: which kind a pubsub_subscription item declares, and what it reads from it

WHERE = 'pubsub.yaml [pubsub_subscription] x'


@pytest.mark.parametrize(('item', 'expected'), [
    ({'push_service': 'billing'}, (KIND_SERVICE, 'billing', '')),
    ({'service': 'billing', 'delivery_type': 'push'}, (KIND_SERVICE, 'billing', '')),
    ({'push_rest_endpoint': 'crm'}, (KIND_REST_PUSH, '', 'crm')),
    ({'rest_push_endpoint': 'crm', 'delivery_type': 'push'}, (KIND_REST_PUSH, '', 'crm')),
    ({'security': 'browser'}, (KIND_PULL, '', '')),
    ({'security': 'browser', 'delivery_type': 'pull'}, (KIND_PULL, '', '')),
    ({'delivery_type': 'file', 'file_target': 'file:///out'}, (KIND_FILE, '', '')),
    # Not strings: the name is taken as text (the kind's check and the topic then judge it).
    ({'push_service': 42}, (KIND_SERVICE, '42', '')),
    ({'push_rest_endpoint': ['crm']}, (KIND_REST_PUSH, '', "['crm']")),
])
def test_each_kind_an_item_declares(item: dict[str, Any], expected: tuple[str, str, str]) -> None:
    assert _subscription_kind(item, WHERE) == expected


BOTH = 'give either push_service (a service subscriber) or push_rest_endpoint, not both'
NO_TARGET = 'a file subscription needs file_target: file:///abs/dir or sftp://user@host:port/abs/dir'
TARGET_ELSEWHERE = 'file_target is for subscriptions with delivery_type: file'


@pytest.mark.parametrize(('item', 'reason'), [
    # Both push keys are refused first, whatever else is wrong.
    ({'push_service': 'a', 'push_rest_endpoint': 'b'}, BOTH),
    ({'service': 'a', 'rest_push_endpoint': 'b', 'delivery_type': 'file', 'file_target': 5}, BOTH),
    ({'push_service': 'a', 'push_rest_endpoint': 'b', 'delivery_type': 'carrier-pigeon'}, BOTH),
    # Then an unknown delivery_type: the WebSocket kind has none in the object files.
    ({'delivery_type': 'websocket', 'security': 'browser'},
     "delivery_type must be 'push', 'pull' or 'file', not 'websocket'"),
    ({'delivery_type': 'PUSH', 'push_service': 'a'}, "delivery_type must be 'push', 'pull' or 'file', not 'PUSH'"),
    ({'delivery_type': None, 'security': 'browser'}, "delivery_type must be 'push', 'pull' or 'file', not None"),
    ({'delivery_type': ['pull'], 'security': 'b'}, "delivery_type must be 'push', 'pull' or 'file', not ['pull']"),
    # A file item: no push keys, then a target that is a non-empty string.
    ({'delivery_type': 'file', 'push_service': 'a', 'file_target': 5},
     'a file subscription has no push_service or push_rest_endpoint'),
    ({'delivery_type': 'file', 'rest_push_endpoint': 'b'},
     'a file subscription has no push_service or push_rest_endpoint'),
    ({'delivery_type': 'file'}, NO_TARGET),
    ({'delivery_type': 'file', 'file_target': ''}, NO_TARGET),
    ({'delivery_type': 'file', 'file_target': ['file:///out']}, NO_TARGET),
    # file_target on another kind is refused before that kind's own checks.
    ({'file_target': 'file:///out'}, TARGET_ELSEWHERE),
    ({'push_service': 'a', 'file_target': 'file:///out'}, TARGET_ELSEWHERE),
    ({'delivery_type': 'pull', 'push_service': 'a', 'file_target': None}, TARGET_ELSEWHERE),
    # A pull item: no push keys, then its client's security definition.
    ({'delivery_type': 'pull', 'push_service': 'a', 'security': 'b'},
     'a pull subscription has no push_service or push_rest_endpoint'),
    ({'delivery_type': 'pull'}, 'a pull subscription needs the security definition of its client'),
    ({'security': ''}, 'a pull subscription needs the security definition of its client'),
    # A push item names what it pushes to.
    ({'delivery_type': 'push', 'security': 'b'},
     'a push subscription needs push_service (a service) or push_rest_endpoint (an outgoing_rest definition)'),
    ({'delivery_type': 'push', 'push_service': '', 'push_rest_endpoint': 0},
     'a push subscription needs push_service (a service) or push_rest_endpoint (an outgoing_rest definition)'),
])
def test_a_hostile_item_is_refused_with_the_first_mistake(item: dict[str, Any], reason: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _subscription_kind(item, WHERE)
    assert (refused.value.where, refused.value.reason) == (WHERE, reason)
