"""bench/instructions.py reads callgrind's files as it should (the valgrind runs are too slow for the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.instructions import Count, _thread_totals, clock, per_message, round_secs

pytestmark = pytest.mark.unit


def _write(directory: Path, name: str, total: int | None) -> None:
    body = 'version: 1\ncreator: callgrind-3.19.0\n'
    if total is not None:
        body += f'events: Ir\nsummary: {total}\ntotals: {total}\n'
    (directory / name).write_text(body, encoding='utf-8')


def test_the_main_thread_is_counted_apart_from_the_others(tmp_path: Path) -> None:
    _write(tmp_path, 'cg.out', None)  # callgrind's file without a thread number holds nothing
    _write(tmp_path, 'cg.out-01', 1000)
    _write(tmp_path, 'cg.out-02', 30)
    _write(tmp_path, 'cg.out-03', 7)
    _write(tmp_path, 'other.out-01', 5)
    assert _thread_totals(tmp_path, 'cg.out') == (1000, 37)


def test_a_thread_file_without_a_summary_is_an_error_naming_it(tmp_path: Path) -> None:
    _write(tmp_path, 'cg.out-01', 1000)
    _write(tmp_path, 'cg.out-02', None)
    with pytest.raises(RuntimeError, match='cg.out-02'):
        _thread_totals(tmp_path, 'cg.out')


def test_per_message_is_the_difference_over_the_messages_between_the_runs() -> None:
    row = per_message(Count(1000, 500, 2.0), Count(5000, 2500, 6.0), 4)
    assert (row['total'], row['hub'], row['threads']) == (1500.0, 1000.0, 500.0)


def test_what_the_clock_cost_over_the_longer_round_is_taken_away() -> None:
    # 100 and 20 instructions per idle second; the larger round took 10 s more: 1,000 and 200 are not the messages'.
    per_second = clock(Count(500, 100, 10.0), Count(2500, 500, 30.0))
    assert per_second == (100.0, 20.0)
    row = per_message(Count(1000, 500, 5.0), Count(6000, 2700, 15.0), 4, per_second)
    assert (row['hub'], row['threads']) == (1000.0, 500.0)
    assert (row['clock_per_sec'], row['clock_per_message']) == (120.0, 300.0)


def test_a_round_lasts_its_messages_over_the_rate_it_printed() -> None:
    assert round_secs('sqlite publishers=50: 1,250 / 1,250 / 1,250 msg/s, CPU 9 / 9 / 9 µs per message', 5000) == 4.0
    with pytest.raises(RuntimeError, match='no rate'):
        round_secs('Traceback ...', 5000)


def test_runs_too_close_to_tell_apart_are_refused() -> None:
    with pytest.raises(ValueError, match='further apart'):
        per_message(Count(5000, 500, 1.0), Count(4000, 600, 1.0), 10)
