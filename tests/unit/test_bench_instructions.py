"""bench/instructions.py reads callgrind's files as it should (the valgrind runs are too slow for the suite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.instructions import _thread_totals, per_message


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
    assert per_message((1000, 500), (5000, 2500), 4) == {'total': 1500.0, 'hub': 1000.0, 'threads': 500.0}


def test_runs_too_close_to_tell_apart_are_refused() -> None:
    with pytest.raises(ValueError, match='further apart'):
        per_message((5000, 500), (4000, 600), 10)
