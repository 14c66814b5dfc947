"""A kind added beside the standard ones (tests/example_kind/memo.py) works with nothing else changed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runtime.config import PubSubSection
from runtime.db.engine import make_engine
from runtime.errors import ConfigError
from runtime.pubsub.broker import Broker
from runtime.pubsub.subscribers import Attachments, KindTools, standard_subscribers
from runtime.testing import wait_until
from runtime.util.spawn import Spawner
from tests.example_kind.memo import KIND_MEMO, MemoSubscriber

TIMEOUT = 15.0


@pytest.fixture
def memo_broker(db_url: str, tmp_path: Path) -> Iterator[tuple[Broker, MemoSubscriber]]:
    """A started broker with the standard kinds and the memo kind registered beside them."""
    engine = make_engine(db_url)
    spawner = Spawner()
    tools = KindTools(lambda *_: None, Attachments())
    memo = MemoSubscriber.build(tools)
    broker = Broker(engine, PubSubSection(poll_interval_secs=0.05), subscribers=[*standard_subscribers(tools), memo],
                    spawn=spawner.spawn, has_service=lambda _name: False, overflow_dir=tmp_path / 'overflow')
    broker.start()
    try:
        yield broker, memo
    finally:
        broker.stop()
        spawner.stop()
        engine.dispose()


def test_a_new_kind_is_subscribed_typed_delivered_and_shown(memo_broker: tuple[Broker, MemoSubscriber]) -> None:
    broker, memo = memo_broker
    broker.catalog.create_topic('notes.new')
    sub = broker.catalog.subscribe('notes.*', KIND_MEMO, options={'memo_case': 'upper', 'max_attempts': 2})
    assert (sub.kind, sub.options.max_attempts) == (KIND_MEMO, 2)
    broker.publish('notes.new', 'first')
    broker.publish('notes.new', {'n': 2})
    wait_until(lambda: len(memo.kept) == 2, TIMEOUT, message='both messages kept')
    assert memo.kept == [(sub.sub_key, 'FIRST'), (sub.sub_key, {'n': 2})]
    assert broker.kinds.options.flat(sub.options)['memo_case'] == 'upper'


def test_a_new_kinds_options_and_checks_are_its_own(memo_broker: tuple[Broker, MemoSubscriber]) -> None:
    broker, _memo = memo_broker
    broker.catalog.create_topic('notes.other')
    with pytest.raises(ConfigError, match="memo_case must be 'as-is' or 'upper', not 'lower'"):
        broker.catalog.subscribe('notes.other', KIND_MEMO, options={'memo_case': 'lower'})
    with pytest.raises(ConfigError, match=r'memo_case: memo_\* options are for subscriptions of kind memo only'):
        broker.catalog.subscribe('notes.other', 'service', service='notes.handler', options={'memo_case': 'upper'})
    with pytest.raises(ConfigError, match='a memo subscription takes no service'):
        broker.catalog.subscribe('notes.other', KIND_MEMO, service='notes.handler')
    assert 'kind must be one of service, pull, rest_push, websocket, file, memo' in str(
        pytest.raises(ConfigError, broker.catalog.subscribe, 'notes.other', 'carrier-pigeon').value)
