"""The former names of the pub/sub observers (``runtime.pubsub.observers``), kept for existing code."""

from runtime.pubsub.observers import Observers as HookChain
from runtime.pubsub.observers import PubSubObserver as DeliveryHook

__all__ = ['DeliveryHook', 'HookChain']
