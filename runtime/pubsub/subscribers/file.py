"""File subscribers: a subscription's messages written as files into a local or SFTP directory.

The subscription's ``push_url`` is its target: ``file:///abs/dir`` (a directory of the server) or
``sftp://user@host:port/abs/dir`` (a directory of an SFTP server; port 22 by default). The URL
never holds a password: SFTP credentials are the delivery options ``file_password`` or
``file_private_key`` (the key's text), each only a ``${CONDUIT_SECRET_...}`` reference resolved
when connecting, and the server is known by ``file_host_key`` (its public key line) or
``file_known_hosts`` (a known_hosts file); nothing is trusted on first sight.

What is written (``runtime.files.writers``):

- ``file_per: message`` (the default): one file per message; ``batch``: one file per delivery
  batch (at most ``delivery_batch_size`` messages), or per run of messages of one topic in it,
  so that every file has one topic and the files keep the messages' order;
- ``file_format``: ``json`` (a message's data as JSON; a batch as a JSON array, even of one;
  text or bytes published with another mime type are written as they are in a file of one
  message, and binary data elsewhere is its stored base64 text), ``jsonl`` (one line per message)
  or ``csv`` (a header row, then one row per message, whose data must be a flat object; columns
  ``file_csv_columns``, else the messages' keys);
- ``file_name``: a template relative to the target directory, with the fields ``topic``,
  ``msg_id`` (the file's first message), ``date`` (YYYY-MM-DD), ``time`` (HHMMSS), ``year``,
  ``month`` and ``day`` of that message's publication in UTC, ``ext`` (the format) and ``seq``
  (the file's number among those of one delivery batch, from 1). Values are made safe for a file
  name (``runtime.files.naming``); a template may hold ``/`` to write into subdirectories, made
  when missing. The default, ``{topic}-{date}-{msg_id}.{ext}``, names each file after its (first)
  message, so a message delivered again overwrites its own file rather than making a second one;
  a template without ``{msg_id}`` makes later files replace earlier ones of the same name.

Each file is written under a temporary name in the same directory and renamed onto its name when
complete (``Source.write_atomic``): a reader never sees half a file. The source is opened at the
target directory, which is made (like ``mkdir -p``, its parents too) before the first file and
again after a failed write. The target directory is the operator's and is used as configured (a
link there is followed); below it no symbolic link is ever followed, neither to a subdirectory of
the template nor at the file's own name: whoever can write into the target (the partner who
collects the files) could otherwise plant ``outbox/payroll -> /etc`` and have the server write
there. A path through a link is refused (``LinkRefused``), logged once as a WARNING naming the
subscription, and fails the message like any write that cannot be done (retried, then
dead-lettered). A link at the final name itself is replaced by the file, as a rename does.

Failures: a message that cannot be rendered in the format (a CSV row that is not a flat object,
data that is not JSON within the limits) is dead-lettered at once (``UnrenderableMessage``); the
rest of the batch is written without it. A directory that cannot be written (missing rights, a
file where the directory should be) raises ``FileWriteFailed``, retried after
``wait_non_sock_err``; an SFTP server that cannot be reached or breaks off raises
``FileTargetUnreachable``, a socket-level error (``wait_sock_err``). After ``max_attempts`` the
message is dead-lettered with the error as its last error. With ``err_should_block`` nothing after
a failed file is written. Errors and logs name the target without credentials; hooks run as for
REST push (``runtime.pubsub.subscribers.service.prepare``).

Each subscription's deliverer keeps one open source (one SFTP connection) between batches, and
opens a new one when the target or its credentials change; it is closed with the delivery loop.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

import gevent

from runtime.errors import (
    ConduitError,
    ConfigError,
    FileRenderError,
    FileTargetUnreachable,
    FileWriteFailed,
    LinkRefused,
    SourceMissing,
    UnrenderableMessage,
)
from runtime.files import naming, writers
from runtime.files.sftp_params import SftpParams, check_params
from runtime.files.sources import open_source
from runtime.pubsub.delivery import Outcome
from runtime.pubsub.message import Delivery
from runtime.pubsub.options import DeliveryOptions, KindOptions
from runtime.pubsub.registry import SubInfo
from runtime.pubsub.retry import is_socket_error
from runtime.pubsub.subscribers.base import Context, Deliverer, KindHooks, KindTools, Read, RunService
from runtime.pubsub.subscribers.service import prepare, render_batch
from runtime.security import secret_refs
from runtime.util.json_limits import DEFAULT_LIMITS, JsonLimits
from runtime.util.urls import shown_target

_log = logging.getLogger(__name__)

#: The kind's name, as subscriptions store it.
KIND_FILE = 'file'

#: What one file of a file subscription holds: one message, or one delivery batch (of one topic).
FILE_PER = ('message', 'batch')

#: Fields a file subscription's name template (file_name) may use.
FILE_NAME_FIELDS = naming.OUTBOUND_FIELDS


@dataclass(frozen=True)
class FileOptions(KindOptions):
    """A file subscription's own delivery options: what its files hold, their names, and the SFTP credentials."""

    own_kind_only = True
    family = 'file_*'
    secret = ('file_password', 'file_private_key')

    #: 'json', 'jsonl' or 'csv' (runtime.files.writers).
    file_format: str = 'json'
    #: 'message': one file per message; 'batch': one file per delivery batch (per topic in it).
    file_per: str = 'message'
    #: The name template, relative to the target directory (fields: FILE_NAME_FIELDS).
    file_name: str = '{topic}-{date}-{msg_id}.{ext}'
    #: CSV columns, comma-separated; '' takes the messages' keys.
    file_csv_columns: str = ''
    #: SFTP credentials, only as ${CONDUIT_SECRET_...} references (runtime.security.secret_refs), resolved at connect.
    file_password: str = ''
    file_private_key: str = ''
    #: The SFTP server's host key ('ssh-ed25519 AAAA...'), or a known_hosts file: one of them is required.
    file_host_key: str = ''
    file_known_hosts: str = ''

    def check(self, where: str) -> None:
        """ConfigError unless the file_* options are well-formed (the target itself is checked with the kind)."""
        if self.file_format not in writers.FORMATS:
            raise ConfigError(where, f'file_format must be one of {", ".join(writers.FORMATS)}, '
                                     f'not {self.file_format!r}')
        if self.file_per not in FILE_PER:
            raise ConfigError(where, f'file_per must be one of {", ".join(FILE_PER)}, not {self.file_per!r}')
        name = self.file_name
        if not name.strip() or name.startswith('/') or '\x00' in name or len(name) > 1000:
            raise ConfigError(where, 'file_name must be a name template relative to the target directory, '
                                     'e.g. {topic}-{date}-{msg_id}.{ext}')
        naming.check_template(name, FILE_NAME_FIELDS, where)
        writers.check_columns(self.file_csv_columns, where)
        for key in ('file_password', 'file_private_key'):
            if getattr(self, key):
                # Only the reference is stored, and only to a variable meant for it (runtime.security.secret_refs).
                secret_refs.reference_name(getattr(self, key), key, where)
        host_key = self.file_host_key.strip()
        if host_key and (len(host_key.split()) < 2 or any(ord(c) < 32 for c in host_key)):
            raise ConfigError(where, "file_host_key must be the server's public key on one line, "
                                     "e.g. 'ssh-ed25519 AAAA...'")
        known = self.file_known_hosts
        if known and (not known.startswith('/') or any(ord(c) < 32 for c in known)):
            raise ConfigError(where, 'file_known_hosts must be the absolute path of a known_hosts file')


#: Target URL schemes.
SCHEME_FILE = 'file'
SCHEME_SFTP = 'sftp'
SFTP_PORT = 22

#: The message as the subscriber sees it after hook services, or None when a hook deleted it.
Prepare = Callable[[SubInfo, Delivery], 'dict[str, Any] | None']


class Target(Protocol):
    """What a file subscriber writes through (``runtime.files.sources.Source``: local or SFTP)."""

    label: str

    def make_root(self) -> None:
        """mkdir -p of the target directory itself."""

    def makedirs(self, path: str) -> None:
        """mkdir -p, relative to the target directory, never through a link."""

    def write_atomic(self, path: str, chunks: Iterable[bytes]) -> None:
        """Write a file under a temporary name, then rename it onto path, never through a link."""

    def close(self) -> None:
        """Close the connection, if any."""


#: Opens the target of a directory: open_source(directory, sftp_params_or_None).
OpenTarget = Callable[[str, 'SftpParams | None'], Target]


@dataclass(frozen=True)
class FileTarget:
    """Where a file subscription writes: a local directory, or a directory on an SFTP server."""

    #: The directory: absolute, on this server or on the SFTP server.
    directory: str
    #: How the SFTP server is reached (None: a local directory).
    sftp: SftpParams | None
    #: How logs and errors name it, never with a credential: 'file:///out' or 'sftp://user@host:22/out'.
    label: str


def _bad_path(path: str) -> bool:
    return (not path.startswith('/') or any(ord(c) < 32 or c == '\x7f' for c in path)
            or '..' in path.split('/'))


def parse_target(url: str, options: FileOptions, where: str) -> FileTarget:
    """The target of a file subscription's push_url with its options; ConfigError naming what is wrong."""
    if not isinstance(url, str) or not url:
        raise ConfigError(where, 'a file subscription needs its target in push_url: file:///abs/dir or '
                                 'sftp://user@host:port/abs/dir')
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigError(where, 'the file target is not a valid URL') from None
    scheme = parts.scheme.lower()
    if parts.query or parts.fragment or url.endswith(('?', '#')):
        raise ConfigError(where, 'the file target takes no query string or fragment')
    directory = unquote(parts.path)
    if scheme == SCHEME_FILE:
        if parts.netloc:
            raise ConfigError(where, f'a file:// target is a directory of this server: file:///abs/dir, not '
                                     f'{shown_target(url)!r}')
        if _bad_path(directory):
            raise ConfigError(where, 'a file:// target must be an absolute directory path without .. or '
                                     'control characters')
        given = [k for k in ('file_password', 'file_private_key', 'file_host_key', 'file_known_hosts')
                 if getattr(options, k)]
        if given:
            raise ConfigError(where, f'{", ".join(given)}: only an sftp:// target takes them')
        return FileTarget(directory, None, f'file://{directory}')
    if scheme != SCHEME_SFTP:
        raise ConfigError(where, f'a file target is file:///abs/dir or sftp://user@host:port/abs/dir, not '
                                 f'{shown_target(url)!r}')
    if parts.password is not None or ':' in parts.netloc.rpartition('@')[0]:
        # It would be stored in the database and shown: the password goes in file_password, as a reference.
        raise ConfigError(where, 'an sftp:// target must not contain a password; give file_password (or '
                                 'file_private_key) as a ${CONDUIT_SECRET_...} reference')
    username = unquote(parts.username or '')
    host = parts.hostname or ''
    if not username or not host:
        raise ConfigError(where, 'an sftp:// target names its user and host: sftp://user@host:port/abs/dir')
    if any(ord(c) < 33 or c == '\x7f' for c in username + host):
        raise ConfigError(where, 'the sftp:// user and host must not contain spaces or control characters')
    if not directory:
        directory = '/'
    if _bad_path(directory):
        raise ConfigError(where, 'an sftp:// target must name an absolute directory without .. or control '
                                 'characters')
    if not (options.file_password or options.file_private_key):
        raise ConfigError(where, 'an sftp:// target needs file_password or file_private_key (a '
                                 '${CONDUIT_SECRET_...} reference)')
    if not (options.file_host_key or options.file_known_hosts):
        raise ConfigError(where, "an sftp:// target needs file_host_key (the server's public key) or "
                                 'file_known_hosts: the server is never trusted on first sight')
    port = port or SFTP_PORT
    params = SftpParams(host=host, port=port, username=username, password_ref=options.file_password,
                        private_key_ref=options.file_private_key, host_key=options.file_host_key.strip(),
                        known_hosts=options.file_known_hosts)
    try:
        check_params(params, where)  # the host key is parsed: a malformed one is refused now, not at delivery
    except ConfigError:
        raise
    except Exception as e:  # paramiko's parsers raise more than they document for crafted keys (OverflowError)
        raise ConfigError(where, f'file_host_key is not a valid public key ({type(e).__name__})') from None
    shown_host = f'[{host}]' if ':' in host else host
    return FileTarget(directory, params, f'sftp://{username}@{shown_host}:{port}{directory}')


# Writing


@dataclass
class _File:
    """One file to write: its messages' outcomes and rendered items."""

    first: Delivery
    outcomes: list[Outcome]
    items: list[writers.Rendered]
    as_is: bytes | None = None


def _render(fmt: str, per: str, d: Delivery, data: Any, limits: JsonLimits) -> tuple[writers.Rendered, bytes | None]:
    """A message's data rendered for its file, and the bytes to write as they are (json, one message)."""
    json_data = d.mime_type == 'application/json'
    try:
        if fmt == 'json' and per == 'message' and not json_data and isinstance(data, (str, bytes)):
            return writers.Rendered(), writers.as_is(data)
        if isinstance(data, bytes) and fmt != 'csv':
            data = d.data  # its stored base64 text, as REST push sends it
        return writers.render_item(fmt, data, 0, limits), None
    except FileRenderError as e:
        raise UnrenderableMessage(d.msg_id, e.reason) from None


def _files(per: str, ready: list[tuple[Outcome, writers.Rendered, bytes | None]]) -> list[_File]:
    """The files of a batch: one per message, or one per run of messages of one topic."""
    files: list[_File] = []
    for outcome, item, raw in ready:
        d = outcome.delivery
        last = files[-1] if files else None
        if per == 'batch' and last is not None and last.first.topic_name == d.topic_name:
            last.outcomes.append(outcome)
            last.items.append(item)
        else:
            files.append(_File(d, [outcome], [item], raw))
    return files


def _name_values(d: Delivery, fmt: str, seq: int) -> dict[str, str]:
    # The publication's time, not the writing's: a message delivered again gets the same name.
    return naming.outbound_values(d.topic_name, d.msg_id, writers.extension(fmt), seq, d.pub_time)


def _safe_path(path: str) -> str | None:
    """A rendered name as a clean path relative to the target directory, or None if it would leave it."""
    if not path or path.startswith('/') or '\x00' in path:
        return None
    parts = [p for p in path.split('/') if p not in ('', '.')]
    if not parts or '..' in parts:
        return None
    return '/'.join(parts)


class FileDeliverer:
    """Writes one file subscription's batches; a DeliveryLoop's ``deliver_batch``."""

    def __init__(self, prepare: Prepare, limits: JsonLimits = DEFAULT_LIMITS,
                 open_target: OpenTarget = open_source) -> None:
        self._prepare = prepare
        self._limits = limits
        self._open = open_target
        self._target: Target | None = None
        self._target_key: tuple[str, ...] = ()
        #: Directories (relative to the target, '' for itself) made since it was opened or last failed.
        self._made: set[str] = set()
        #: Reasons of links refused that were logged already.
        self._warned: set[str] = set()
        #: The target and CSV columns of the options last seen (parsing a host key is not free).
        self._parsed: tuple[tuple[str, FileOptions], FileTarget, tuple[str, ...]] | None = None

    def deliver_batch(self, sub: SubInfo, batch: list[Delivery]) -> list[Outcome]:
        """Write a batch, one file per message (or per batch); one outcome per message tried."""
        opts = sub.options.of(FileOptions)
        block = sub.options.err_should_block

        def render(d: Delivery) -> tuple[writers.Rendered, bytes | None] | None:
            meta = self._prepare(sub, d)
            return None if meta is None else _render(opts.file_format, opts.file_per, d, meta['data'], self._limits)
        outcomes, rendered = render_batch(batch, render, block)
        ready = [(outcome, *parts) for outcome, parts in rendered]
        if not ready:
            return outcomes
        target, columns = self._target_of(sub)
        for seq, file in enumerate(_files(opts.file_per, ready), start=1):
            try:
                self._write(sub, target, file, seq, columns)
            except gevent.GreenletExit:
                raise
            except Exception as e:
                for outcome in file.outcomes:
                    outcome.ok, outcome.error = False, e
                if block:
                    # Strict order: what comes after the failed file is not tried now.
                    last = next(i for i, o in enumerate(outcomes) if o is file.outcomes[-1])
                    return outcomes[:last + 1]
        return outcomes

    def _target_of(self, sub: SubInfo) -> tuple[FileTarget, tuple[str, ...]]:
        opts = sub.options.of(FileOptions)
        key = (sub.push_url, opts)
        if self._parsed is None or self._parsed[0] != key:
            target = parse_target(sub.push_url, opts, sub.label)
            self._parsed = (key, target, writers.check_columns(opts.file_csv_columns, sub.label))
        return self._parsed[1], self._parsed[2]

    def _write(self, sub: SubInfo, target: FileTarget, file: _File, seq: int, columns: tuple[str, ...]) -> None:
        opts = sub.options.of(FileOptions)
        rendered = naming.render(opts.file_name, _name_values(file.first, opts.file_format, seq), sub.label)
        path = _safe_path(rendered)
        if path is None:
            raise FileWriteFailed(target.label, rendered, 'the file name template made a path outside the '
                                                          'target directory')
        chunks: Iterable[bytes] = ([file.as_is] if file.as_is is not None
                                   else writers.file_body(opts.file_format, file.items, columns,
                                                          array=opts.file_per == 'batch'))
        try:
            source = self._source(target, opts)
            if not self._made:
                source.make_root()  # the operator's directory, as configured
                self._made.add('')
            directory = posixpath.dirname(path)
            if directory not in self._made:
                source.makedirs(directory)  # below it, never through a link
                self._made.add(directory)
            source.write_atomic(path, chunks)
        except gevent.GreenletExit:
            raise
        except Exception as e:
            self._made.clear()  # the directory may have gone: make it again before the next file
            error = _write_error(target, path, e)
            if isinstance(e, LinkRefused):
                self._refused(sub, error)
            raise error from e
        _log.debug('%s: %d message(s) written to %s/%s', sub.label, len(file.outcomes), target.label, path)

    def _refused(self, sub: SubInfo, error: FileWriteFailed) -> None:
        """One WARNING per link refused (a planted link is worth an operator's look, not a line per retry)."""
        if error.reason not in self._warned:
            self._warned.add(error.reason)
            _log.warning('%s: %s; the message is not written elsewhere: it is retried, then dead-lettered', sub.label,
                         error)

    def _source(self, target: FileTarget, opts: FileOptions) -> Target:
        """The open target (one connection kept between batches), opened again when it changed."""
        key = (target.label, opts.file_password, opts.file_private_key, opts.file_host_key, opts.file_known_hosts)
        if self._target is None or key != self._target_key:
            self.close()
            # Rooted at the target directory: every path below it is walked without following links.
            self._target = self._open(target.directory, target.sftp)
            self._target_key = key
        return self._target

    def close(self) -> None:
        """Close the target's connection (the subscription's loop ended); never raises."""
        source, self._target = self._target, None
        self._target_key = ()
        self._made.clear()
        if source is not None:
            try:
                source.close()
            except Exception as e:
                _log.debug('closing a file target failed: %s', e)


def _write_error(target: FileTarget, path: str, e: BaseException) -> FileWriteFailed:
    """A failed write as the delivery loop records it: the target, the file and a reason free of secrets."""
    if isinstance(e, FileWriteFailed):
        return e
    reason = _reason(e)
    if is_socket_error(e):
        return FileTargetUnreachable(target.label, path, reason)
    return FileWriteFailed(target.label, path, reason)


def _reason(e: BaseException) -> str:
    """What went wrong in a few words: an OS error's text, a ConfigError's reason, a Conduit error's own text."""
    if isinstance(e, ConfigError):
        return e.reason  # a credential reference that is not set: it names the variable, never a value
    if isinstance(e, SourceMissing):
        return 'the directory does not exist (it was removed while the file was written)'
    if isinstance(e, ValueError) and not isinstance(e, ConduitError):
        return 'the path is not allowed'  # a symbolic link out of the tree, say: the source refused it
    reason = getattr(e, 'reason', None)
    if isinstance(reason, str) and reason:
        return reason
    if isinstance(e, OSError) and e.strerror:
        return e.strerror
    return type(e).__name__


class FileSubscriber(KindHooks):
    """File subscriptions: a FileDeliverer per subscription, its connection closed with the loop."""

    kind = KIND_FILE
    options = FileOptions
    delivered = True
    queue_limited = True
    spread = True

    @classmethod
    def build(cls, tools: KindTools) -> FileSubscriber:
        """The plug-in of a worker."""
        return cls(tools.run_service)

    def __init__(self, run_service: RunService, open_target: OpenTarget = open_source) -> None:
        #: Runs the topic's and subscription's hook services.
        self._run = run_service
        self._open = open_target

    @staticmethod
    def check(where: str, service: str, push_url: str, options: DeliveryOptions) -> None:
        """A file subscription has a target (push_url) its options can reach, and no service."""
        if service:
            raise ConfigError(where, 'a file subscription takes no service')
        parse_target(push_url, options.of(FileOptions), where)

    @staticmethod
    def admin_fields(read: Read, subs: list[SubInfo]) -> dict[int, dict[str, Any]]:
        """Each subscription's ``target``: where its files are written, without credentials (nothing is read)."""
        return {s.id: {'target': shown_target(s.push_url)} for s in subs}

    def wants_delivery(self, sub: SubInfo) -> bool:
        """Any worker may write a subscription's files: each one competes for its lease."""
        return True

    def deliverer(self, ctx: Context, sub: SubInfo) -> Deliverer:
        """One open target per subscription, closed with its loop."""
        writer = FileDeliverer(lambda s, d: prepare(ctx, s, d, self._run), ctx.json_limits, self._open)
        return Deliverer(deliver_batch=writer.deliver_batch, close=writer.close)
