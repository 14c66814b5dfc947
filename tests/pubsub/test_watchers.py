"""QueueWatchers: what a long-polling pull waits on, woken by the queues it watches and only by them."""

from __future__ import annotations

import pytest

from runtime.pubsub.watchers import QueueWatchers

pytestmark = pytest.mark.unit


def test_a_watcher_is_woken_by_the_queues_it_watches_only() -> None:
    watchers = QueueWatchers()
    with watchers.watch([1, 2]) as woken:
        assert 1 in watchers and 2 in watchers and watchers
        watchers.wake(3)
        assert not woken.is_set()
        watchers.wake(2)
        assert woken.is_set()
    # Gone with its block: nothing is left to wake, and a wake costs nothing.
    assert not watchers and 1 not in watchers
    watchers.wake(1)


def test_every_watcher_of_a_queue_is_woken_and_each_leaves_on_its_own() -> None:
    watchers = QueueWatchers()
    with watchers.watch([7]) as first:
        with watchers.watch([7, 7]) as second:  # a queue named twice is watched once
            watchers.wake(7)
            assert first.is_set() and second.is_set()
        first.clear()
        assert 7 in watchers
        watchers.wake(7)
        assert first.is_set()
    assert not watchers


def test_wake_all_wakes_every_watcher_and_close_ends_every_wait_to_come() -> None:
    watchers = QueueWatchers()
    with watchers.watch([1]) as one, watchers.watch([2]) as two:
        watchers.wake_all()
        assert one.is_set() and two.is_set()
        one.clear()
        watchers.close()
        assert one.is_set() and watchers.closed
    with watchers.watch([3]) as later:
        assert later.is_set()  # the worker is stopping: no new wait either


def test_a_watcher_leaves_even_when_its_block_raises() -> None:
    watchers = QueueWatchers()
    with pytest.raises(RuntimeError), watchers.watch([5]):
        raise RuntimeError('the pull failed')
    assert not watchers
