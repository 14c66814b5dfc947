"""Services: the ``Service`` base class, what a running service may use, invocation, patterns, the store.

``from runtime.service import Service`` is the public face (as ``from runtime import Service``).
"""

from runtime.service.base import HTTP_VERBS, Bunch, HttpInfo, Request, Response, Service

__all__ = ['HTTP_VERBS', 'Bunch', 'HttpInfo', 'Request', 'Response', 'Service']
