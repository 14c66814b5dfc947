"""An example subscriber kind, ``memo``: each delivered message's data is kept in the plug-in's list.

It is the smallest whole kind (its own option, its check, its delivery) and shows what adding a kind
takes: this module, and one line where the kinds are registered (``SUBSCRIBER_KINDS`` in
``runtime/pubsub/subscribers/__init__.py``; the tests register it beside the standard ones instead).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runtime.errors import ConfigError
from runtime.pubsub.message import Delivery
from runtime.pubsub.options import DeliveryOptions, KindOptions
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.subscribers.base import Context, Deliverer, KindHooks, KindTools
from runtime.pubsub.subscribers.service import prepare

#: The kind's name, as subscriptions store it (at most 16 characters).
KIND_MEMO = 'memo'


@dataclass(frozen=True)
class MemoOptions(KindOptions):
    """A memo subscription's own option: whether text data is kept upper-cased."""

    own_kind_only = True
    family = 'memo_*'

    memo_case: str = 'as-is'

    def check(self, where: str) -> None:
        """memo_case is 'as-is' or 'upper'."""
        if self.memo_case not in ('as-is', 'upper'):
            raise ConfigError(where, f"memo_case must be 'as-is' or 'upper', not {self.memo_case!r}")


class MemoSubscriber(KindHooks):
    """Memo subscriptions: any worker delivers them, into its plug-in's ``kept`` list."""

    kind = KIND_MEMO
    options = MemoOptions
    delivered = True
    queue_limited = True
    spread = True

    @classmethod
    def build(cls, tools: KindTools) -> MemoSubscriber:
        """The plug-in of a worker."""
        return cls(tools)

    def __init__(self, tools: KindTools) -> None:
        self._run = tools.run_service
        #: (sub_key, data) of every message delivered, in delivery order.
        self.kept: list[tuple[str, Any]] = []

    @staticmethod
    def check(where: str, service: str, push_url: str, options: DeliveryOptions) -> None:
        """A memo subscription names no service and no URL."""
        if service or push_url:
            raise ConfigError(where, 'a memo subscription takes no service and no push_url')

    def wants_delivery(self, sub: SubInfo) -> bool:
        """Any worker may keep a subscription's messages: each one competes for its lease."""
        return True

    def deliverer(self, ctx: Context, sub: SubInfo) -> Deliverer:
        """Keeps each message as the subscriber sees it, after the hook services."""
        def deliver(sub: SubInfo, d: Delivery) -> bool:
            meta = prepare(ctx, sub, d, self._run)
            if meta is None:
                return False  # a hook deleted it
            data = meta['data']
            upper = sub.options.of(MemoOptions).memo_case == 'upper'
            self.kept.append((sub.sub_key, data.upper() if upper and isinstance(data, str) else data))
            return True
        return Deliverer(deliver=deliver)
