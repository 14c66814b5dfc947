"""The ``Service`` base class: what a user subclasses, and the request/response it sees.

A new instance is made for every invocation (by ``runtime.service.invoke.Invoker``), so instance
attributes never leak between calls. A service declares its name, optional ``input`` and
``output`` fields (``'-x'`` marks an optional one) and implements ``handle()`` or
``handle_<VERB>()``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar

from runtime.errors import InvalidService

if TYPE_CHECKING:
    from runtime.service.context import ServiceContext
    from runtime.service.patterns import Patterns

#: HTTP verbs a service may implement as handle_<VERB>.
HTTP_VERBS = ('GET', 'POST', 'PUT', 'PATCH', 'DELETE', 'HEAD', 'OPTIONS')

_CAMEL_BOUNDARY = re.compile(r'(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])')


class Bunch(dict):
    """A dict whose keys can also be read as attributes (``request.input.email``)."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


class HttpInfo:
    """The HTTP side of a request that came through a REST channel."""

    __slots__ = ('method', 'path', 'params', 'path_params', 'headers')

    def __init__(self, method: str = '', path: str = '', params: dict[str, Any] | None = None,
                 path_params: dict[str, str] | None = None, headers: dict[str, str] | None = None) -> None:
        self.method = method
        self.path = path
        self.params = params or {}
        self.path_params = path_params or {}
        self.headers = headers or {}


class Request:
    """What the service was called with."""

    __slots__ = ('payload', 'input', 'raw_request', 'http')

    def __init__(self, payload: Any = None, raw_request: Any = None, http: HttpInfo | None = None) -> None:
        self.payload = payload
        self.input: Bunch = Bunch()
        self.raw_request = raw_request if raw_request is not None else payload
        self.http = http or HttpInfo()


class Response:
    """What the service answers; the HTTP layer serialises it."""

    __slots__ = ('payload', 'status_code', 'headers', 'content_type')

    def __init__(self) -> None:
        self.payload: Any = None
        self.status_code = 200
        self.headers: dict[str, str] = {}
        self.content_type: str | None = None


def _parse_fields(spec: Any, attr: str, class_name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Split an input/output declaration into (required, optional) field names."""
    if spec is None:
        return (), ()
    if isinstance(spec, str):
        spec = (spec,)
    if not isinstance(spec, (tuple, list)):
        raise InvalidService(class_name, f'{attr} must be a tuple of field names, not {type(spec).__name__}')
    required, optional = [], []
    for item in spec:
        if not isinstance(item, str) or not item.strip('-'):
            raise InvalidService(class_name, f'{attr} holds an invalid field name: {item!r}')
        (optional if item.startswith('-') else required).append(item.lstrip('-'))
    return tuple(required), tuple(optional)


def derive_name(module: str, class_name: str) -> str:
    """The default service name: module name and kebab-cased class name."""
    kebab = _CAMEL_BOUNDARY.sub('-', class_name).lower()
    return f'{module}.{kebab}' if module else kebab


class Service:
    """Base class of every service."""

    #: The service's name; derived from module and class when not set.
    name: ClassVar[str] = ''
    #: Input fields; '-name' marks an optional one.
    input: ClassVar[Any] = None
    #: Output fields; '-name' marks an optional one.
    output: ClassVar[Any] = None

    # Filled in by the service store at registration.
    _required_input: ClassVar[tuple[str, ...]] = ()
    _optional_input: ClassVar[tuple[str, ...]] = ()
    _required_output: ClassVar[tuple[str, ...]] = ()
    _verbs: ClassVar[frozenset[str]] = frozenset()
    _has_handle: ClassVar[bool] = False
    #: Hook methods the class overrides (only those are called); all of them until _prepare has run.
    _hooks: ClassVar[frozenset[str]] = frozenset(
        ('before_handle', 'after_handle', 'finalize_handle', 'before_job', 'after_job'))

    # Set per invocation by the invoker.
    cid: str
    request: Request
    response: Response
    channel: str
    invocation_time: datetime
    #: What this service may use of the runtime that runs it.
    _context: ServiceContext

    logger: logging.Logger

    def handle(self) -> None:
        """Process the request; override this or handle_<VERB>."""
        raise NotImplementedError  # replaced by a 405 in dispatch when a class has neither

    def accept(self) -> bool:
        """Return False to reject the request with 400 before handle() runs."""
        return True

    def before_handle(self) -> None:
        """Called before handle(); an exception here is logged, not raised."""

    def after_handle(self) -> None:
        """Called after a successful handle(); an exception here is logged, not raised."""

    def finalize_handle(self) -> None:
        """Called after every invocation, successful or not; exceptions are logged."""

    def before_job(self) -> None:
        """Called before handle() on the scheduler channel."""

    def after_job(self) -> None:
        """Called after handle() on the scheduler channel."""

    # Runtime facilities

    @property
    def config(self) -> Mapping[str, Any]:
        """This service's configuration: its ``[services."<name>"]`` table of server.toml (read-only)."""
        return MappingProxyType(self._context.config.get(self.name, {}))

    def invoke(self, name_or_class: str | type[Service], payload: Any = None, timeout: float | None = None,
               **kwargs: Any) -> Any:
        """Invoke another service synchronously and return its response payload."""
        return self._context.invoker.invoke(name_or_class, payload, timeout=timeout, caller=self, **kwargs)

    def invoke_async(self, name: str | type[Service], payload: Any = None, callback: Any = None) -> str:
        """Invoke a service in the background (RAM only) and return the invocation's cid."""
        return self._context.invoker.invoke_async(name, payload, callback=callback, caller=self)

    @property
    def patterns(self) -> Patterns:
        """Invocation patterns: fanout, parallel, invoke_retry, invoke_async."""
        from runtime.service.patterns import Patterns
        return Patterns(self._context.invoker, self._context.spawn, self)

    @property
    def pubsub(self) -> Any:
        """The publish/subscribe API of this runtime."""
        return self._context.pubsub(self)

    def publish(self, topic_or_service: str, data: Any = None, **kwargs: Any) -> str:
        """Shortcut for self.pubsub.publish."""
        return self.pubsub.publish(topic_or_service, data, **kwargs)

    # Class-level preparation

    @classmethod
    def _prepare(cls, module_name: str) -> None:
        """Validate the class and precompute what every invocation needs."""
        class_name = f'{cls.__module__}.{cls.__qualname__}'
        if not cls.__dict__.get('name'):
            cls.name = derive_name(module_name, cls.__name__)
        if not isinstance(cls.name, str) or not cls.name.strip() or cls.name != cls.name.strip():
            raise InvalidService(class_name, f'name must be a non-empty string without surrounding '
                                             f'whitespace, not {cls.name!r}')
        cls._required_input, cls._optional_input = _parse_fields(cls.input, 'input', class_name)
        cls._required_output, _ = _parse_fields(cls.output, 'output', class_name)
        cls._verbs = frozenset(v for v in HTTP_VERBS if callable(getattr(cls, f'handle_{v}', None)))
        cls._has_handle = cls.handle is not Service.handle
        cls._hooks = frozenset(h for h in Service._hooks if getattr(cls, h) is not getattr(Service, h))
        if not cls._has_handle and not cls._verbs:
            raise InvalidService(class_name, 'defines neither handle() nor handle_<VERB>()')
        cls.logger = logging.getLogger(f'conduit.service.{cls.name}')
