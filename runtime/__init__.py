"""Conduit: a service-framework runtime with a durable publish/subscribe broker."""

from runtime.errors import (
    ConduitError,
    InvalidInput,
    InvocationTimeout,
    SelfInvocation,
    ServiceNotFound,
)
from runtime.service.base import Service

__all__ = [
    # Services
    'Service',
    # Errors
    'ConduitError',
    'InvalidInput',
    'InvocationTimeout',
    'SelfInvocation',
    'ServiceNotFound',
]
