"""The admin API of queues and dead letters, under /admin/queues/{id} (a subscription's id).

- ``GET /admin/queues`` and ``GET /admin/queues/{id}``: depth, oldest message, dead letters.
- ``GET .../messages?limit=&offset=``: browse in delivery order (data shortened to a preview);
  ``DELETE .../messages`` purges the queue.
- ``GET|PATCH|DELETE .../messages/{msg_id}``: one message; PATCH edits data, priority or
  expiration in place, and the next delivery sees it.
- ``GET|DELETE .../dead-letters`` and ``GET|PATCH|DELETE .../dead-letters/{msg_id}``: the same for
  dead letters; ``POST .../redrive {msg_ids} | {all: true}`` puts them back into the queue.

The work is ``runtime.pubsub.queue_admin``'s, whose docstring states what an edit and a re-drive
guarantee; these resources read the input, call it and show its answer.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import falcon

from runtime.errors import BadRequest, InvalidInput, ObjectNotFound
from runtime.http.admin.input import MAX_DB_INT, PAGE_PARAMS, Body, has_bad_chars, page
from runtime.http.admin.message_views import DEAD, MESSAGE_EDIT, QUEUED, MessageResource
from runtime.http.admin.subscription_views import SUBSCRIPTION, sub_details, sub_views
from runtime.http.openapi import BOOL, INT, STR, arr, integer, obj, operation, query, string
from runtime.pubsub.message import admin_view
from runtime.pubsub.queue_statements import MAX_PAGE

if TYPE_CHECKING:
    from runtime.pubsub.registry import SubInfo

_T = ['admin: pub/sub']


_CURSOR = re.compile(r'(-?[0-9]{1,2})\.([0-9]{1,19})\.([0-9]{1,19})')
_MAX_ID = 2 ** 63 - 1


def _cursor(value: str | None) -> tuple[int, int, int] | None:
    """A queue row's cursor (priority.message_id.entry_id, as a browse shows it), or None."""
    if not value:
        return None
    match = _CURSOR.fullmatch(value)
    if match is None or any(int(part) > _MAX_ID for part in match.groups()[1:]):
        raise InvalidInput('after', 'must be the cursor of a message of a previous page (next_after)')
    priority, message_id, entry_id = (int(part) for part in match.groups())
    return priority, message_id, entry_id


# Queues


class QueuesResource(MessageResource):
    """GET /admin/queues: every queue's depth, oldest message and dead letters."""

    openapi = {'get': operation(
        'Every queue: depth, oldest message, dead letters', tags=_T, errors=(400,),
        description='With limit (and offset, q), a page of queues by subscription id; without limit, every queue.',
        params=[query('q', string(200), 'Only subscriptions whose topic, service or security contains this'),
                query('limit', integer(1, MAX_PAGE), 'Page size (no limit: every queue)'),
                query('offset', integer(0, MAX_DB_INT), 'Queues to skip')],
        response={'queues': arr(SUBSCRIPTION), 'total': INT})}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        search = (req.get_param('q') or '').lower()
        if len(search) > 200 or has_bad_chars(search):
            raise InvalidInput('q', 'must be at most 200 printable characters')
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_PAGE)
        offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
        if limit is None and not offset and not search:
            subs, stats, rows = self._queues.queues()
            resp.media = {'is_ok': True, 'queues': sub_views(self._queues, subs, stats, rows), 'total': len(subs)}
            return
        subs = [s for s in self._subs.list()
                if not search or any(search in v.lower() for v in (s.pattern, s.service, s.security, str(s.id)))]
        page_subs = subs[offset:offset + (limit or MAX_PAGE)]
        stats, rows = self._queues.subscription_stats([s.id for s in page_subs])
        resp.media = {'is_ok': True, 'queues': sub_views(self._queues, page_subs, stats, rows), 'total': len(subs)}


class QueueResource(MessageResource):
    """GET /admin/queues/{id}: one queue's depth, oldest message and dead letters."""

    openapi = {'get': operation("A subscription's queue: depth, oldest message, dead letters", tags=_T,
                                errors=(404,), response={'queue': SUBSCRIPTION})}

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        resp.media = {'is_ok': True, 'queue': sub_details(self._queues, self._subs.get(sub_id))}


class QueueMessagesResource(MessageResource):
    """GET /admin/queues/{id}/messages: browse in delivery order; DELETE: purge the queue."""

    openapi = {
        'get': operation('Browse a queue in delivery order (data shortened to a preview)', tags=_T,
                         errors=(400, 404),
                         description='Each message has a cursor; after=<the cursor of the last one shown> gives the '
                                     'next page at the same cost however deep the queue (next_after is that cursor).',
                         params=[*PAGE_PARAMS, query('after', string(64), 'The next_after of the previous page')],
                         response={'messages': arr(QUEUED), 'depth': INT, 'limit': INT, 'offset': INT,
                                   'next_offset': {'type': ['integer', 'null']},
                                   'next_after': {'type': ['string', 'null']}}),
        'delete': operation('Purge a queue: remove every message waiting in it', tags=_T, errors=(404,),
                            response={'deleted': INT}),
    }

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = self._subs.get(sub_id)
        limit, offset = page(req)
        after = _cursor(req.get_param('after'))
        messages, depth = self._queues.browse(sub.id, limit, offset, after)
        resp.media = {'is_ok': True, 'messages': messages, 'depth': depth, 'limit': limit, 'offset': offset,
                      'next_offset': offset + limit if after is None and offset + limit < depth else None,
                      'next_after': messages[-1]['cursor'] if len(messages) == limit else None}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = self._subs.get(sub_id)
        deleted = self._queues.purge(sub.id)
        resp.media = {'is_ok': True, 'deleted': deleted}


class QueueMessageResource(MessageResource):
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
        row = self._queues.message(sub.id, msg_id)
        if row is None:
            raise ObjectNotFound(f'message in the queue of subscription #{sub.id}', msg_id)
        return row

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = self._subs.get(sub_id)
        resp.media = {'is_ok': True, 'message': admin_view(self._row(sub, msg_id))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = self._subs.get(sub_id)
        row = self._row(sub, msg_id)
        changes = self._edit(req, row)
        new, held_by = self._queues.edit_message(sub.id, msg_id, row.message_id, changes)
        if new is None:  # delivered while we edited
            raise ObjectNotFound(f'message in the queue of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'message': admin_view(new), 'held_by': held_by}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = self._subs.get(sub_id)
        if not self._queues.delete_message(sub.id, msg_id):
            raise ObjectNotFound(f'message in the queue of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'deleted': msg_id}


# Dead letters


class DeadLettersResource(MessageResource):
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
        sub = self._subs.get(sub_id)
        limit, offset = page(req)
        rows, count = self._queues.browse_dead_letters(sub.id, limit, offset)
        resp.media = {'is_ok': True, 'dead_letters': rows, 'count': count, 'limit': limit, 'offset': offset,
                      'next_offset': offset + limit if offset + limit < count else None}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = self._subs.get(sub_id)
        deleted = self._queues.delete_dead_letters(sub.id)
        resp.media = {'is_ok': True, 'deleted': deleted}


class DeadLetterResource(MessageResource):
    """GET /admin/queues/{id}/dead-letters/{msg_id}; PATCH: edit it; DELETE."""

    openapi = {
        'get': operation('A dead letter with its full data and last error', tags=_T, errors=(404,),
                         response={'dead_letter': DEAD}),
        'patch': operation('Edit a dead letter before re-driving it', tags=_T, errors=(400, 404, 413),
                           body=MESSAGE_EDIT, response={'dead_letter': DEAD, 'held_by': INT}),
        'delete': operation('Delete a dead letter', tags=_T, errors=(404,), response={'deleted': STR}),
    }

    def _row(self, sub: SubInfo, msg_id: str) -> Any:
        row = self._queues.dead_letter(sub.id, msg_id)
        if row is None:
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', msg_id)
        return row

    def on_get(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = self._subs.get(sub_id)
        resp.media = {'is_ok': True, 'dead_letter': admin_view(self._row(sub, msg_id))}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = self._subs.get(sub_id)
        row = self._row(sub, msg_id)
        changes = self._edit(req, row)
        new, held_by = self._queues.edit_dead_letter(sub.id, msg_id, row.message_id, changes)
        if new is None:
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'dead_letter': admin_view(new), 'held_by': held_by}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = self._subs.get(sub_id)
        if not self._queues.delete_dead_letters(sub.id, msg_id):
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'deleted': msg_id}


class RedriveResource(MessageResource):
    """POST /admin/queues/{id}/redrive {msg_ids} or {all: true}: dead letters back into the queue."""

    openapi = {'post': operation(
        'Re-drive dead letters: back into the queue, delivery count reset, delivered again', tags=_T,
        errors=(400, 404),
        body=obj({'msg_ids': arr(string(64), maxItems=MAX_PAGE), 'all': BOOL}),
        response={'redriven': arr(STR), 'count': INT, 'missing': arr(STR)})}

    def on_post(self, req: falcon.Request, resp: falcon.Response, sub_id: int) -> None:
        sub = self._subs.get(sub_id)
        body = Body(req, {'msg_ids', 'all'})
        msg_ids = body.data.get('msg_ids')
        redrive_all = body.flag('all', False)
        if msg_ids is not None:
            if (redrive_all or not isinstance(msg_ids, list) or len(msg_ids) > MAX_PAGE
                    or not all(isinstance(m, str) and len(m) <= 64 and not has_bad_chars(m) for m in msg_ids)):
                raise InvalidInput('msg_ids', f'must be a list of at most {MAX_PAGE} msg_ids, '
                                              'without all')
        elif not redrive_all:
            raise BadRequest("give msg_ids, or all: true to re-drive every dead letter")
        done = self._queues.redrive(sub.id, msg_ids)
        missing = sorted(set(msg_ids) - set(done)) if msg_ids is not None else []
        if missing and not done:
            raise ObjectNotFound(f'dead letter of subscription #{sub.id}', missing[0])
        resp.media = {'is_ok': True, 'redriven': done, 'count': len(done), 'missing': missing}


class QueueMessageDeadLetterResource(MessageResource):
    """POST /admin/queues/{id}/messages/{msg_id}/dead-letter: move a queued message to the dead-letter queue."""

    openapi = {'post': operation(
        'Move a queued message to its dead-letter queue (reason admin), to inspect or re-drive later', tags=_T,
        errors=(400, 404), body=obj({'error': string(1000, description='Its last error (default: moved by an '
                                                                         'administrator)')}),
        description='A message a worker is delivering at this moment may still be delivered once.',
        response={'dead_lettered': STR})}

    def on_post(self, req: falcon.Request, resp: falcon.Response, sub_id: int, msg_id: str) -> None:
        sub = self._subs.get(sub_id)
        body = Body(req, {'error'}, required=False)
        error = body.text('error', max_len=1000) or 'moved to the dead-letter queue by an administrator'
        if not self._queues.move_to_dead_letters(sub.id, msg_id, error):
            raise ObjectNotFound(f'message in the queue of subscription #{sub.id}', msg_id)
        resp.media = {'is_ok': True, 'dead_lettered': msg_id}
