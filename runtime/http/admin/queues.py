"""The admin API of queues and dead letters, under /admin/queues/{id} (a subscription's id).

- ``GET /admin/queues`` and ``GET /admin/queues/{id}``: depth, oldest message, dead letters.
- ``GET .../messages?limit=&offset=``: browse in delivery order (data shortened to a preview);
  ``DELETE .../messages`` purges the queue.
- ``GET|PATCH|DELETE .../messages/{msg_id}``: one message; PATCH edits data, priority or
  expiration in place, and the next delivery sees it.
- ``GET|DELETE .../dead-letters`` and ``GET|PATCH|DELETE .../dead-letters/{msg_id}``: the same for
  dead letters; ``POST .../redrive {msg_ids} | {all: true}`` puts them back into the queue.

The SQL lives in ``runtime.pubsub.admin_ops``, whose docstring states what an edit and a re-drive
guarantee.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import falcon

from runtime.db.blocking import run_transaction
from runtime.errors import BadRequest, InvalidInput, MessageTooLarge, ObjectNotFound
from runtime.http.admin.base import AdminResource
from runtime.http.admin.input import PAGE_PARAMS, Body, check_data, check_numbers, has_bad_chars, page
from runtime.http.admin.subscription_views import SUBSCRIPTION, find_sub, sub_details, sub_rows, sub_view
from runtime.http.openapi import ANY, BOOL, INT, NULLABLE_STR, STR, TIME, arr, integer, obj, operation, string
from runtime.pubsub import admin_ops
from runtime.pubsub.broker import BASE64_SUFFIX, encode_data

if TYPE_CHECKING:
    from runtime.core import Runtime
    from runtime.pubsub.registry import SubInfo

_T = ['admin: pub/sub']

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


# Queues


class QueuesResource(AdminResource):
    """GET /admin/queues: every queue's depth, oldest message and dead letters."""

    openapi = {'get': operation('Every queue: depth, oldest message, dead letters', tags=_T, errors=(),
                                response={'queues': arr(SUBSCRIPTION)})}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        broker = self._runtime.broker
        broker.reload()  # a queue list must not miss subscriptions another worker just made
        subs = sorted(broker.registry.subs.values(), key=lambda s: s.id)
        stats, rows = run_transaction(broker.engine, lambda c: (admin_ops.queue_stats(c), sub_rows(c)), write=False)
        resp.media = {'is_ok': True, 'queues': [sub_view(s, stats.get(s.id), rows.get(s.id)) for s in subs]}


class QueueResource(AdminResource):
    """GET /admin/queues/{id}: one queue's depth, oldest message and dead letters."""

    openapi = {'get': operation("A subscription's queue: depth, oldest message, dead letters", tags=_T,
                                errors=(404,), response={'queue': SUBSCRIPTION})}

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        resp.media = {'is_ok': True, 'queue': sub_details(self._runtime, find_sub(self._runtime, sub_id))}


class QueueMessagesResource(AdminResource):
    """GET /admin/queues/{id}/messages: browse in delivery order; DELETE: purge the queue."""

    openapi = {
        'get': operation('Browse a queue in delivery order (data shortened to a preview)', tags=_T, errors=(404,),
                         params=PAGE_PARAMS,
                         response={'messages': arr(QUEUED), 'depth': INT, 'limit': INT, 'offset': INT,
                                   'next_offset': {'type': ['integer', 'null']}}),
        'delete': operation('Purge a queue: remove every message waiting in it', tags=_T, errors=(404,),
                            response={'deleted': INT}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = find_sub(self._runtime, sub_id)
        limit, offset = page(req)
        messages, stats = run_transaction(self._runtime.engine, lambda c: (
            admin_ops.browse_queue(c, sub.id, limit, offset), admin_ops.queue_stats(c, [sub.id])), write=False)
        depth = stats[sub.id]['depth']
        resp.media = {'is_ok': True, 'messages': messages, 'depth': depth, 'limit': limit, 'offset': offset,
                      'next_offset': offset + limit if offset + limit < depth else None}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = find_sub(self._runtime, sub_id)
        deleted = run_transaction(self._runtime.engine, lambda c: admin_ops.purge_queue(c, sub.id))
        resp.media = {'is_ok': True, 'deleted': deleted}


def _edit(runtime: Runtime, req: falcon.Request, row: Any) -> dict[str, Any]:
    """Validate an edit of a stored message's data, priority or expiration; the columns to change."""
    body = Body(req, runtime, {'data', 'mime_type', 'priority', 'expiration'})
    changes: dict[str, Any] = {}
    if 'data' in body:
        data = check_data(body.data['data'])
        check_numbers(data, 'data')
        current = row.mime_type[:-len(BASE64_SUFFIX)] if row.mime_type.endswith(BASE64_SUFFIX) else row.mime_type
        text, mime = encode_data(data, body.text('mime_type', default=current, max_len=100) or None)
        size = len(text.encode('utf-8'))
        limit = runtime.settings.pubsub.max_message_size
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
        topic = runtime.broker.registry.topic(row.topic_name)
        if topic is not None:
            expiration = min(expiration, topic.limit_message_expiry)
        changes['expiration_time'] = time.time() + expiration
    if not changes:
        raise BadRequest('nothing to change: give data, priority or expiration')
    return changes


class QueueMessageResource(AdminResource):
    """GET /admin/queues/{id}/messages/{msg_id}; PATCH: edit in place; DELETE: remove from this queue."""

    openapi = {
        'get': operation('A queued message with its full data', tags=_T, errors=(404,),
                         response={'message': QUEUED}),
        'patch': operation('Edit a queued message in place (the next delivery sees the change)', tags=_T,
                           errors=(400, 404, 413), body=MESSAGE_EDIT,
                           description='A message published to several subscriptions is stored once: the edit is '
                                       'seen by every queue still holding it (held_by counts them).',
                           response={'message': QUEUED, 'held_by': INT}),
        'delete': operation('Remove a message from this queue', tags=_T, errors=(404,), response={'deleted': STR}),
    }

    def _row(self, sub: SubInfo, msg_id: str) -> Any:
        row = run_transaction(self._runtime.engine, lambda c: admin_ops.queue_message(c, sub.id, msg_id), write=False)
        if row is None:
            raise ObjectNotFound(f'message in the queue of subscription #{sub.id}', msg_id)
        return row

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = find_sub(self._runtime, sub_id)
        resp.media = {'is_ok': True, 'message': admin_ops.message_view(self._row(sub, msg_id))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = find_sub(self._runtime, sub_id)
        row = self._row(sub, msg_id)
        changes = _edit(self._runtime, req, row)

        def work(conn: Any) -> tuple[Any, int]:
            admin_ops.edit_message(conn, row.message_id, changes)
            return admin_ops.queue_message(conn, sub.id, msg_id), admin_ops.holders(conn, row.message_id)
        new, held_by = run_transaction(self._runtime.engine, work)
        if new is None:  # delivered while we edited
            raise ObjectNotFound(f'message in the queue of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'message': admin_ops.message_view(new), 'held_by': held_by}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = find_sub(self._runtime, sub_id)
        if not run_transaction(self._runtime.engine, lambda c: admin_ops.delete_queue_message(c, sub.id, msg_id)):
            raise ObjectNotFound(f'message in the queue of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'deleted': msg_id}


# Dead letters


class DeadLettersResource(AdminResource):
    """GET /admin/queues/{id}/dead-letters: browse; DELETE: remove them all."""

    openapi = {
        'get': operation("Browse a subscription's dead letters, oldest first", tags=_T, errors=(404,),
                         params=PAGE_PARAMS,
                         response={'dead_letters': arr(DEAD), 'count': INT, 'limit': INT, 'offset': INT,
                                   'next_offset': {'type': ['integer', 'null']}}),
        'delete': operation("Delete every dead letter of a subscription", tags=_T, errors=(404,),
                            response={'deleted': INT}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = find_sub(self._runtime, sub_id)
        limit, offset = page(req)
        rows, count = run_transaction(self._runtime.engine, lambda c: (
            admin_ops.browse_dead_letters(c, sub.id, limit, offset), admin_ops.dead_letter_count(c, sub.id)),
            write=False)
        resp.media = {'is_ok': True, 'dead_letters': rows, 'count': count, 'limit': limit, 'offset': offset,
                      'next_offset': offset + limit if offset + limit < count else None}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = find_sub(self._runtime, sub_id)
        deleted = run_transaction(self._runtime.engine, lambda c: admin_ops.delete_dead_letters(c, sub.id))
        resp.media = {'is_ok': True, 'deleted': deleted}


class DeadLetterResource(AdminResource):
    """GET /admin/queues/{id}/dead-letters/{msg_id}; PATCH: edit it; DELETE."""

    openapi = {
        'get': operation('A dead letter with its full data and last error', tags=_T, errors=(404,),
                         response={'dead_letter': DEAD}),
        'patch': operation('Edit a dead letter before re-driving it', tags=_T, errors=(400, 404, 413),
                           body=MESSAGE_EDIT, response={'dead_letter': DEAD, 'held_by': INT}),
        'delete': operation('Delete a dead letter', tags=_T, errors=(404,), response={'deleted': STR}),
    }

    def _row(self, sub: SubInfo, msg_id: str) -> Any:
        row = run_transaction(self._runtime.engine, lambda c: admin_ops.dead_letter(c, sub.id, msg_id), write=False)
        if row is None:
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', msg_id)
        return row

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = find_sub(self._runtime, sub_id)
        resp.media = {'is_ok': True, 'dead_letter': admin_ops.message_view(self._row(sub, msg_id))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = find_sub(self._runtime, sub_id)
        row = self._row(sub, msg_id)
        changes = _edit(self._runtime, req, row)

        def work(conn: Any) -> tuple[Any, int]:
            admin_ops.edit_message(conn, row.message_id, changes)
            return admin_ops.dead_letter(conn, sub.id, msg_id), admin_ops.holders(conn, row.message_id)
        new, held_by = run_transaction(self._runtime.engine, work)
        if new is None:
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'dead_letter': admin_ops.message_view(new), 'held_by': held_by}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = find_sub(self._runtime, sub_id)
        if not run_transaction(self._runtime.engine, lambda c: admin_ops.delete_dead_letters(c, sub.id, msg_id)):
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'deleted': msg_id}


class RedriveResource(AdminResource):
    """POST /admin/queues/{id}/redrive {msg_ids} or {all: true}: dead letters back into the queue."""

    openapi = {'post': operation(
        'Re-drive dead letters: back into the queue, delivery count reset, delivered again', tags=_T,
        errors=(400, 404),
        body=obj({'msg_ids': arr(string(64), maxItems=admin_ops.MAX_PAGE), 'all': BOOL}),
        response={'redriven': arr(STR), 'count': INT, 'missing': arr(STR)})}

    def on_post(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = find_sub(self._runtime, sub_id)
        body = Body(req, self._runtime, {'msg_ids', 'all'})
        msg_ids = body.data.get('msg_ids')
        redrive_all = body.flag('all', False)
        if msg_ids is not None:
            if (redrive_all or not isinstance(msg_ids, list) or len(msg_ids) > admin_ops.MAX_PAGE
                    or not all(isinstance(m, str) and len(m) <= 64 and not has_bad_chars(m) for m in msg_ids)):
                raise InvalidInput('msg_ids', f'must be a list of at most {admin_ops.MAX_PAGE} msg_ids, '
                                              'without all')
        elif not redrive_all:
            raise BadRequest("give msg_ids, or all: true to re-drive every dead letter")
        done = run_transaction(self._runtime.engine, lambda c: admin_ops.redrive(c, sub.id, msg_ids))
        missing = sorted(set(msg_ids) - set(done)) if msg_ids is not None else []
        if missing and not done:
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', missing[0])
        resp.media = {'is_ok': True, 'redriven': done, 'count': len(done), 'missing': missing}
