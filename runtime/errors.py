"""Every error Conduit raises on purpose, under one root.

The tree is shallow (at most three levels below ``ConduitError``) and each class carries the
data that names the offending object, so that the HTTP layer can map the whole tree in one
error handler (``runtime.http.errors``) and a user reading a log line knows what to fix::

    try:
        self.invoke('crm.customer.get', {'id': 1})
    except ServiceNotFound as e:
        self.logger.warning('no such service: %s', e.name)

Classes that describe bad input also subclass ``ValueError`` so plain ``except ValueError``
clauses keep working.
"""

from __future__ import annotations

from collections.abc import Sequence

#: HTTP status each class maps to when it reaches the HTTP layer; subclasses override it.
DEFAULT_HTTP_STATUS = 500


class ConduitError(Exception):
    """Root of every error Conduit raises on purpose."""

    http_status: int = DEFAULT_HTTP_STATUS

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or type(self).__name__).strip())

    @property
    def details(self) -> str:
        """The message shown to a client: safe to return, never contains secrets."""
        return str(self)


# Services and invocation


class ServiceNotFound(ConduitError, LookupError):
    """No service is deployed under that name."""

    http_status = 404

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f'service not found: {name!r}')


class InvalidService(ConduitError, ValueError):
    """A Service class cannot be deployed as it is."""

    def __init__(self, class_name: str, reason: str) -> None:
        self.class_name = class_name
        self.reason = reason
        super().__init__(f'service class {class_name!r} is invalid: {reason}')


class InvalidInput(ConduitError, ValueError):
    """A request lacks required input fields (all of them named) or has a malformed one."""

    http_status = 400

    def __init__(self, field: str | Sequence[str], reason: str | None = None) -> None:
        self.fields = (field,) if isinstance(field, str) else tuple(field)
        self.field = self.fields[0]
        self.reason = reason or ('is required' if len(self.fields) == 1 else 'are required')
        names = ', '.join(repr(f) for f in self.fields)
        super().__init__(f"input field{'s' if len(self.fields) > 1 else ''} {names} {self.reason}")


class InvalidOutput(ConduitError):
    """A service did not produce a required output field."""

    def __init__(self, service: str, field: str) -> None:
        self.service = service
        self.field = field
        super().__init__(f'service {service!r} did not set required output field {field!r}')


class BadRequest(ConduitError, ValueError):
    """The request cannot be processed as sent."""

    http_status = 400


class MethodNotAllowed(ConduitError):
    """The service has no handler for this HTTP method."""

    http_status = 405

    def __init__(self, method: str, allowed: list[str] | None = None) -> None:
        self.method = method
        self.allowed = allowed or []
        super().__init__(f'method {method} is not allowed')


class RequestRejected(ConduitError):
    """The service's accept() refused the request."""

    http_status = 400

    def __init__(self, service: str) -> None:
        self.service = service
        super().__init__(f'request not accepted by service {service!r}')


class SelfInvocation(ConduitError):
    """A service tried to invoke itself."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f'service {name!r} may not invoke itself')


class InvocationTimeout(ConduitError, TimeoutError):
    """An invoked service did not finish in time and was stopped."""

    http_status = 504

    def __init__(self, name: str, timeout: float) -> None:
        self.name = name
        self.timeout = timeout
        super().__init__(f'service {name!r} did not finish within {timeout:g} s')


# Deployment


class DeploymentError(ConduitError):
    """A module could not be deployed; the previous version stays live."""

    def __init__(self, file_name: str, reason: str, line: int | None = None) -> None:
        self.file_name = file_name
        self.reason = reason
        self.line = line
        where = f'{file_name}:{line}' if line else file_name
        super().__init__(f'cannot deploy {where}: {reason}')


# HTTP and security


class ChannelNotFound(ConduitError, LookupError):
    """No REST channel serves this path and method."""

    http_status = 404

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f'no channel for path {path!r}')


class Unauthorized(ConduitError):
    """Credentials are missing, wrong or belong to an inactive definition."""

    http_status = 401

    def __init__(self, realm: str = 'Conduit', message: str = 'Invalid credentials') -> None:
        self.realm = realm
        super().__init__(message)


class AccessDenied(ConduitError):
    """Valid credentials that do not grant this; 401 as Zato 4.1 answers it (not a failed sign-in)."""

    http_status = 401

    def __init__(self, realm: str, message: str) -> None:
        self.realm = realm
        super().__init__(message)


class Forbidden(ConduitError):
    """The caller is known but may not do this."""

    http_status = 403


class SessionRequired(ConduitError):
    """The dashboard needs a signed-in session: none was sent, or it ended (no Basic Auth challenge)."""

    http_status = 401


class PayloadTooLarge(ConduitError):
    """The request body is larger than the configured limit."""

    http_status = 413

    def __init__(self, size: int, limit: int, announced: bool = False) -> None:
        self.size = size
        self.limit = limit
        if announced:  # by chunk sizes: a client may write any number of hex digits
            told = f'{size}' if size < 10 ** 15 else 'more than 10^15'
            super().__init__(f'request body: its chunks announce {told} bytes, over the limit of {limit} bytes')
        else:
            super().__init__(f'request body of {size} bytes exceeds the limit of {limit} bytes')


class StorageUnavailable(ConduitError):
    """The database cannot be reached; nothing was stored."""

    http_status = 503


class RequestTimeout(ConduitError):
    """The client sent its request body too slowly."""

    http_status = 408


class TooManyRequests(ConduitError):
    """Too many failed sign-ins from this client: wait before trying again."""

    http_status = 429

    def __init__(self, retry_after_secs: int) -> None:
        self.retry_after_secs = max(1, int(retry_after_secs))
        super().__init__(f'too many failed sign-ins from this client; retry after {self.retry_after_secs} s')


class ServerBusy(ConduitError):
    """The worker is shedding load: too many open connections."""

    http_status = 503


# Publish/subscribe


class LeaseLost(ConduitError):
    """A worker's lease (a subscription's delivery) was taken by another worker, or taken again since."""

    def __init__(self, name: str, version: int, current: int | None) -> None:
        self.name = name
        self.version = version
        self.current = current
        now = 'no longer held by this worker' if current is None else f'now at version {current}'
        super().__init__(f'lease {name} taken at version {version} is {now}: its writes are refused')


class TopicNotFound(ConduitError, LookupError):
    """No topic of that name exists."""

    http_status = 404

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f'topic not found: {name!r}')


class InvalidTopicName(ConduitError, ValueError):
    """A topic name or pattern breaks the naming rules."""

    http_status = 400

    #: Longest repr of the offending name shown in the message.
    MAX_SHOWN_CHARS = 60

    def __init__(self, name: object, reason: str, *, kind: str = 'topic name') -> None:
        self.name = name
        self.reason = reason
        shown = repr(name)
        if len(shown) > self.MAX_SHOWN_CHARS:
            shown = shown[: self.MAX_SHOWN_CHARS - 3] + '...'
        super().__init__(f'{kind} {shown} {reason}')


class TopicInactive(ConduitError):
    """The topic exists but does not accept publications."""

    http_status = 403

    def __init__(self, name: str, message: str | None = None) -> None:
        self.name = name
        super().__init__(message or f'topic {name!r} is inactive')


class TopicFull(ConduitError):
    """The topic reached its max depth and is configured to reject new messages."""

    http_status = 503

    def __init__(self, name: str, depth: int) -> None:
        self.name = name
        self.depth = depth
        super().__init__(f'topic {name!r} is full ({depth} messages waiting)')


class QueueFull(TopicFull):
    """A subscription queue of the topic reached the topic's max depth; nothing was stored."""

    def __init__(self, name: str, depth: int, subscriber: str) -> None:
        self.subscriber = subscriber
        super().__init__(name, depth)
        # The subscriber's label, never its sub_key (a secret).
        self.args = (f'topic {name!r}: the queue of subscriber {subscriber} is full ({depth} messages waiting)',)


class OverflowLogFull(TopicFull):
    """The topic's overflow log reached its size cap; the publication was refused."""

    def __init__(self, name: str, size: int, limit: int) -> None:
        super().__init__(name, 0)
        self.args = (f'topic {name!r} is full and its overflow log reached its cap of {limit} bytes '
                     f'({size} bytes)',)


class InvalidMessage(ConduitError, ValueError):
    """A publication is malformed (a field of it is named)."""

    http_status = 400

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f'{field} {reason}')


class MessageTooLarge(ConduitError):
    """A message is larger than pubsub.max_message_size."""

    http_status = 413

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f'message of {size} bytes exceeds the limit of {limit} bytes')


class UnrenderableMessage(ConduitError, ValueError):
    """A stored message cannot be turned into what its subscriber receives; it goes to the dead-letter queue."""

    def __init__(self, msg_id: str, problem: str) -> None:
        self.msg_id = msg_id
        self.problem = problem
        super().__init__(f'message {msg_id} cannot be rendered for its subscriber: {problem}')


class SubscriptionNotFound(ConduitError, LookupError):
    """No subscription matches; never names the sub_key, which is a secret."""

    http_status = 404

    def __init__(self, what: str = 'subscription') -> None:
        super().__init__(f'{what} not found')


class SubscriptionLimitReached(ConduitError):
    """A security definition holds the most subscriptions of a kind it may; it must remove one first."""

    http_status = 409

    def __init__(self, security: str, kind: str, limit: int, setting: str) -> None:
        self.security = security
        self.limit = limit
        super().__init__(f'security definition {security!r} holds {limit} {kind} subscriptions, the most it may '
                         f'({setting} = {limit}); unsubscribe one, or resume one with its sub_key')


# Configuration


class ConfigError(ConduitError, ValueError):
    """A configuration file or value is invalid."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f'{where}: {reason}')


class ObjectNotFound(ConduitError, LookupError):
    """A configured object (channel, security definition, ...) does not exist."""

    http_status = 404

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f'{kind} not found: {name!r}')


# Scheduler


class InvalidJob(ConduitError, ValueError):
    """A scheduler job definition is invalid (the job and the field are named)."""

    http_status = 400

    def __init__(self, job: str, field: str, reason: str) -> None:
        self.job = job
        self.field = field
        self.reason = reason
        super().__init__(f'job {job!r}: {field!r} {reason}')


class JobExists(ConduitError):
    """A scheduler job of that name already exists."""

    http_status = 409

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f'job {name!r} already exists')


# Spark pipelines


class SparkError(ConduitError):
    """A Spark pipeline job cannot be submitted or managed."""


class PipelineNotFound(SparkError, LookupError):
    """No pipeline module of that name is in the pipelines directory."""

    http_status = 404

    def __init__(self, name: str, reason: str = '') -> None:
        self.name = name
        super().__init__(f'Spark pipeline not found: {name!r}' + (f' ({reason})' if reason else ''))


class SparkJobNotFound(SparkError, LookupError):
    """No Spark job has that id."""

    http_status = 404

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        super().__init__(f'Spark job not found: {job_id!r}')


class InvalidSparkJob(SparkError, ValueError):
    """A Spark job submission is invalid (the pipeline and the field are named)."""

    http_status = 400

    def __init__(self, pipeline: str, field: str, reason: str) -> None:
        self.pipeline = pipeline
        self.field = field
        self.reason = reason
        super().__init__(f'Spark job of pipeline {pipeline!r}: {field!r} {reason}')


class SparkUnavailable(SparkError):
    """spark-submit cannot be found or started."""

    http_status = 503


# Pub/sub over REST


class NoSubscription(SubscriptionNotFound):
    """The caller holds no pull subscription to read from."""

    def __init__(self) -> None:
        ConduitError.__init__(self, 'no subscription')


class PermissionDenied(Forbidden):
    """A REST client lacks the pub or sub permission for a topic (the definition and topic are named)."""

    def __init__(self, security: str, action: str, topic: str) -> None:
        self.security = security
        self.action = action
        self.topic = topic
        super().__init__(f'security definition {security!r} has no {action!r} permission for topic {topic!r}')


class InvalidPermission(ConduitError, ValueError):
    """A pub/sub permission list is malformed (the list and the reason are named)."""

    http_status = 400

    def __init__(self, action: str, reason: str) -> None:
        self.action = action
        self.reason = reason
        super().__init__(f'{action}: {reason}')


# REST push subscribers


class PushFailed(ConduitError):
    """A REST push endpoint did not take a batch; names the method and URL, never credentials."""

    def __init__(self, method: str, url: str, reason: str, status: int | None = None) -> None:
        self.method = method
        self.url = url
        self.reason = reason
        self.status = status
        super().__init__(f'{method} {url}: {reason}')


class PushUnreachable(PushFailed, ConnectionError):
    """A REST push endpoint could not be reached or did not answer in time (a socket-level error)."""


# File transfer: reading files


class FileParseError(ConduitError, ValueError):
    """A file, or one record of it, is not what its channel's format says; the record and line are named.

    record_index is 0-based (None when the fault is not in one record: a CSV header, data after a JSON
    array, a whole-file record); line is 1-based (None when the format has no lines).
    """

    def __init__(self, record_index: int | None, line: int | None, reason: str) -> None:
        self.record_index = record_index
        self.line = line
        self.reason = reason
        if record_index is not None:
            where = f'record {record_index}' + (f' (line {line})' if line is not None else '')
        else:
            where = f'line {line}' if line is not None else ''
        super().__init__(f'{where}: {reason}' if where else reason)


# Admin API


class ObjectExists(ConduitError):
    """An object of that kind and name already exists."""

    http_status = 409

    def __init__(self, kind: str, name: str) -> None:
        self.kind = kind
        self.name = name
        super().__init__(f'{kind} {name!r} already exists')


class ObjectInUse(ConduitError):
    """An object cannot be removed while other objects refer to it (they are named)."""

    http_status = 409

    def __init__(self, kind: str, name: str, users: list[str]) -> None:
        self.kind = kind
        self.name = name
        self.users = users
        super().__init__(f'{kind} {name!r} is used by {", ".join(users)}')


class MatchChanged(ConduitError):
    """More objects match a filter than the count the user confirmed: a bulk action is refused."""

    http_status = 409

    def __init__(self, expected: int) -> None:
        self.expected = expected
        super().__init__(f'more than the {expected} confirmed dead letters match the filter now: '
                         'count them again and confirm the new count')


# Ownership of declarative objects


class ObjectOwnedByFile(ConduitError):
    """An object declared in an object file cannot be changed through the admin API or the CLI."""

    http_status = 409

    def __init__(self, kind: str, name: str, file: str) -> None:
        self.kind = kind
        self.name = name
        self.file = file
        super().__init__(f'{kind} {name!r} is declared in {file}: change it there, or detach it from the file '
                         f'first (detach=true in the admin API, --detach in the CLI); the file then no longer '
                         f'manages it')


class RouteClash(ConduitError):
    """A channel would answer the same path and method as another channel (which is named)."""

    http_status = 409

    def __init__(self, name: str, clash: str) -> None:
        self.name = name
        super().__init__(f'channel {name!r}: {clash}')


# File transfer


class FileTransferError(ConduitError):
    """A file channel's or file subscriber's directory (local or SFTP) cannot be used as asked."""


class SourceMissing(FileTransferError, LookupError):
    """A directory of a file source does not exist (the source and the directory are named)."""

    http_status = 404

    def __init__(self, label: str, path: str = '') -> None:
        self.label = label
        self.path = path
        where = f'{label}: directory {path!r}' if path else f'directory {label}'
        super().__init__(f'{where} does not exist')


class SourceUnavailable(FileTransferError, ConnectionError):
    """A file source cannot be reached or broke off (the source is named, never a credential)."""

    http_status = 503

    def __init__(self, label: str, reason: str) -> None:
        self.label = label
        self.reason = reason
        super().__init__(f'{label}: {reason}')


class LinkRefused(FileTransferError, ValueError):
    """A path below a file source's directory passes through a symbolic link, which is never followed there."""

    def __init__(self, label: str, component: str) -> None:
        self.label = label
        self.component = component
        self.reason = (f'{component!r} is a symbolic link; links below {label} are never followed '
                       f'(one could lead outside it)')
        super().__init__(f'{label}: {self.reason}')


# File subscribers


class FileRenderError(ConduitError, ValueError):
    """A message's data cannot be written in a file format (the item of the file and the reason are named)."""

    def __init__(self, index: int, reason: str) -> None:
        self.index = index
        self.reason = reason
        super().__init__(f'item {index}: {reason}')


class FileWriteFailed(FileTransferError):
    """A file subscriber could not write a file; names the target (never a credential), the file and the reason."""

    def __init__(self, target: str, path: str, reason: str) -> None:
        self.target = target
        self.path = path
        self.reason = reason
        super().__init__(f'{target}: cannot write {path!r}: {reason}' if path else f'{target}: {reason}')


class FileTargetUnreachable(FileWriteFailed, ConnectionError):
    """A file subscriber's SFTP server could not be reached or broke off (a socket-level error, retried so)."""
