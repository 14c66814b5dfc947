"""One message model: what a publication is, what a queued delivery is, and how subscribers see them.

A message's data is stored as text with its mime type (``encode_data``): JSON as compact JSON text,
text as it is, bytes as base64 with ``;base64`` appended to the mime type. ``decode_data`` (and
``Delivery.payload``) give the publisher's value back: JSON decoded, base64 decoded to bytes.

Each kind of subscriber sees a message through one view function, and every view computes its
times and expiration the same way (``runtime.util.timefmt.iso``, ``expiration_secs``):

- ``service_view``: what a subscribed service (and a service's own pull) gets as its raw request:
  the data decoded, with the message's metadata;
- ``pull_meta``, ``pull_view`` and ``render_pull``: a message as the REST pull API returns it,
  ``{data, meta}`` with Zato 4.1's keys (``render_pull`` writes the final JSON text);
- ``push_view``: a message as a REST push request carries it by default (Zato 4.1's flat shape).
"""

from __future__ import annotations

import base64
import json
import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from runtime.errors import InvalidMessage, MessageTooLarge, UnrenderableMessage
from runtime.util import json_limits
from runtime.util.json_limits import DEFAULT_LIMITS, JsonLimits
from runtime.util.timefmt import iso, iso_or_none

#: Every msg_id starts with it, as Zato 4.1's do (its clients and load scripts check the prefix).
MSG_ID_PREFIX = 'zpsm'

#: Appended to the mime type of binary data, stored as base64 text.
BASE64_SUFFIX = ';base64'


class MsgId(str):
    """A message id, as returned to publishers; ``overflowed`` tells that it went to the overflow log."""

    overflowed: bool = False


@dataclass
class Publication:
    """One message about to be stored, with the subscriptions it goes to."""

    msg_id: str
    topic_id: int
    topic_name: str
    data: str
    mime_type: str
    priority: int
    pub_time: float
    expiration_time: float
    publisher: str
    correl_id: str | None
    in_reply_to: str | None
    ext_client_id: str | None
    has_gd: bool
    size: int
    sub_ids: list[int]
    #: No subscriber: the topic keeps it until one appears.
    in_topic: bool = False
    #: The publisher's own pub_time, verbatim (pub_time is the server's).
    ext_pub_time: str | None = None


@dataclass
class Delivery:
    """A queue entry with its message, as the delivery loop and pullers see it."""

    entry_id: int
    sub_id: int
    delivery_count: int
    next_attempt_at: float
    last_error: str
    recv_time: float
    message_id: int
    msg_id: str
    topic_name: str
    data: str
    mime_type: str
    priority: int
    pub_time: float
    expiration_time: float
    publisher: str
    correl_id: str | None
    in_reply_to: str | None
    ext_client_id: str | None
    has_gd: bool
    size: int
    topic_id: int = 0
    #: The publisher's own pub_time, verbatim, if it gave one.
    ext_pub_time: str | None = None
    #: Traceback of the last failed attempt, set by the delivery loop (not read with the head).
    last_traceback: str = ''

    def payload(self) -> Any:
        """The data as the publisher gave it: JSON decoded, base64 decoded to bytes, text as it is."""
        if self.mime_type == 'application/json':
            return json.loads(self.data)
        if self.mime_type.endswith(BASE64_SUFFIX):
            return base64.b64decode(self.data)
        return self.data


# Data


def encode_data(data: Any, mime_type: str | None, limits: JsonLimits = DEFAULT_LIMITS) -> tuple[str, str]:
    """Data as stored (text) and its mime type; InvalidMessage for what cannot be stored.

    JSON data must be within limits (nesting, integer digits) and finite: NaN and Infinity would
    be stored as text no JSON parser reads, and deep values could not be rendered for subscribers.
    """
    if data is None:
        raise InvalidMessage('data', 'is required')
    if isinstance(data, bytes):
        return base64.b64encode(data).decode('ascii'), (mime_type or 'application/octet-stream') + BASE64_SUFFIX
    if isinstance(data, str) and mime_type != 'application/json':
        return data, mime_type or 'text/plain'
    try:
        return json_limits.dumps(data, limits), 'application/json'
    except json_limits.InvalidJson as e:
        raise InvalidMessage('data', str(e)) from None
    except (TypeError, ValueError, RecursionError) as e:
        raise InvalidMessage('data', f'cannot be serialised as JSON: {e}') from None


def decode_data(data: str, mime_type: str, limits: JsonLimits = DEFAULT_LIMITS) -> Any:
    """Data as the publisher gave it; a ValueError when the stored text is not what its mime type says."""
    if mime_type == 'application/json':
        return json_limits.loads(data, limits)
    if mime_type.endswith(BASE64_SUFFIX):
        return base64.b64decode(data)
    return data


def _is_unicode(text: str) -> bool:
    """Whether text can be stored: no lone surrogates (which JSON's \\ud800 escapes can produce)."""
    if text.isascii():
        return True
    try:
        text.encode('utf-8')
    except UnicodeEncodeError:
        return False
    return True


def check_priority(priority: Any) -> int:
    """A publication's priority, or InvalidMessage."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 0 <= priority <= 9:
        raise InvalidMessage('priority', f'must be a whole number from 0 to 9, not {priority!r}')
    return priority


def check_expiration(expiration: Any) -> float:
    """A publication's lifetime in seconds, or InvalidMessage."""
    if (isinstance(expiration, bool) or not isinstance(expiration, (int, float)) or expiration <= 0
            or (isinstance(expiration, float) and not math.isfinite(expiration))):
        raise InvalidMessage('expiration', f'must be a positive, finite number of seconds, not {expiration!r}')
    return expiration


def stored_data(data: Any, mime_type: str | None, limits: JsonLimits, max_size: int) -> tuple[str, str, int]:
    """Data as stored, its mime type and its size in bytes; InvalidMessage or MessageTooLarge."""
    text, mime = encode_data(data, mime_type, limits)
    if not _is_unicode(text):
        raise InvalidMessage('data', 'is not valid Unicode (it has a lone surrogate)')
    size = len(text.encode('utf-8')) if not text.isascii() else len(text)
    if size > max_size:
        raise MessageTooLarge(size, max_size)
    # PostgreSQL cannot store U+0000 in text, and one such row would fail a whole group commit.
    if '\x00' in text:
        raise InvalidMessage('data', 'contains a NUL character (U+0000); publish it as JSON or bytes')
    return text, mime, size


def check_fields(**fields: tuple[Any, int]) -> None:
    """InvalidMessage unless each field (value, longest) is None or a string that short, without NUL."""
    for name, (value, limit) in fields.items():
        if value is not None and (not isinstance(value, str) or len(value) > limit or '\x00' in value
                                  or not _is_unicode(value)):
            raise InvalidMessage(name, f'must be a string of at most {limit} characters, without NUL')


def held_delivery(pub: Publication, sub_id: int, entry_id: int) -> Delivery:
    """A non-GD publication as queued in a delivery loop's memory (never stored; a negative entry id)."""
    return Delivery(
        entry_id=entry_id, sub_id=sub_id, delivery_count=0, next_attempt_at=0.0, last_error='',
        recv_time=pub.pub_time, message_id=0, msg_id=pub.msg_id, topic_name=pub.topic_name, data=pub.data,
        mime_type=pub.mime_type, priority=pub.priority, pub_time=pub.pub_time,
        expiration_time=pub.expiration_time, publisher=pub.publisher, correl_id=pub.correl_id,
        in_reply_to=pub.in_reply_to, ext_client_id=pub.ext_client_id, has_gd=False, size=pub.size,
        topic_id=pub.topic_id, ext_pub_time=pub.ext_pub_time)


# Views


def expiration_secs(d: Delivery) -> int:
    """The message's lifetime in whole seconds, as every view shows it (Zato 4.1's integer)."""
    return round(d.expiration_time - d.pub_time)


def times_iso(d: Delivery) -> dict[str, str]:
    """The message's times as every view shows them: pub_time_iso, recv_time_iso and expiration_time_iso."""
    recv_time_iso = iso(d.recv_time)
    # A message published to a queue directly is received when it is published: one rendering does.
    pub_time_iso = d.ext_pub_time or (recv_time_iso if d.pub_time == d.recv_time else iso(d.pub_time))
    return {'pub_time_iso': pub_time_iso, 'recv_time_iso': recv_time_iso,
            'expiration_time_iso': iso(d.expiration_time)}


def service_view(d: Delivery, sub_key: str, limits: JsonLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The message and its metadata as a subscribed service sees it (request.raw_request), or UnrenderableMessage."""
    mime = d.mime_type[:-len(BASE64_SUFFIX)] if d.mime_type.endswith(BASE64_SUFFIX) else d.mime_type
    try:
        data = decode_data(d.data, d.mime_type, limits)
    except ValueError as e:  # stored past the checks of publish (an older version, an edit, the database itself)
        raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
    return {'msg_id': d.msg_id, 'topic_name': d.topic_name, 'data': data,
            'mime_type': mime, 'priority': d.priority, 'size': d.size, 'has_gd': d.has_gd,
            'pub_time': d.pub_time, **times_iso(d), 'expiration': expiration_secs(d),
            'publisher': d.publisher, 'correl_id': d.correl_id,
            'in_reply_to': d.in_reply_to, 'ext_client_id': d.ext_client_id, 'delivery_count': d.delivery_count,
            'sub_key': sub_key}


def pull_meta(d: Delivery, sub_key: str, now: float, ack_id: str | None = None) -> dict[str, Any]:
    """A pulled message's meta as the REST API returns it (Zato 4.1's keys, plus ours)."""
    meta: dict[str, Any] = {
        'topic_name': d.topic_name, 'size': d.size, 'priority': d.priority,
        'expiration': expiration_secs(d), 'msg_id': d.msg_id, 'sub_key': sub_key,
        **times_iso(d),
        'time_since_pub': str(timedelta(seconds=max(0.0, now - d.pub_time))),
        'time_since_recv': str(timedelta(seconds=max(0.0, now - d.recv_time))),
        'delivery_count': d.delivery_count,
    }
    for name in ('correl_id', 'in_reply_to', 'ext_client_id'):
        value = getattr(d, name)
        if value:
            meta[name] = value
    if d.mime_type != 'application/json':
        meta['mime_type'] = d.mime_type  # text as it was published, or base64 ('...;base64') for bytes
    if ack_id is not None:
        meta['ack_id'] = ack_id
    return meta


def pull_view(d: Delivery, sub_key: str, now: float, ack_id: str | None = None,
              limits: JsonLimits = DEFAULT_LIMITS) -> dict[str, Any]:
    """A pulled message as the REST API returns it: {data, meta}; UnrenderableMessage if its data is not JSON.

    Binary data stays its stored base64 text (the meta's mime_type says so), as on the wire.
    """
    data: Any = d.data
    if d.mime_type == 'application/json':
        try:
            data = json_limits.loads(d.data, limits)
        except json_limits.InvalidJson as e:
            raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
    return {'data': data, 'meta': pull_meta(d, sub_key, now, ack_id)}


def render_pull(d: Delivery, sub_key: str, now: float, ack_id: str | None = None,
                limits: JsonLimits = DEFAULT_LIMITS) -> bytes:
    """The UTF-8 JSON text of pull_view(...); UnrenderableMessage if the message cannot be rendered.

    Stored JSON data is checked against the limits and then used as it is stored (it was written
    by json_limits.dumps at publication): it is not parsed into objects only to be written out again.
    """
    try:
        if d.mime_type == 'application/json':
            json_limits.loads(d.data, limits)
            data = d.data.strip()
        else:
            data = json_limits.dumps(d.data, limits)
        meta = json_limits.dumpb(pull_meta(d, sub_key, now, ack_id), limits)
        return b'{"data":%b,"meta":%b}' % (data.encode(), meta)
    except json_limits.InvalidJson as e:
        raise UnrenderableMessage(d.msg_id, f'its data {e}') from None
    except UnicodeEncodeError:
        raise UnrenderableMessage(d.msg_id, 'it has text that is not valid Unicode (a lone surrogate)') from None
    except (TypeError, ValueError, RecursionError) as e:
        raise UnrenderableMessage(d.msg_id, f'it cannot be rendered as JSON ({type(e).__name__})') from None


def push_view(d: Delivery, data: Any) -> dict[str, Any]:
    """A message as Zato 4.1 pushes it: its fields at the top level (optional ones only when set)."""
    body: dict[str, Any] = {
        'msg_id': d.msg_id, 'topic_name': d.topic_name, 'data': data, 'priority': d.priority,
        'expiration': expiration_secs(d), **times_iso(d)}
    for name in ('correl_id', 'in_reply_to', 'ext_client_id', 'publisher'):
        value = getattr(d, name)
        if value:
            body[name] = value
    if d.mime_type != 'application/json':
        body['mime_type'] = d.mime_type  # text as published, or base64 ('...;base64') for bytes
    return body


#: How much of a message's data the admin API's lists show.
PREVIEW_CHARS = 200


def _stored_data(row: Any) -> Any:
    try:
        return decode_data(row.data, row.mime_type)
    except ValueError:  # stored text that is not what its mime type says: show it as it is
        return row.data


def admin_view(row: Any, full: bool = True) -> dict[str, Any]:
    """A stored message (with its queue entry or dead letter, when the row has one) as the admin API shows it."""
    view: dict[str, Any] = {
        'msg_id': row.msg_id, 'topic_name': row.topic_name, 'mime_type': row.mime_type, 'priority': row.priority,
        'size': row.size, 'has_gd': row.has_gd, 'publisher': row.publisher, 'pub_time_iso': iso_or_none(row.pub_time),
        'expiration_time_iso': iso_or_none(row.expiration_time), 'correl_id': row.correl_id,
        'in_reply_to': row.in_reply_to, 'ext_client_id': row.ext_client_id,
    }
    if full:
        view['data'] = _stored_data(row)
    else:
        view['data_preview'] = row.data[:PREVIEW_CHARS]
    mapping = row._mapping
    if 'entry_id' in mapping:
        view.update(delivery_count=row.delivery_count, last_error=row.last_error,
                    recv_time_iso=iso_or_none(row.recv_time),
                    next_attempt_time_iso=iso_or_none(row.next_attempt_at or row.recv_time),
                    # The ack id is the pulling client's token: only say that the entry is leased.
                    leased=row.ack_id is not None)
    if 'dead_id' in mapping:
        view.update(delivery_count=row.delivery_count, last_error=row.last_error, reason=row.reason,
                    dead_time_iso=iso_or_none(row.dead_at))
    if 'last_traceback' in mapping:
        # Only one message's own view carries it: a list of tracebacks would be too big to page through.
        view['last_traceback'] = row.last_traceback or None
    return view
