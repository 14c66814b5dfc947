"""Topic names, patterns and the pattern index.

One table pins the matching semantics; it is checked against both ``matches()`` and
``PatternIndex``, and random cases check that the index agrees with ``matches()``.
"""

from __future__ import annotations

import fnmatch
import random

import pytest

from runtime.pubsub.topics import (
    InvalidTopicName,
    PatternIndex,
    is_pattern,
    matches,
    normalize,
    validate_pattern,
    validate_topic_name,
)

pytestmark = pytest.mark.unit

# (pattern, topic, expected)
MATCH_TABLE: list[tuple[str, str, bool]] = [
    # Exact names, both separators, case-insensitivity
    ('orders.created', 'orders.created', True),
    ('orders.created', 'orders.updated', False),
    ('orders.created', 'orders', False),
    ('orders', 'orders.created', False),
    ('orders.created', 'ORDERS.Created', True),
    ('Orders.CREATED', 'orders.created', True),
    ('/customer/new', '/customer/new', True),
    ('/customer/new', '/Customer/NEW', True),
    ('orders/created', 'orders.created', True),
    ('orders.created', 'orders/created', True),
    ('a.b/c', 'a/b.c', True),
    # A leading separator is an empty first segment
    ('/customer/new', 'customer/new', False),
    ('customer.new', '/customer/new', False),
    ('/customer/new', '.customer.new', True),
    ('/zato/s/to/*', '/zato/s/to/crm_x', True),
    ('/zato/s/to/*', '/zato/s/to/my_api_customer_new', True),
    ('/zato/s/to/*', 'zato.s.to.crm_x', False),
    ('/zato/s/to/*', '/zato/s/to', False),
    ('/*', '/customer', True),
    ('*', '/customer', False),
    ('*.*', '/customer', False),
    # Literal characters: no escaping, no '?' or '[...]'
    ('a?b', 'a?b', True),
    ('a?b', 'axb', False),
    ('a[bc]', 'ab', False),
    ('a[bc]', 'a[bc]', True),
    ('a-b_c:d', 'A-B_C:D', True),
    # '*' matches exactly one non-empty segment and never crosses a separator
    ('orders.*', 'orders.created', True),
    ('orders.*', 'orders', False),
    ('orders.*', 'orders.created.eu', False),
    ('orders.*', 'orders/created', True),
    ('orders/*', 'orders.created', True),
    ('*.created', 'orders.created', True),
    ('*.created', 'created', False),
    ('*.created', 'a.b.created', False),
    ('a.*.c', 'a.b.c', True),
    ('a.*.c', 'a.c', False),
    ('a.*.c', 'a.b.b.c', False),
    ('*', 'orders', True),
    ('*', 'orders.created', False),
    ('*.*', 'a.b', True),
    ('a.*', 'a.', False),
    ('a.*.b', 'a..b', False),
    # '**' matches any depth, zero included
    ('invoice.**', 'invoice.emea.received', True),
    ('invoice.**', 'invoice.apac.approved.urgent', True),
    ('invoice.**', 'invoice', True),
    ('invoice.**', 'Invoice/EMEA', True),
    ('invoice.**', 'invoices', False),
    ('invoice.**', 'other.invoice.x', False),
    ('invoice.**', 'invoice.', True),
    ('**', 'anything', True),
    ('**', 'a.b.c.d.e', True),
    ('**', '/zato/s/to/x', True),
    ('**.created', 'created', True),
    ('**.created', 'orders.created', True),
    ('**.created', 'a.b.c.created', True),
    ('**.created', '/orders/created', True),
    ('**.created', 'orders.created.x', False),
    ('a.**.z', 'a.z', True),
    ('a.**.z', 'a.b.z', True),
    ('a.**.z', 'a.b.c.d.z', True),
    ('a.**.z', 'a.b.c.d', False),
    ('a.**.z', 'a.z.z', True),
    ('a.**.*', 'a', False),
    ('a.**.*', 'a.b', True),
    ('a.**.*', 'a.b.c', True),
    ('**.**', 'x', True),
    ('a.**.**.b', 'a.b', True),
    ('**.b.**', 'a.b.c', True),
    ('**.b.**', 'b', True),
    ('**.b.**', 'a.c', False),
    ('/zato/**', '/zato/s/to/x', True),
    ('/zato/**', 'zato.s', False),
    # '*' inside a segment: any run, possibly empty, within that segment
    ('inv*', 'invoice', True),
    ('inv*', 'inv', True),
    ('inv*', 'INVOICE', True),
    ('inv*', 'in', False),
    ('inv*', 'invoice.x', False),
    ('inv*.x', 'invoice.x', True),
    ('*ice.x', 'invoice.x', True),
    ('*ice.x', 'ice.x', True),
    ('a*b*c', 'abc', True),
    ('a*b*c', 'axxbyyc', True),
    ('a*b*c', 'acb', False),
    ('a*b*c', 'axb.c', False),
    ('a*a', 'a', False),
    ('a*a', 'aa', True),
    ('orders.cr*ed', 'orders.created', True),
    ('orders.cr*ed', 'orders.cr.ed', False),
]

# (name, reason); each is invalid as a topic name and as a pattern.
INVALID_NAMES: list[tuple[object, str]] = [
    ('', 'is empty'),
    (' a', 'has whitespace at either end'),
    ('a ', 'has whitespace at either end'),
    ('a\t', 'has whitespace at either end'),
    ('\na.b', 'has whitespace at either end'),
    ('a' * 201, 'is longer than 200 characters'),
    ('orders.cré', 'is not ASCII'),
    ('zamówienia', 'is not ASCII'),
    ('a#b', "contains '#'"),
    ('#', "contains '#'"),
    ('orders.#', "contains '#'"),
    (None, 'must be a string, not NoneType'),
    (42, 'must be a string, not int'),
    (b'orders', 'must be a string, not bytes'),
    (['a'], 'must be a string, not list'),
]

# Valid patterns that are not valid concrete names, and invalid patterns.
WILDCARD_NAMES = ['*', '**', 'a.*', 'a.**', 'inv*', '/zato/s/to/*']
INVALID_PATTERNS = ['a**', '**b', 'a.***', 'a.b**c.d', '*.x**']


@pytest.mark.parametrize(('pattern', 'topic', 'expected'), MATCH_TABLE)
def test_matches(pattern: str, topic: str, expected: bool) -> None:
    assert matches(pattern, topic) is expected


@pytest.fixture(scope='module')
def table_index() -> PatternIndex[int]:
    index: PatternIndex[int] = PatternIndex()
    for i, (pattern, _, _) in enumerate(MATCH_TABLE):
        index.add(pattern, i)
    return index


@pytest.mark.parametrize(
    ('row', 'pattern', 'topic', 'expected'), [(i, *r) for i, r in enumerate(MATCH_TABLE)]
)
def test_index_matches_table(
    table_index: PatternIndex[int], row: int, pattern: str, topic: str, expected: bool
) -> None:
    found = table_index.match(topic)
    assert (row in found) is expected
    assert found == {i for i, (p, _, _) in enumerate(MATCH_TABLE) if matches(p, topic)}


def test_table_size() -> None:
    assert len(MATCH_TABLE) >= 60
    assert len(PatternIndex()) == 0


@pytest.mark.parametrize(('name', 'reason'), INVALID_NAMES)
def test_invalid_names(name: object, reason: str) -> None:
    for validate in (validate_topic_name, validate_pattern):
        with pytest.raises(InvalidTopicName) as info:
            validate(name)
        assert info.value.reason == reason
        assert info.value.name is name
        assert reason in str(info.value)
        assert isinstance(info.value, ValueError)
    index: PatternIndex[int] = PatternIndex()
    with pytest.raises(InvalidTopicName):
        index.add(name, 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidTopicName):
        index.match(name)  # type: ignore[arg-type]
    with pytest.raises(InvalidTopicName):
        matches('**', name)  # type: ignore[arg-type]
    assert name not in index


def test_error_messages() -> None:
    with pytest.raises(InvalidTopicName, match=r"^topic name ' a' has whitespace at either end$"):
        validate_topic_name(' a')
    with pytest.raises(InvalidTopicName) as info:
        validate_topic_name('x' * 300)
    assert str(info.value) == f"topic name '{'x' * 56}... is longer than 200 characters"
    message = r"^topic pattern 'a\*\*' has '\*\*' that is not a whole segment$"
    with pytest.raises(InvalidTopicName, match=message):
        validate_pattern('a**')


def test_valid_names() -> None:
    for name in ('orders.created', '/customer/new', '/zato/s/to/my_api', 'a' * 200, 'a b', 'a..b', 'x?[]'):
        assert validate_topic_name(name) is name
        assert validate_pattern(name) is name
        assert not is_pattern(name)


@pytest.mark.parametrize('name', WILDCARD_NAMES)
def test_wildcards_only_in_patterns(name: str) -> None:
    assert is_pattern(name)
    assert validate_pattern(name) is name
    with pytest.raises(InvalidTopicName, match=r"contains '\*'"):
        validate_topic_name(name)


@pytest.mark.parametrize('pattern', INVALID_PATTERNS)
def test_invalid_patterns(pattern: str) -> None:
    with pytest.raises(InvalidTopicName, match='not a whole segment'):
        validate_pattern(pattern)
    with pytest.raises(InvalidTopicName):
        PatternIndex().add(pattern, 1)


def test_normalize() -> None:
    assert normalize('/Customer/NEW') == '/customer/new'
    assert normalize('Orders.Created') == 'orders.created'


def test_index_add_remove_contains() -> None:
    index: PatternIndex[str] = PatternIndex()
    index.add('orders.*', 'sub1')
    index.add('Orders/*', 'sub2')  # the same pattern: case and separator do not matter
    index.add('orders.*', 'sub1')  # a repeated pair is kept once
    index.add('orders.created', 'sub3')
    index.add('orders.**', 'sub4')
    assert len(index) == 4
    assert 'ORDERS/*' in index and 'orders.created' in index and 'orders.x' not in index
    assert 'a**' not in index and 42 not in index
    assert index.match('orders.created') == {'sub1', 'sub2', 'sub3', 'sub4'}
    assert index.remove('orders.*', 'sub1') is True
    assert index.remove('orders.*', 'sub1') is False
    assert index.remove('orders.created', 'nobody') is False
    assert index.remove('nothing.here', 'sub1') is False
    assert index.remove('nothing.*', 'sub1') is False
    assert index.match('orders.created') == {'sub2', 'sub3', 'sub4'}
    assert index.remove('orders.*', 'sub2') and 'orders.*' not in index
    assert index.remove('ORDERS.CREATED', 'sub3') and index.remove('orders.**', 'sub4')
    assert len(index) == 0
    assert index.is_empty()  # branches are pruned
    assert index.match('orders.created') == set()
    index.add('a.*', 1)
    index.clear()
    assert len(index) == 0 and index.match('a.b') == set()


def _random_name(rng: random.Random, segments: list[str]) -> str:
    name = rng.choice(['', '', '/', '.']) + segments[0]
    for seg in segments[1:]:
        name += rng.choice('./') + seg
    return name


def _random_topic(rng: random.Random) -> str:
    segs = [rng.choice(['a', 'b', 'ab', 'A', 'ba', 'aab', 'c']) for _ in range(rng.randint(1, 5))]
    return _random_name(rng, segs)


def _random_pattern(rng: random.Random) -> str:
    choices = ['a', 'b', 'ab', 'B', 'c', '*', '*', '**', '**', 'a*', '*b', 'a*b', '*a*']
    return _random_name(rng, [rng.choice(choices) for _ in range(rng.randint(1, 5))])


def test_index_agrees_with_matches_on_random_cases() -> None:
    rng = random.Random(20240611)
    patterns = [_random_pattern(rng) for _ in range(150)]
    index: PatternIndex[int] = PatternIndex()
    for i, pattern in enumerate(patterns):
        index.add(pattern, i)
    assert len(index) == len(patterns)
    hits = 0
    for _ in range(2000):
        topic = _random_topic(rng)
        expected = {i for i, p in enumerate(patterns) if matches(p, topic)}
        assert index.match(topic) == expected, topic
        hits += len(expected)
    assert hits > 2000  # the cases are not trivially empty
    removed = set(rng.sample(range(len(patterns)), 75))
    for i in removed:
        assert index.remove(patterns[i], i)
    assert len(index) == len(patterns) - len(removed)
    for _ in range(300):
        topic = _random_topic(rng)
        expected = {i for i, p in enumerate(patterns) if i not in removed and matches(p, topic)}
        assert index.match(topic) == expected, topic


def test_glob_segments_agree_with_fnmatch() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        glob = ''.join(rng.choice('ab*') for _ in range(rng.randint(1, 6)))
        if '**' in glob:
            continue
        seg = ''.join(rng.choice('ab') for _ in range(rng.randint(1, 8)))
        expected = fnmatch.fnmatchcase(seg, glob)
        assert matches(glob, seg) is expected, (glob, seg)
        index: PatternIndex[int] = PatternIndex()
        index.add(glob, 1)
        assert (index.match(seg) == {1}) is expected, (glob, seg)


def test_many_literal_prefixed_patterns_visit_few_nodes() -> None:
    index: PatternIndex[int] = PatternIndex()
    for i in range(10_000):
        index.add(f't{i}.*', i)
    index.add('**.x', -1)
    assert len(index) == 10_001
    assert index.match('t5000.x') == {5000, -1}
    assert index.last_visits <= 10  # vs 10,000 patterns
    assert index.match('T9999/y') == {9999}
    assert index.last_visits <= 10  # vs 10,000 patterns
    assert index.match('t5000') == set()
    assert index.match('t5000.x.y') == set()
    assert index.match('t10000.y') == set()
