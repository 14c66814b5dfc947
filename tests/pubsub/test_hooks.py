"""Pub/sub observers see publications, attempts and dead letters; a broken observer changes nothing."""

from __future__ import annotations

from runtime import Service
from runtime.pubsub.observers import PubSubObserver
from runtime.testing import make_settings, wait_until


class Flaky(Service):
    """Fails for n == 0, succeeds otherwise (recording n on 'handled' of its recorder)."""

    name = 'hooks.flaky'

    def handle(self):
        if self.request.payload['n'] == 0:
            raise ValueError('no zero')
        self.recorder.add('handled', self.request.payload['n'])


class Recording(PubSubObserver):
    """Remembers every call."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.durations: list[float] = []

    def after_publish(self, pub, overflowed):  # type: ignore[no-untyped-def]
        self.calls.append(('publish', pub.msg_id, overflowed))

    def after_deliver(self, sub, delivery, ok, error, duration_secs):  # type: ignore[no-untyped-def]
        # Recorded and checked by the test: an assertion here would be swallowed by the observers' chain.
        self.durations.append(duration_secs)
        self.calls.append(('deliver', delivery.msg_id, ok, type(error).__name__ if error else None))

    def after_dead_letter(self, sub, delivery, reason, error):  # type: ignore[no-untyped-def]
        self.calls.append(('dead', delivery.msg_id, reason))


class Broken(PubSubObserver):
    """Raises from every method."""

    def after_publish(self, pub, overflowed):  # type: ignore[no-untyped-def]
        raise RuntimeError('broken hook')

    after_deliver = after_dead_letter = after_publish  # type: ignore[assignment]


def test_observers_see_publications_attempts_and_dead_letters(runtime_factory, tmp_path, db_url, caplog, recorder):
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt', db_url)
    settings.pubsub.wait_non_sock_err = 0.02
    settings.pubsub.max_attempts = 2
    settings.pubsub.err_should_block = False
    rt = runtime_factory(recorder.bind(Flaky), settings=settings)
    recording = Recording()
    rt.broker.observers.add(recording)
    rt.broker.observers.add(Broken())

    bad = rt.broker.publish('hooks.flaky', {'n': 0})
    good = rt.broker.publish('hooks.flaky', {'n': 1})
    wait_until(lambda: ('dead', bad, 'max_attempts') in recording.calls, message='dead letter seen by the observer')
    assert recorder['handled'] == [1], 'the broken observer changed nothing'
    assert ('publish', bad, False) in recording.calls and ('publish', good, False) in recording.calls
    assert ('deliver', good, True, None) in recording.calls
    assert recording.calls.count(('deliver', bad, False, 'ValueError')) == 2
    assert len(recording.durations) == 3 and all(d >= 0 for d in recording.durations), recording.durations
    assert any('pub/sub observer' in r.message and r.levelname == 'CRITICAL' for r in caplog.records)


def test_the_former_names_of_observers_still_work(runtime_factory, tmp_path, db_url, recorder):
    from runtime.pubsub.hooks import DeliveryHook, HookChain

    class Old(DeliveryHook):
        def __init__(self) -> None:
            self.published: list[str] = []

        def after_publish(self, pub, overflowed):  # type: ignore[no-untyped-def]
            self.published.append(pub.msg_id)

    rt = runtime_factory(recorder.bind(Flaky), db_url=db_url)
    old = Old()
    rt.broker.hooks.add(old)
    msg_id = rt.broker.publish('hooks.flaky', {'n': 1})
    assert old.published == [msg_id]
    assert rt.broker.hooks is rt.broker.observers and isinstance(rt.broker.observers, HookChain)
    assert DeliveryHook is PubSubObserver and rt.broker.observers.hooks == rt.broker.observers.observers
