"""REST push subscribers: a subscription's messages go to its URL, one per HTTP request by default.

By default (Zato 4.1's shape) each message is one request whose body is the flat message:
``msg_id, topic_name, data, priority, expiration, pub_time_iso, recv_time_iso, expiration_time_iso``
and, when set, ``correl_id, in_reply_to, ext_client_id, publisher`` (and ``mime_type`` for data that
is not JSON). Two subscription options change that: ``push_format: envelope`` sends each message
as ``{data, meta}``, ``meta`` as the pull API returns it (``runtime.pubsub.message.pull_meta``), and
``push_batch: true`` sends each delivery batch in one request, as a JSON list. A request that
carries one message sends it bare unless ``wrap_one_msg_in_list`` is true. The request uses
``push_method`` and ``Content-Type: application/json`` and must be answered in full within
``push_timeout_secs``. A 2xx answer means the endpoint took every message of the request. Any other
status raises ``PushFailed`` naming it and the URL (retried after ``wait_non_sock_err``); a
connection that cannot be made, breaks, or stays silent past the timeout raises
``PushUnreachable``, a socket-level error (retried after ``wait_sock_err``). Redirects are not
followed, so a 3xx is a failure too, and credentials never travel to another host. With
``err_should_block``, a failed request stops the batch: the messages after it are not sent and
keep their place.

Basic Auth towards the endpoint: ``push_username`` with ``push_password`` given as a
``${CONDUIT_SECRET_...}`` reference, read from the worker's environment at each request (through
``runtime.security.secret_refs``, which checks the variable's name again: a reference stored before the rule
existed reaches no other variable). The database holds
only the reference, and error texts name the method and the URL without user info or query
string, never a credential or the endpoint's answer.

Each subscription's deliverer owns one ``requests.Session`` (connections are reused between
batches); gevent's monkey patching, which every worker applies, makes it cooperative. The
session ignores proxy variables and ``~/.netrc``, so a request goes exactly where it is configured,
with exactly the configured credentials.

Outbound policy: a push_url may not target a loopback (127.0.0.0/8, ::1, ``localhost``), link-local
(169.254.0.0/16, the cloud metadata address 169.254.169.254 among them; fe80::/10), unspecified
(0.0.0.0, ::) or multicast address, unless ``[pubsub] push_allow_hosts`` lists the host (a name, an
address or a CIDR; ``*``: any); private ranges (10/8, 172.16/12, 192.168/16, fc00::/7) are allowed.
It is checked when a subscription is made (ConfigError naming push_url and the reason) and again on
every connection, against the address the name resolved to (a name that resolves, or is rebound, to
127.0.0.1 is refused): the socket is closed before a byte is sent, and the delivery fails as any
unreachable endpoint does (``PushUnreachable``, "refused by the outbound policy"). A URL under
``/admin`` on a loopback or unspecified address (this server's own admin API) is refused whatever
push_allow_hosts says. Redirects are never followed, so none can lead to a refused address.

Topic and subscription hook services run per message before the request, as for service
subscribers: a message a hook deletes is acked without being sent; one it skips (or whose hook
fails) is not sent and is retried, and with ``err_should_block`` nothing after it is sent either.

Each message is rendered to its JSON text on its own, within the broker's JSON limits (no NaN or
Infinity, no nesting past the limit), before the request is made. One that cannot be (stored data
that is not JSON within the limits, or what a hook put in its place) fails with
``UnrenderableMessage``, which the delivery loop dead-letters at once (reason ``unrenderable``);
the rest of the batch is sent without it, whatever ``err_should_block`` says.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import gevent
import requests
import urllib3.connection
import urllib3.connectionpool
from requests.adapters import HTTPAdapter

from runtime.errors import ConfigError, PushFailed, PushUnreachable, UnrenderableMessage
from runtime.pubsub.delivery import Outcome
from runtime.pubsub.message import Delivery, pull_meta, push_view
from runtime.pubsub.options import DeliveryOptions, KindOptions
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.subscribers.base import Context, Deliverer, KindHooks, KindTools, RunService
from runtime.pubsub.subscribers.service import prepare, render_batch
from runtime.security import secret_refs
from runtime.util import json_limits
from runtime.util.json_limits import DEFAULT_LIMITS, JsonLimits

_log = logging.getLogger(__name__)

#: The kind's name, as subscriptions store it.
KIND_REST_PUSH = 'rest_push'

#: Headers of every push request (Zato's receivers compare the content type as it is).
_HEADERS = {'Content-Type': 'application/json', 'User-Agent': 'Conduit-pubsub'}

#: URL schemes a push endpoint may use.
_SCHEMES = ('http', 'https')

#: HTTP methods a REST push subscription may use.
PUSH_METHODS = ('POST', 'PUT', 'PATCH')

#: Bodies a REST push subscription may send: Zato 4.1's flat message (the default), or ``{data, meta}``.
PUSH_FORMATS = ('flat', 'envelope')


@dataclass(frozen=True)
class RestPushOptions(KindOptions):
    """A REST push subscription's own delivery options: method, body, batching, timeout and credentials."""

    secret = ('push_password',)

    push_method: str = 'POST'
    wrap_one_msg_in_list: bool = False
    #: 'flat' (Zato 4.1: msg_id, topic_name, data, ... at the top level) or 'envelope' ({data, meta}).
    push_format: str = 'flat'
    #: False: one message per request, as Zato 4.1 pushes; true: each delivery batch in one request (a list).
    push_batch: bool = False
    push_timeout_secs: float = 10.0
    #: Basic Auth towards the endpoint; the password only as a ${CONDUIT_SECRET_...} reference (see
    #: runtime.security.secret_refs), resolved at delivery.
    push_username: str = ''
    push_password: str = ''
    #: The outgoing_rest definition a subscription from the object files pushes to.
    push_rest_endpoint: str = ''
    #: Unused: security definitions keep only password hashes. Accepted so that options stored by
    #: earlier versions still load; Basic Auth towards the endpoint is push_username/push_password.
    push_security: str = ''

    def check(self, where: str) -> None:
        """ConfigError naming the option whose value is refused."""
        if self.push_method.upper() not in PUSH_METHODS:
            raise ConfigError(where, f'push_method must be one of {", ".join(PUSH_METHODS)}, '
                                     f'not {self.push_method!r}')
        if self.push_format not in PUSH_FORMATS:
            raise ConfigError(where, f'push_format must be one of {", ".join(PUSH_FORMATS)}, '
                                     f'not {self.push_format!r}')
        if self.push_timeout_secs <= 0:
            raise ConfigError(where, 'push_timeout_secs must be more than 0')
        if self.push_password:
            # Stored options are plain JSON in the database: only the reference may go there, and only
            # to a variable meant for it (any other would hand the server's environment to the endpoint).
            secret_refs.reference_name(self.push_password, 'push_password', where)
        if self.push_password and not self.push_username:
            raise ConfigError(where, 'push_password needs push_username')

#: The message as the subscriber sees it after hook services, or None when a hook deleted it.
Prepare = Callable[[SubInfo, Delivery], dict[str, Any] | None]


IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class OutboundPolicy:
    """Which addresses a push request may go to: none loopback, link-local, unspecified or multicast,
    unless allowed by name or network (``[pubsub] push_allow_hosts``, comma-separated; ``*``: any)."""

    def __init__(self, allow_hosts: str = '') -> None:
        self.allow_any = False
        self.names: set[str] = set()
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        for item in (i.strip() for i in allow_hosts.split(',')):
            if not item:
                continue
            if item == '*':
                self.allow_any = True
                continue
            try:
                self.networks.append(ipaddress.ip_network(item.strip('[]'), strict=False))
            except ValueError:
                self.names.add(item.lower().rstrip('.'))

    @staticmethod
    def denied_reason(address: IPAddress) -> str | None:
        """Why the policy refuses an address by default, or None for an allowed one."""
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        for test, what in ((address.is_unspecified, 'unspecified'), (address.is_loopback, 'loopback'),
                           (address.is_link_local, 'link-local (cloud metadata among them)'),
                           (address.is_multicast, 'multicast')):
            if test:
                return f'{address} is a {what} address'
        return None

    def _allowed(self, host: str, address: IPAddress | None) -> bool:
        if self.allow_any or host.lower().rstrip('.') in self.names:
            return True
        return address is not None and any(address in n for n in self.networks if n.version == address.version)

    def check_url(self, url: str, where: str) -> None:
        """ConfigError naming push_url when the URL's host is refused by the policy (names resolve later)."""
        parts = urlsplit(url)
        host = (parts.hostname or '').rstrip('.')
        try:
            address: IPAddress | None = ipaddress.ip_address(host)
        except ValueError:
            address = None
        local = host.lower() == 'localhost' or host.lower().endswith('.localhost')
        reason = self.denied_reason(address) if address is not None else (
            f'{host} is a loopback name' if local else None)
        if reason is None:
            return
        path = '/' + unquote(parts.path).lower().lstrip('/')
        if (path == '/admin' or path.startswith('/admin/')) and (local or (address is not None and (
                address.is_loopback or address.is_unspecified))):
            raise ConfigError(where, f'push_url must not target this server\'s admin API ({host}, /admin)')
        if not self._allowed(host, address):
            raise ConfigError(where, f'push_url is refused by the outbound policy: {reason}; '
                                     f'list the host in [pubsub] push_allow_hosts to allow it')

    def check_peer(self, host: str, peer: str, path: str) -> str | None:
        """Why a connection made to peer (the address host resolved to) is refused, or None."""
        address = ipaddress.ip_address(peer.split('%')[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        reason = self.denied_reason(address)
        if reason is None:
            return None
        path = '/' + unquote(path).lower().lstrip('/')
        if (path == '/admin' or path.startswith('/admin/')) and (address.is_loopback or address.is_unspecified):
            return f'{host} resolved to {address}: this server\'s admin API'
        if self._allowed(host, address):
            return None
        return f'{host} resolved to {reason} (not in [pubsub] push_allow_hosts)'


#: The policy of this process: set from [pubsub] push_allow_hosts when the broker starts.
_policy = OutboundPolicy()


def set_outbound_policy(policy: OutboundPolicy) -> None:
    """Make policy the one every push_url check and push connection of this process applies."""
    global _policy
    _policy = policy


def outbound_policy() -> OutboundPolicy:
    """The outbound policy of this process."""
    return _policy


def check_push_url(url: str, where: str) -> None:
    """ConfigError unless url is an absolute http(s) URL without credentials, allowed by the outbound policy."""
    if not isinstance(url, str) or not url:
        raise ConfigError(where, 'a REST push subscription needs push_url')
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise ConfigError(where, 'push_url is not a valid URL') from None
    if parts.scheme.lower() not in _SCHEMES or not parts.hostname:
        raise ConfigError(where, f'push_url must be an http:// or https:// URL with a host, not {shown_url(url)!r}')
    if '@' in parts.netloc:
        # It would be stored in the database and shown in logs: Basic Auth goes in push_username/push_password.
        raise ConfigError(where, 'push_url must not contain credentials; use push_username and push_password')
    _policy.check_url(url, where)


def _checked_socket(conn: urllib3.connection.HTTPConnection, sock: socket.socket) -> socket.socket:
    """sock, unless the address it connected to is refused by the policy (then closed, before any byte)."""
    try:
        peer = sock.getpeername()[0]
        reason = _policy.check_peer(conn.host, peer, '')
    except (OSError, ValueError):
        reason = None
    if reason is not None:
        sock.close()
        # A builtin OSError with its text: requests turns it into a ConnectionError, PushUnreachable shows it.
        raise OSError(13, f'refused by the outbound policy: {reason}')
    return sock


class _CheckedHTTPConnection(urllib3.connection.HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _checked_socket(self, super()._new_conn())


class _CheckedHTTPSConnection(urllib3.connection.HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        return _checked_socket(self, super()._new_conn())


class _CheckedHTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _CheckedHTTPConnection


class _CheckedHTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _CheckedHTTPSConnection


class _CheckedAdapter(HTTPAdapter):
    """requests' adapter whose connections are checked against the outbound policy once connected."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {'http': _CheckedHTTPPool, 'https': _CheckedHTTPSPool}


def shown_url(url: str) -> str:
    """A URL as logs and errors show it: without user info, query string or fragment."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return '(invalid URL)'
    netloc = parts.netloc.rpartition('@')[2]
    return urlunsplit((parts.scheme, netloc, parts.path, '...' if parts.query else '', ''))


def _why(exc: BaseException) -> str:
    """The root cause of a failed connection in a few words (requests' own text is long and quotes the URL)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and type(current).__module__ == 'builtins' and current.strerror:
            return current.strerror
        current = current.__cause__ or current.__context__
    return type(exc).__name__


def _password(reference: str, method: str, url: str) -> str:
    try:
        return secret_refs.resolve(reference, 'push_password', 'REST push')
    except ConfigError as e:  # its reason names the variable at most, never a value
        raise PushFailed(method, url, e.reason) from None


class PushDeliverer:
    """Delivers one REST push subscription's batches; a DeliveryLoop's ``deliver_batch``."""

    def __init__(self, prepare: Prepare, limits: JsonLimits = DEFAULT_LIMITS) -> None:
        self._prepare = prepare
        self._limits = limits
        self._session: requests.Session | None = None
        #: Told of each message pushed before its batch ends (the delivery loop acks it at once).
        self._settled: Callable[[Outcome], None] | None = None

    def report_to(self, settled: Callable[[Outcome], None]) -> None:
        """Tell settled of each message as soon as its request was answered 2xx."""
        self._settled = settled

    def deliver_batch(self, sub: SubInfo, batch: list[Delivery]) -> list[Outcome]:
        """Send a batch, one request per message (or all in one with push_batch); one outcome per message tried."""
        block = sub.options.err_should_block
        now = time.time()

        def render(d: Delivery) -> bytes | None:
            meta = self._prepare(sub, d)
            return None if meta is None else self._render(sub, d, meta, now)
        outcomes, sending = render_batch(batch, render, block)
        size = max(1, len(sending)) if sub.options.of(RestPushOptions).push_batch else 1
        for start in range(0, len(sending), size):
            chunk = sending[start:start + size]
            try:
                self.push(sub, [text for _, text in chunk])
            except gevent.GreenletExit:
                raise
            except Exception as e:
                for outcome, _ in chunk:
                    outcome.ok, outcome.error = False, e
                if block:
                    # Strict order: what comes after the failed request is not tried now.
                    last = next(i for i, o in enumerate(outcomes) if o is chunk[-1][0])
                    return outcomes[:last + 1]
                continue
            if self._settled is not None:
                for outcome, _ in chunk:
                    self._settled(outcome)
        return outcomes

    def _render(self, sub: SubInfo, d: Delivery, meta: dict[str, Any], now: float) -> bytes:
        """The UTF-8 JSON text of one message as pushed; UnrenderableMessage if it cannot be rendered."""
        # Binary data travels as its stored base64 text; anything else as the subscriber sees it
        # (a hook may have replaced it).
        data = d.data if isinstance(meta['data'], bytes) else meta['data']
        if sub.options.of(RestPushOptions).push_format == 'envelope':
            body = {'data': data, 'meta': pull_meta(d, sub.sub_key, now)}
        else:
            body = push_view(d, data)
        try:
            return json_limits.dumpb(body, self._limits)
        except json_limits.InvalidJson as e:
            raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
        except UnicodeEncodeError:
            raise UnrenderableMessage(d.msg_id, 'it has text that is not valid Unicode (a lone surrogate)') from None

    def push(self, sub: SubInfo, items: list[bytes]) -> None:
        """One request with these messages (each the JSON text of one); PushFailed (or PushUnreachable) unless 2xx."""
        opts = sub.options.of(RestPushOptions)
        method, url, timeout = opts.push_method.upper(), sub.push_url, opts.push_timeout_secs
        shown = shown_url(url)
        data = items[0] if len(items) == 1 and not opts.wrap_one_msg_in_list else b'[' + b','.join(items) + b']'
        auth = (opts.push_username, _password(opts.push_password, method, shown)) if opts.push_password else None
        if auth is None and opts.push_username:
            auth = (opts.push_username, '')
        session = self._get_session()
        # requests' timeout bounds each connect and each read, not the whole answer: the gevent
        # timer does, so that an endpoint dribbling bytes cannot hold the queue forever.
        timer = gevent.Timeout(timeout)
        timer.start()
        try:
            response = session.request(method, url, data=data, headers=_HEADERS, auth=auth, timeout=timeout,
                                       allow_redirects=False)
        except gevent.Timeout as t:
            if t is not timer:
                raise
            raise PushUnreachable(method, shown, f'no complete answer within {timeout:g} s') from None
        except requests.Timeout as e:
            raise PushUnreachable(method, shown, f'no answer within {timeout:g} s') from e
        except requests.ConnectionError as e:
            raise PushUnreachable(method, shown, f'cannot connect: {_why(e)}') from e
        except requests.RequestException as e:
            raise PushFailed(method, shown, f'request failed: {type(e).__name__}') from e
        finally:
            timer.close()
        if not 200 <= response.status_code < 300:
            raise PushFailed(method, shown, f'answered {response.status_code} {response.reason or ""}'.rstrip(),
                             response.status_code)
        _log.debug('%s: %d message(s) pushed to %s', sub.label, len(items), shown)

    def _get_session(self) -> requests.Session:
        if self._session is None:
            session = requests.Session()
            session.trust_env = False
            for prefix in ('http://', 'https://'):
                session.mount(prefix, _CheckedAdapter())
            self._session = session
        return self._session

    def close(self) -> None:
        """Close the session's connections (the subscription's loop ended); never raises."""
        session, self._session = self._session, None
        if session is not None:
            try:
                session.close()
            except Exception as e:
                _log.debug('closing a push session failed: %s', e)


class RestPushSubscriber(KindHooks):
    """REST push subscriptions: a PushDeliverer per subscription, its session closed with the loop."""

    kind = KIND_REST_PUSH
    options = RestPushOptions
    delivered = True
    queue_limited = True
    spread = True

    @classmethod
    def build(cls, tools: KindTools) -> RestPushSubscriber:
        """The plug-in of a worker, with its outbound policy."""
        return cls(tools.run_service, OutboundPolicy(tools.push_allow_hosts))

    def __init__(self, run_service: RunService, policy: OutboundPolicy) -> None:
        #: Runs the topic's and subscription's hook services.
        self._run = run_service
        # One policy per process: the connection classes requests builds and the push_url checks of the
        # object files and the admin API read it (set_outbound_policy).
        set_outbound_policy(policy)

    @staticmethod
    def check(where: str, service: str, push_url: str, options: DeliveryOptions) -> None:
        """A REST push subscription has an http(s) URL without credentials."""
        check_push_url(push_url, where)

    @staticmethod
    def refused_field(service: str, security: str, push_url: str) -> tuple[str, str] | None:
        """An http(s) URL with a host (the rest of check_push_url's checks follow in ``check``)."""
        url = urlsplit(push_url)
        if url.scheme not in ('http', 'https') or not url.hostname:
            return 'push_url', 'must be an http:// or https:// URL for a REST push subscription'
        return None

    def wants_delivery(self, sub: SubInfo) -> bool:
        """Any worker may push a subscription's messages: each one competes for its lease."""
        return True

    def deliverer(self, ctx: Context, sub: SubInfo) -> Deliverer:
        """One HTTP session per subscription, closed with its loop."""
        pusher = PushDeliverer(lambda s, d: prepare(ctx, s, d, self._run), ctx.json_limits)
        return Deliverer(deliver_batch=pusher.deliver_batch, close=pusher.close, progress=pusher.report_to)
