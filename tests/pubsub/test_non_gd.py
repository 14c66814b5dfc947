"""Non-GD messages: held in the delivering worker's memory, never written unless dead-lettered."""

from __future__ import annotations

from sqlalchemy import func, select

from runtime import Service
from runtime.db.models import Message
from runtime.testing import make_settings, wait_until


class Target(Service):
    """Records (n, delivery_count) on 'seen' of its recorder; n == 2 always fails."""

    name = 'ngd.target'

    def handle(self):
        self.recorder.add('seen', (self.request.payload['n'], self.request.raw_request['delivery_count']))
        if self.request.payload['n'] == 2:
            raise ValueError('poison')


def _runtime(runtime_factory, tmp_path, db_url, recorder):  # type: ignore[no-untyped-def]
    (tmp_path / 'rt').mkdir()
    settings = make_settings(tmp_path / 'rt', db_url)
    settings.pubsub.wait_non_sock_err = 0.02
    settings.pubsub.lease_renew_secs = 0.1
    return runtime_factory(recorder.bind(Target), settings=settings)


def _stored_messages(rt) -> int:  # type: ignore[no-untyped-def]
    with rt.engine.connect() as conn:
        return conn.execute(select(func.count()).select_from(Message)).scalar_one()


def test_non_gd_messages_stay_in_memory_and_keep_priority_order(runtime_factory, tmp_path, db_url, recorder):
    rt = _runtime(runtime_factory, tmp_path, db_url, recorder)
    rt.catalog.create_topic('ngd.topic', has_gd=False)
    sub = rt.catalog.subscribe('ngd.topic', 'service', service='ngd.target',
                              options={'max_attempts': 2, 'err_should_block': False})
    wait_until(lambda: rt.broker.delivering(sub.id), message='this worker delivering the subscription')
    for n in range(5):
        rt.broker.publish('ngd.topic', {'n': n}, priority=9 if n == 4 else 5)
    assert _stored_messages(rt) == 0

    wait_until(lambda: len(rt.catalog.dead_letters(sub.sub_key)) == 1, message='poison message dead-lettered')
    wait_until(lambda: len([s for s in recorder['seen'] if s[0] != 2]) == 4, message='the others delivered')
    seen = recorder['seen']
    assert seen[0] == (4, 1), 'priority 9 first'
    assert [n for n, _ in seen if n != 2] == [4, 0, 1, 3]
    dead = rt.catalog.dead_letters(sub.sub_key)[0]
    assert dead['delivery_count'] == 2 and 'poison' in dead['last_error']
    # Only the dead letter's message was written, so that it can be inspected and re-driven.
    assert _stored_messages(rt) == 1


def test_gd_flag_on_publication_overrides_topic_default(runtime_factory, tmp_path, db_url, recorder):
    rt = _runtime(runtime_factory, tmp_path, db_url, recorder)
    rt.catalog.create_topic('ngd.topic', has_gd=False)
    sub = rt.catalog.subscribe('ngd.topic', 'service', service='ngd.target')
    rt.catalog.set_active(sub.sub_key, False)  # keep it queued so that it can be counted
    rt.broker.publish('ngd.topic', {'n': 10}, has_gd=True)
    assert _stored_messages(rt) == 1


def test_a_subscription_with_stored_options_now_invalid_does_not_stop_the_others(runtime_factory, tmp_path, db_url,
                                                                                recorder):
    rt = _runtime(runtime_factory, tmp_path, db_url, recorder)
    rt.catalog.create_topic('ngd.bad')
    good = rt.catalog.subscribe('ngd.bad', 'service', service='ngd.target')
    bad = rt.catalog.subscribe('ngd.bad', 'pull', service='ngd.target')
    from sqlalchemy import update

    from runtime.db.models import Subscription
    with rt.engine.begin() as conn:
        conn.execute(update(Subscription).where(Subscription.id == bad.id).values(options='{"max_attempts": "x"}'))
    rt.broker.reload()
    assert rt.broker.registry.subs_by_key[good.sub_key].options.max_attempts == 25
    assert rt.broker.registry.subs_by_key[bad.sub_key].options.max_attempts == 25


def test_log_label_of_a_push_subscription_hides_its_query_string():
    from runtime.pubsub.registry import SubInfo
    sub = SubInfo(id=1, sub_key='sk', pattern='t', kind='rest_push', push_url='https://u:p@h:8443/x/y?token=s3cret')
    assert sub.label == 'sub#1(rest_push:https://h:8443/x/y on t)'
