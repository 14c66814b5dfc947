"""SIGKILL while a slow subscriber works through a backlog: duplicates are bounded by time, not by batch size.

The subscriber's handler takes 10 ms and the publisher outruns it, so the loop always holds a full
batch (100, the default). Each message's ack is stored within milliseconds of its handler's end
(progressive settlement), so a kill redelivers what was in the handler and what finished in the
last few milliseconds — not what the batch had done so far (up to 99 messages before).
"""

from __future__ import annotations

import os
import textwrap

import pytest

from tests.reliability.harness import Publisher, Tally, kill_loop, read_delivered, wait_all_delivered

#: Kills per run (CONDUIT_CHAOS_KILLS overrides, as for the kill loop).
KILLS = int(os.environ.get('CONDUIT_CHAOS_KILLS', '3'))

#: Duplicates a kill may cause per subscription (the target: successes settle within milliseconds).
MAX_DUPLICATES_PER_KILL = 5

#: Messages queued at once before the stream starts, numbered from BURST_FIRST.
BURST = 500
BURST_FIRST = 10_000_000

#: Short waits and a quick takeover after a kill; the default batch size, so that it is the batch that is big.
PUBSUB = '''
[pubsub]
delivery_batch_size = 100
wait_non_sock_err = 0.05
wait_sock_err = 0.05
lease_ttl_secs = 2.0
lease_renew_secs = 0.3
poll_interval_secs = 0.05
'''

SERVICES = textwrap.dedent('''
    import os
    import time

    from runtime import Service

    OUT = os.environ['CONDUIT_TEST_OUT']


    class SlowRecord(Service):
        """Works 10 ms on each message, then records its number."""

        name = 'test.slow_record'

        def handle(self):
            time.sleep(0.01)
            with open(OUT, 'a') as f:
                f.write(f"{self.request.payload['n']}\\n")


    class Burst(Service):
        """Publishes count numbers from first to test.slow_record, concurrently (a backlog in a moment)."""

        name = 'test.publish_burst'

        def handle(self):
            import gevent
            first, count = self.request.payload['first'], self.request.payload['count']
            gevent.joinall([gevent.spawn(self.publish, 'test.slow_record', {'n': n})
                            for n in range(first, first + count)], raise_error=True)


    class Publish(Service):
        """Publishes one number to test.slow_record and answers with the msg_id."""

        name = 'test.publish_slow'

        def handle(self):
            self.response.payload = {'msg_id': self.publish('test.slow_record', {'n': self.request.payload['n']})}
''')


@pytest.mark.slow
def test_a_kill_redelivers_only_what_finished_in_the_last_milliseconds(server_factory, tmp_path, capsys):
    out = tmp_path / 'delivered.txt'
    server = server_factory(extra_config=PUBSUB, env={'CONDUIT_TEST_OUT': str(out)})
    (server.hot_deploy / 'slow.py').write_text(SERVICES)
    server.start()
    tally = Tally()
    # A backlog to start with, and four publishers that outrun a handler doing 100 messages/s: every batch is full.
    burst = range(BURST_FIRST, BURST_FIRST + BURST)
    tally.attempted.update(burst)
    server.invoke('test.publish_burst', {'first': BURST_FIRST, 'count': BURST})
    tally.acknowledged.update(burst)
    publishers = [Publisher(server, tally, service='test.publish_slow', first=i * 1_000_000) for i in range(4)]
    for publisher in publishers:
        publisher.start()
    try:
        kills = kill_loop(server, KILLS, tally, seed=3)
    finally:
        for publisher in publishers:
            publisher.stop()
    wait_all_delivered(out, tally, timeout=180)
    read_delivered(out, tally)
    twice = sum(1 for c in tally.delivered.values() if c > 1)
    with capsys.disabled():
        print(f'\nkill -9 with a 10 ms handler, batch 100 ({kills} kills): {tally.summary()} '
              f'messages delivered more than once={twice} duplicates per kill={tally.duplicates / kills:.1f}')
    assert len(tally.acknowledged) > 300, f'too little load to prove anything: {tally.summary()}'
    assert not tally.lost, f'acknowledged but never delivered: {sorted(tally.lost)[:20]}'
    assert not tally.phantom, f'delivered but never published: {sorted(tally.phantom)[:20]}'
    assert tally.duplicates <= kills * MAX_DUPLICATES_PER_KILL, tally.summary()
