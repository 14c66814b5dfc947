"""SIGKILL under publish load: nothing acknowledged is lost (short variant; `make chaos` runs 20 kills)."""

from __future__ import annotations

import os

import pytest

from tests.reliability.harness import (
    FAST_PUBSUB,
    Publisher,
    Tally,
    kill_loop,
    prepare,
    read_delivered,
    wait_all_delivered,
)

#: Kills per run: 3 in the suite, more with CONDUIT_CHAOS_KILLS (make chaos sets 20).
KILLS = int(os.environ.get('CONDUIT_CHAOS_KILLS', '3'))


@pytest.mark.slow
def test_kill_loop_loses_no_acknowledged_publication(server_factory, tmp_path, capsys):
    out = tmp_path / 'delivered.txt'
    server = server_factory(extra_config=FAST_PUBSUB, env={'CONDUIT_TEST_OUT': str(out)})
    prepare(server)
    server.start()
    tally = Tally()
    publisher = Publisher(server, tally)
    publisher.start()
    try:
        kills = kill_loop(server, KILLS, tally)
    finally:
        publisher.stop()
    wait_all_delivered(out, tally)
    read_delivered(out, tally)
    with capsys.disabled():
        print(f'\nkill loop ({kills} kills): {tally.summary()}')
    assert len(tally.acknowledged) > 50, f'too little load to prove anything: {tally.summary()}'
    assert not tally.lost, f'acknowledged but never delivered: {sorted(tally.lost)[:20]}'
    assert not tally.phantom, f'delivered but never published: {sorted(tally.phantom)[:20]}'
    # Each kill can redeliver at most the batch in flight (20) of the one subscription.
    assert tally.duplicates <= kills * 20, tally.summary()
