"""One worker, one identity: every part that names its worker names it the same way."""

from __future__ import annotations

import os
from collections.abc import Callable

from runtime.files.claims import owner_of, this_owner
from runtime.testing import TestRuntime


def test_every_part_of_a_runtime_names_its_worker_with_the_one_identity(
        runtime_factory: Callable[..., TestRuntime]) -> None:
    rt = runtime_factory()
    worker_id = rt.identity.id
    # The scheduler and Spark made identities of their own, apart from the leases' (three ids for one worker).
    assert rt.broker.leases.owner == rt.scheduler.owner == rt.spark.owner == rt.workers.identity.id == worker_id
    assert rt.stats._worker() == worker_id
    # File claims name the worker by host and pid, as a name a file may carry.
    assert rt.file_transfer.owner == owner_of(rt.identity.host, rt.identity.pid) == this_owner()
    assert (rt.identity.pid, worker_id.split(':')[1]) == (os.getpid(), str(os.getpid()))


def test_two_runtimes_of_one_process_are_two_workers(runtime_factory: Callable[..., TestRuntime]) -> None:
    first, second = runtime_factory(), runtime_factory()
    assert first.identity.id != second.identity.id
    assert first.broker.leases.owner != second.broker.leases.owner
