"""The admin API of messages still waiting in a topic (accepted while no subscription took them).

- ``GET /admin/topic-messages?topic=&limit=&after=``: a page of a topic's waiting messages, oldest
  first (keyset: ``next_after`` is the cursor of the next page), and how many wait.
- ``GET|PATCH|DELETE /admin/topic-messages/{msg_id}``: one waiting message; PATCH edits its data,
  priority or expiration in place (the subscription that takes it later receives the edit).

A topic name may hold ``/``, so the topic is a query parameter here rather than a path segment of
``/admin/topics/{name}``, whose last segment is the name itself. The work is
``runtime.pubsub.queue_admin``'s.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.errors import InvalidInput, ObjectNotFound
from runtime.http.admin.input import has_bad_chars
from runtime.http.admin.message_views import MESSAGE_COMMON, MESSAGE_EDIT, MessageResource
from runtime.http.openapi import ANY, BOOL, INT, STR, arr, integer, obj, operation, query, string
from runtime.pubsub.message import admin_view
from runtime.pubsub.queue_statements import MAX_PAGE

_T = ['admin: pub/sub']
DEFAULT_PAGE = 50
WAITING = obj({**{k: v for k, v in MESSAGE_COMMON.items() if k not in ('delivery_count', 'last_error',
                                                                           'last_traceback')},
               'data': ANY, 'data_preview': STR, 'id': INT}, required=['msg_id'], additional=True)
_MSG_ID_PARAM = {'name': 'msg_id', 'in': 'path', 'required': True, 'schema': string(64, 1)}


def _msg_id(msg_id: str) -> str:
    if len(msg_id) > 64 or has_bad_chars(msg_id):
        raise InvalidInput('msg_id', 'must be a message id of at most 64 printable characters')
    return msg_id


class TopicMessagesResource(MessageResource):
    """GET /admin/topic-messages?topic=: a page of the messages waiting in a topic, oldest first."""

    openapi = {'get': operation(
        'Browse the messages waiting in a topic (accepted with no subscriber), oldest first', tags=_T,
        errors=(400, 404),
        params=[query('topic', string(200, 1), 'The topic name', required=True),
                query('limit', integer(1, MAX_PAGE), f'Page size (default {DEFAULT_PAGE})'),
                query('after', integer(0, 2 ** 63 - 1), 'The next_after of the previous page')],
        response={'messages': arr(WAITING), 'waiting': INT, 'limit': INT, 'topic_name': STR,
                  'next_after': {'type': ['integer', 'null']}})}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        name = req.get_param('topic')
        if not name:
            raise InvalidInput('topic')
        if len(name) > 200 or has_bad_chars(name):
            raise InvalidInput('topic', 'must be a topic name of at most 200 printable characters')
        topic = self._topics.get(name)
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_PAGE) or DEFAULT_PAGE
        after = req.get_param_as_int('after', min_value=0, max_value=2 ** 63 - 1)
        messages, waiting = self._queues.topic_messages(topic.id, limit, after)
        resp.media = {'is_ok': True, 'topic_name': topic.name, 'messages': messages, 'waiting': waiting,
                      'limit': limit, 'next_after': messages[-1]['id'] if len(messages) == limit else None}


class TopicMessageResource(MessageResource):
    """GET /admin/topic-messages/{msg_id}; PATCH: edit it in place; DELETE: remove it from its topic."""

    openapi = {
        'get': operation('A message waiting in its topic, with its full data', tags=_T, errors=(400, 404),
                         params=[_MSG_ID_PARAM], response={'message': WAITING}),
        'patch': operation('Edit a message waiting in its topic in place', tags=_T, errors=(400, 404, 413),
                           params=[_MSG_ID_PARAM], body=MESSAGE_EDIT, response={'message': WAITING}),
        'delete': operation('Remove a message waiting in its topic', tags=_T, errors=(400, 404),
                            params=[_MSG_ID_PARAM], response={'deleted': STR, 'in_topic': BOOL}),
    }

    def _row(self, msg_id: str) -> Any:
        row = self._queues.topic_message(_msg_id(msg_id))
        if row is None:
            raise ObjectNotFound('message waiting in a topic', msg_id)
        return row

    def on_get(self, req: falcon.Request, resp: falcon.Response, msg_id: str) -> None:
        resp.media = {'is_ok': True, 'message': admin_view(self._row(msg_id))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, msg_id: str) -> None:
        row = self._row(msg_id)
        changes = self._edit(req, row)
        new = self._queues.edit_topic_message(msg_id, row.message_id, changes)
        if new is None:  # a subscription took it meanwhile
            raise ObjectNotFound('message waiting in a topic', msg_id)
        resp.media = {'is_ok': True, 'message': admin_view(new)}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, msg_id: str) -> None:
        if not self._queues.delete_topic_message(_msg_id(msg_id)):
            raise ObjectNotFound('message waiting in a topic', msg_id)
        resp.media = {'is_ok': True, 'deleted': msg_id, 'in_topic': False}

