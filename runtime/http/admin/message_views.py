"""What the admin resources of stored messages share: their OpenAPI shapes and a base that edits in place.

Queues (``queues``), dead letters across subscriptions (``dead_letters``) and messages waiting in a
topic (``topic_messages``) show and edit the same stored messages; each family imports this module,
never another family.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.errors import BadRequest, InvalidInput, MessageTooLarge
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import Body, check_data, check_numbers
from runtime.http.openapi import ANY, BOOL, INT, NULLABLE_STR, STR, TIME, integer, obj, string
from runtime.pubsub.message import BASE64_SUFFIX, encode_data

MESSAGE_COMMON = {'msg_id': STR, 'topic_name': STR, 'mime_type': STR, 'priority': INT, 'size': INT, 'has_gd': BOOL,
                  'publisher': STR, 'pub_time_iso': TIME, 'expiration_time_iso': TIME, 'correl_id': NULLABLE_STR,
                  'in_reply_to': NULLABLE_STR, 'ext_client_id': NULLABLE_STR, 'delivery_count': INT,
                  'last_error': STR,
                  'last_traceback': {**NULLABLE_STR, 'description': "Traceback of the last failed attempt "
                                                                    "(a message's own view only)"}}
QUEUED = obj({**MESSAGE_COMMON, 'data': ANY, 'data_preview': STR, 'recv_time_iso': TIME,
              'next_attempt_time_iso': TIME, 'leased': BOOL}, required=['msg_id'], additional=True)
DEAD = obj({**MESSAGE_COMMON, 'data': ANY, 'data_preview': STR, 'reason': STR, 'dead_time_iso': TIME},
           required=['msg_id'], additional=True)
MESSAGE_EDIT = obj({'data': {'description': 'New data (any JSON value but null)'},
                    'mime_type': string(100), 'priority': integer(0, 9),
                    'expiration': {'type': 'number', 'exclusiveMinimum': 0,
                                   'description': 'Seconds from now until it expires (capped by the topic)'}})


class MessageResource(AdminResource):
    """A resource of stored messages: finds topics and subscriptions, works on queues, knows the message size limit."""

    def __init__(self, parts: AdminParts) -> None:
        self._topics = parts.topic_admin
        self._subs = parts.subscription_admin
        self._queues = parts.queue_admin
        self._settings = parts.settings

    def _edit(self, req: falcon.Request, row: Any) -> dict[str, Any]:
        """Validate an edit of a stored message's data, priority or expiration; the columns to change."""
        body = Body(req, {'data', 'mime_type', 'priority', 'expiration'})
        changes: dict[str, Any] = {}
        if 'data' in body:
            data = check_data(body.data['data'])
            check_numbers(data, 'data')
            current = row.mime_type[:-len(BASE64_SUFFIX)] if row.mime_type.endswith(BASE64_SUFFIX) else row.mime_type
            text, mime = encode_data(data, body.text('mime_type', default=current, max_len=100) or None)
            size = len(text.encode('utf-8'))
            limit = self._settings.pubsub.max_message_size
            if size > limit:
                raise MessageTooLarge(size, limit)
            changes.update(data=text, mime_type=mime, size=size)
        elif 'mime_type' in body:
            raise InvalidInput('mime_type', 'can only be changed together with data')
        priority = body.whole('priority', 0, 9)
        if priority is not None:
            changes['priority'] = priority
        expiration = body.seconds('expiration')
        if expiration is not None:
            changes['expiration_time'] = self._queues.expiration_time(row.topic_name, expiration)
        if not changes:
            raise BadRequest('nothing to change: give data, priority or expiration')
        return changes
