"""covers(grant, pattern): a sub permission entry covers a pattern subscription only if it allows every topic."""

from __future__ import annotations

import pytest

from runtime.pubsub.permissions import Grant, Permissions, Rules
from runtime.pubsub.topics import covers, matches

pytestmark = pytest.mark.unit

TOPICS = ['orders', 'orders.new', 'orders.new.urgent', 'orders.emea.new', 'ordersx.new', 'invoices.new', 'a.b.c.d']


@pytest.mark.parametrize('grant, pattern, expected', [
    ('**', 'orders.*', True), ('**', '**', True), ('orders.**', 'orders.*', True),
    ('orders.**', 'orders.**', True), ('orders.**', 'orders.new.*', True), ('orders.*', 'orders.*', True),
    ('orders.*', 'orders.**', False), ('orders.*', '**', False), ('orders.*.new', 'orders.*.new', True),
    ('orders.new', 'orders.*', False), ('orders.n*', 'orders.*', False), ('orders.n*', 'orders.n*', True),
    ('*.new', 'orders.*', False), ('ORDERS.**', 'orders/*', True), ('invoices.**', 'orders.*', False),
])
def test_covers(grant: str, pattern: str, expected: bool) -> None:
    assert covers(grant, pattern) is expected


@pytest.mark.parametrize('grant, pattern', [
    ('**', 'orders.*'), ('orders.**', 'orders.*'), ('orders.**', 'orders.new.*'), ('orders.*.new', 'orders.*.new'),
    ('orders.n*', 'orders.n*'),
])
def test_what_covers_says_is_true_of_every_topic(grant: str, pattern: str) -> None:
    # Sound: whatever topic the pattern matches, the grant matches too.
    for topic in TOPICS:
        if matches(pattern, topic):
            assert matches(grant, topic), (grant, pattern, topic)


def test_a_definition_may_subscribe_to_a_pattern_its_sub_entries_cover() -> None:
    permissions = Permissions()
    permissions.replace_all([Grant('client', Rules([]), Rules(['orders.created', 'invoices.**']))])
    assert permissions.can_sub_pattern('client', 'invoices.*')
    assert permissions.can_sub_pattern('client', 'orders.created')  # a name: as can_sub
    assert not permissions.can_sub_pattern('client', 'orders.*')  # one name does not cover the pattern
    assert not permissions.can_sub_pattern('other', 'invoices.*')
