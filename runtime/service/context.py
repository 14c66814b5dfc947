"""What a running service may use of the runtime that runs it: ``ServiceContext``.

The invoker gives every service instance it makes its context (``svc._context``), and
``Service.invoke``, ``invoke_async``, ``patterns``, ``pubsub``, ``publish`` and ``config`` go through
it; no service reaches the runtime itself. The context is built once per invoker, not per call.

This module sits below ``runtime.service.base``, ``runtime.service.invoke`` and ``runtime.service.patterns``, which all
use it, so it imports none of them: the invoker is described here by the ``ServiceInvoker`` protocol
(``runtime.service.invoke.Invoker`` is its implementation). The channel names a service sees in
``self.channel`` and the correlation ids live here for the same reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import gevent

from runtime.util.random_ids import random_hex

#: Channel names a service can see in self.channel.
CHANNEL_INVOKE = 'invoke'
CHANNEL_INVOKE_ASYNC = 'invoke-async'
CHANNEL_CALLBACK = 'invoke-async-callback'
CHANNEL_REST = 'rest'


def new_cid() -> str:
    """A new correlation id: 24 hex characters of randomness."""
    return random_hex(12)


class ServiceInvoker(Protocol):
    """The invoker as services and their patterns call it (``runtime.service.invoke.Invoker`` implements it)."""

    #: The service store (``runtime.service.store.ServiceStore``): ``get(name_or_class)``, ``has(name)``.
    store: Any

    def run(self, cls: Any, payload: Any = None, *, channel: str = CHANNEL_INVOKE, cid: str | None = None,
            raw_request: Any = None, http: Any = None) -> Any:
        """Run one invocation of cls and return the finished instance."""

    def invoke(self, name_or_class: Any, payload: Any = None, timeout: float | None = None, caller: Any = None,
               channel: str = CHANNEL_INVOKE, cid: str | None = None) -> Any:
        """Invoke a service synchronously and return its response payload."""

    def invoke_async(self, name_or_class: Any, payload: Any = None, callback: Any = None, caller: Any = None,
                     cid: str | None = None) -> str:
        """Invoke a service in a new greenlet; return its cid at once."""


@dataclass(frozen=True, slots=True)
class ServiceContext:
    """What a running service may use of the runtime that runs it."""

    invoker: ServiceInvoker                           # invoke(...), invoke_async(...), run(...)
    spawn: Callable[..., gevent.Greenlet]             # the runtime's spawner.spawn
    pubsub: Callable[[Any], Any]                      # the pub/sub API bound to a service (PubSubAPI)
    config: Mapping[str, Mapping[str, Any]]           # per service name, its [services."name"] table
    #: The runtime's Spark jobs (``runtime.spark.SparkManager``), read when a SparkService asks; None: no Spark.
    spark: Callable[[], Any] | None = None
    #: Reading and killing Spark jobs (``runtime.spark.admin.SparkJobAdmin``), read the same way; None: no Spark.
    spark_admin: Callable[[], Any] | None = None
