"""Completion: a file is taken only once it is stable over polls, or once its marker is there."""

from __future__ import annotations

import pytest

from runtime.files.completion import Completion
from runtime.files.sources import Entry

pytestmark = pytest.mark.unit


def e(path: str, size: int = 10, mtime: float = 100.0) -> Entry:
    return Entry(path, path.rpartition('/')[2], size, mtime)


def paths(entries: list[Entry]) -> list[str]:
    return [entry.path for entry in entries]


def test_a_new_file_is_never_complete_and_one_poll_unchanged_is_enough_with_stable_polls_1() -> None:
    c = Completion('stable', 1, '.done')
    assert c.update([e('a')]) == []
    assert paths(c.update([e('a')])) == ['a']
    assert paths(c.update([e('a')])) == ['a']  # still complete until claimed


def test_any_change_starts_the_count_again() -> None:
    c = Completion('stable', 2, '.done')
    assert c.update([e('a', 1)]) == []
    assert c.update([e('a', 1)]) == []
    assert c.update([e('a', 2)]) == []  # grew
    assert c.update([e('a', 2)]) == []
    assert c.update([e('a', 2, 101.0)]) == []  # touched
    assert c.update([e('a', 2, 101.0)]) == []
    assert paths(c.update([e('a', 2, 101.0)])) == ['a']


def test_files_are_judged_one_by_one_in_listing_order() -> None:
    c = Completion('stable', 1, '.done')
    c.update([e('b'), e('a')])
    assert paths(c.update([e('b'), e('a', 11), e('c')])) == ['b']
    assert paths(c.update([e('b'), e('a', 11), e('c')])) == ['b', 'a', 'c']


def test_a_file_that_disappears_is_forgotten() -> None:
    c = Completion('stable', 1, '.done')
    c.update([e('a')])
    c.update([])
    assert c.update([e('a')]) == []
    assert paths(c.update([e('a')])) == ['a']


def test_forget_makes_a_file_new() -> None:
    c = Completion('stable', 1, '.done')
    c.update([e('a')])
    c.forget('a')
    c.forget('never seen')
    assert c.update([e('a')]) == []


def test_marker_mode_needs_the_companion_in_the_same_listing() -> None:
    c = Completion('marker', 2, '.done')
    assert c.update([e('a.csv'), e('b.csv'), e('b.csv.done'), e('sub/c.csv'), e('c.csv.done'),
                     e('orphan.done')]) == [e('b.csv')]
    assert paths(c.update([e('a.csv'), e('a.csv.done')])) == ['a.csv']
    assert c.update([e('a.csv')]) == []


def test_markers_are_never_returned_even_with_their_own_marker() -> None:
    c = Completion('marker', 1, '.ok')
    assert paths(c.update([e('x'), e('x.ok'), e('x.ok.ok')])) == ['x']


def test_marker_paths_are_per_directory() -> None:
    c = Completion('marker', 1, '.done')
    assert paths(c.update([e('s/a'), e('s/a.done'), e('t/a'), e('a.done')])) == ['s/a']


@pytest.mark.parametrize('args', [('sometimes', 1, '.done'), ('stable', 0, '.done'), ('stable', -1, '.done'),
                                  ('stable', True, '.done'), ('stable', 1.5, '.done'), ('marker', 1, ''),
                                  ('marker', 1, '/x')])
def test_bad_settings_are_refused(args: tuple) -> None:
    with pytest.raises(ValueError):
        Completion(*args)
