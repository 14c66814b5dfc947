"""one_reload_at_a_time: reloads of one object in turn, of two objects side by side, reentrant."""

from __future__ import annotations

import gevent
import pytest

from runtime.cluster.sync import one_reload_at_a_time

pytestmark = pytest.mark.unit


class Copy:
    """A stand-in for a worker's in-memory copy: records when each reload ran."""

    def __init__(self, name: str, log: list[str]) -> None:
        self.name = name
        self.log = log

    @one_reload_at_a_time
    def reload(self, again: bool = False) -> str:
        """Read (yielding meanwhile), then swap in."""
        self.log.append(f'{self.name} start')
        gevent.sleep(0.02)
        if again:
            self.reload()  # a reload that reaches its own method again
        self.log.append(f'{self.name} end')
        return self.name


def test_reloads_of_one_object_run_in_turn() -> None:
    log: list[str] = []
    copy = Copy('a', log)
    gevent.joinall([gevent.spawn(copy.reload), gevent.spawn(copy.reload)], raise_error=True)
    assert log == ['a start', 'a end', 'a start', 'a end']


def test_reloads_of_two_objects_do_not_wait_for_each_other() -> None:
    log: list[str] = []
    first, second = Copy('a', log), Copy('b', log)
    gevent.joinall([gevent.spawn(first.reload), gevent.spawn(second.reload)], raise_error=True)
    assert log == ['a start', 'b start', 'a end', 'b end']


def test_a_reload_may_call_itself_and_keeps_its_result_and_name() -> None:
    log: list[str] = []
    copy = Copy('a', log)
    assert gevent.spawn(copy.reload, again=True).get(timeout=5) == 'a'
    assert log == ['a start', 'a start', 'a end', 'a end']
    assert Copy.reload.__name__ == 'reload' and Copy.reload.__doc__ == 'Read (yielding meanwhile), then swap in.'
