"""bench/peers.py: a peer round that does not finish is retried, then reported as failed; the run goes on."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from bench import common, peers, run

pytestmark = pytest.mark.unit


def _args(**overrides: Any) -> argparse.Namespace:
    values = {'count': 3000, 'seq_count': 500, 'rounds': 2, 'publishers': '50', 'systems': 'celery,dramatiq',
              'brokers': 'rabbitmq', 'confirms': '', 'no_write': True}
    return argparse.Namespace(**{**values, **overrides})


def test_a_round_that_fails_then_finishes_counts() -> None:
    outcomes = iter([RuntimeError('dramatiq on rabbitmq: not all 3000 messages were handled'), 1000.0, 2000.0])

    def fake_round() -> float:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    rates, failures = peers.measure_rounds(fake_round, 2, 'dramatiq rabbitmq')
    assert rates == [1000.0, 2000.0] and failures == []


def test_a_round_that_always_fails_is_tried_three_times_then_reported() -> None:
    calls = []

    def fake_round() -> float:
        calls.append(1)
        raise RuntimeError('not all 3000 messages were handled')

    rates, failures = peers.measure_rounds(fake_round, 2, 'dramatiq rabbitmq')
    assert len(calls) == 2 * (1 + peers.RETRIES)
    assert rates == []
    assert failures == ['round 1: RuntimeError: not all 3000 messages were handled',
                        'round 2: RuntimeError: not all 3000 messages were handled']


def test_the_run_goes_on_and_the_table_shows_the_failed_figure(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    def fake_round(system: str, broker: str, count: int, publishers: int, tmp: Path, confirm: bool) -> float:
        if system == 'dramatiq':
            raise RuntimeError(f'{system} on {broker}: not all {count} messages were handled')
        return 1500.0

    rows = peers.measure_all(_args(), tmp_path, run_round=fake_round)
    assert [(r['system'], r['rates']) for r in rows] == [('celery', [1500.0, 1500.0]), ('dramatiq', [])]
    assert len(rows[1]['failed']) == 2

    written: dict[str, Any] = {}
    monkeypatch.setattr(common, 'write_result', lambda name, md, data: written.update(md=md, data=data))
    peers.write(rows, _args())
    table = {line.split('|')[1].strip().split()[0]: line for line in written['md'].splitlines()
             if line.startswith('| Celery') or line.startswith('| Dramatiq')}
    assert '| 1,500 / 1,500 / 1,500 |' in table['Celery']
    assert f'failed (2 of 2 rounds failed after {peers.RETRIES} retries each)' in table['Dramatiq']
    assert 'not all 3000 messages were handled' in written['md']

    # The side-by-side comparison leaves the failed peer out instead of failing.
    throughput = {'rows': [{'broker': 'sqlite', 'publishers': 50, 'rates': [9000.0]}]}
    md, _summary = run.comparison(throughput, {'rows': rows})
    assert '| 50 |' in md


def test_some_rounds_failed_shows_both() -> None:
    assert peers.rate_cell([1000.0], ['round 2: RuntimeError: x']) == \
        f'{common.fmt_stats([1000.0])} (1 of 2 rounds failed after {peers.RETRIES} retries each)'
