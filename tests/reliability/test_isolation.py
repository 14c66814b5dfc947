"""A hanging or failing subscriber never delays another subscription."""

from __future__ import annotations

import gevent

from runtime import Service
from runtime.testing import make_settings


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
    """Records what it gets (on 'seen' of its recorder)."""

    name = 'iso.fast'

    def handle(self):
        self.recorder.add('seen', self.request.payload['n'])


def test_hanging_and_failing_subscribers_do_not_delay_others(runtime_factory, tmp_path, db_url, recorder):
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt', db_url)
    settings.pubsub.wait_non_sock_err = 0.05
    rt = runtime_factory(Hangs, Fails, recorder.bind(Fast), settings=settings)
    rt.catalog.create_topic('iso.topic')
    for service in ('iso.hangs', 'iso.fails', 'iso.fast'):
        rt.catalog.subscribe('iso.topic', 'service', service=service)
    for n in range(50):
        rt.broker.publish('iso.topic', {'n': n})
    assert recorder.wait_for('seen', 50, timeout=10) == list(range(50)), 'the fast subscriber got everything'
