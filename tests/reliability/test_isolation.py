"""A hanging or failing subscriber never delays another subscription."""

from __future__ import annotations

import gevent

from runtime import Service
from runtime.testing import make_settings, wait_until

fast_seen: list[int] = []


class Hangs(Service):
    """Never finishes in time."""

    name = 'iso.hangs'

    def handle(self):
        gevent.sleep(60)


class Fails(Service):
    """Always fails."""

    name = 'iso.fails'

    def handle(self):
        raise RuntimeError('down')


class Fast(Service):
    """Records what it gets."""

    name = 'iso.fast'

    def handle(self):
        fast_seen.append(self.request.payload['n'])


def test_hanging_and_failing_subscribers_do_not_delay_others(runtime_factory, tmp_path, db_url):
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt', db_url)
    settings.pubsub.wait_non_sock_err = 0.05
    fast_seen.clear()
    rt = runtime_factory(Hangs, Fails, Fast, settings=settings)
    rt.catalog.create_topic('iso.topic')
    for service in ('iso.hangs', 'iso.fails', 'iso.fast'):
        rt.catalog.subscribe('iso.topic', 'service', service=service)
    for n in range(50):
        rt.broker.publish('iso.topic', {'n': n})
    wait_until(lambda: len(fast_seen) == 50, timeout=10, message='the fast subscriber got everything')
    assert fast_seen == list(range(50))
