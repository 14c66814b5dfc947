"""Observers: registering and unregistering what watches the broker."""

from __future__ import annotations

import pytest

from runtime.pubsub.observers import Observers, PubSubObserver

pytestmark = pytest.mark.unit


class _Counting(PubSubObserver):
    def __init__(self) -> None:
        self.published = 0

    def after_publish(self, pub: object, overflowed: bool) -> None:
        self.published += 1


def test_a_removed_observer_is_no_longer_called() -> None:
    kept, removed = _Counting(), _Counting()
    observers = Observers([kept, removed])
    observers.emit('after_publish', None, False)  # the calls are resolved and kept from here on
    observers.remove(removed)
    observers.emit('after_publish', None, False)
    assert (kept.published, removed.published) == (2, 1)
    assert observers.observers == [kept]


def test_removing_an_observer_not_registered_raises() -> None:
    with pytest.raises(ValueError):
        Observers([_Counting()]).remove(_Counting())
