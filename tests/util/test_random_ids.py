"""random_hex: the kernel's random bytes from a pool, never the same bytes twice, not even across a fork."""

from __future__ import annotations

import os

import gevent
import pytest

from runtime.pubsub.subscribers.pull import is_ack_id, new_ack_id
from runtime.service.context import new_cid
from runtime.util import random_ids
from runtime.util.random_ids import CHUNK_BYTES, random_hex

pytestmark = pytest.mark.unit


def test_hex_of_the_length_asked_and_never_repeated() -> None:
    ids = [random_hex(12) for _ in range(5000)]  # several refills
    assert all(len(i) == 24 and int(i, 16) >= 0 for i in ids)
    assert len(set(ids)) == len(ids)
    assert len(random_hex(1)) == 2 and len(random_hex(CHUNK_BYTES)) == 2 * CHUNK_BYTES
    assert len(new_cid()) == 24 and is_ack_id(new_ack_id())


@pytest.mark.parametrize('nbytes', [0, -1, CHUNK_BYTES + 1])
def test_sizes_out_of_range_are_refused(nbytes: int) -> None:
    with pytest.raises(ValueError, match='nbytes must be 1 to 16'):
        random_hex(nbytes)


def test_threads_taking_ids_at_once_never_share_one() -> None:
    taken: list[list[str]] = [[] for _ in range(4)]

    def take(into: list[str]) -> None:
        for _ in range(20_000):
            into.append(random_hex(16))
    pool = gevent.get_hub().threadpool  # real threads: the suite runs monkey-patched
    gevent.joinall([pool.spawn(take, into) for into in taken], raise_error=True)
    every = [i for into in taken for i in into]
    assert len(set(every)) == len(every) == 80_000


def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    random_hex(16)  # the pool is filled: the child inherits its remaining chunks
    assert random_ids._chunks
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its first id, to the parent
        try:
            os.write(write, random_hex(16).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        childs = pipe.read()
    assert status == 0 and len(childs) == 32
    assert random_hex(16) != childs
