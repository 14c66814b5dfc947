"""The admin API of dead letters across every subscription, by filter, under /admin/dead-letters.

- ``GET /admin/dead-letters?topic=&sub_id=&error=&since=&until=&limit=&before=``: a page of the
  dead letters matching a filter, newest first; ``next_before`` is the cursor of the next page.
- ``POST /admin/dead-letters/count`` (body: the filter): how many match, for a confirmation.
- ``POST /admin/dead-letters/redrive`` and ``POST /admin/dead-letters/delete`` (body: the filter
  and ``expected``, the count the user confirmed): re-drive or delete all that match. More matching
  now than ``expected`` is a 409 and nothing is done, so a confirmation never covers more than it
  showed; the work runs in bounded batches (``runtime.pubsub.dead_letter_search``).

A filter: ``topic`` (a name or a pattern with ``*`` and ``**``), ``sub_id``, ``error`` (text the
last error contains, case-insensitively, at most 200 characters), ``since`` and ``until`` (ISO 8601
times or UNIX seconds; ``until`` excluded). One dead letter is read, edited and re-driven under
``/admin/queues/{sub_id}/dead-letters/{msg_id}`` (``runtime.http.admin.queues``).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import falcon

from runtime.errors import InvalidInput
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT, Body, has_bad_chars
from runtime.http.admin.message_views import DEAD
from runtime.http.openapi import BOOL, INT, arr, integer, obj, operation, query, string
from runtime.pubsub.dead_letter_search import COUNT_CAP, MAX_ERROR_TEXT, MAX_PAGE, DeadLetterFilter
from runtime.pubsub.topics import validate_pattern

_T = ['admin: pub/sub']
DEFAULT_PAGE = 50
#: Longest time value accepted, in characters.
_MAX_TIME_TEXT = 40
#: Largest row id (PostgreSQL BIGINT).
MAX_ID = 2 ** 63 - 1
_FILTER_FIELDS = ('topic', 'sub_id', 'error', 'since', 'until')

_TIME = {'type': ['string', 'number'], 'description': 'An ISO 8601 time or UNIX seconds'}
FILTER_SCHEMAS: dict[str, dict[str, Any]] = {
    'topic': string(200, description='A topic name or a pattern with * and **'),
    'sub_id': integer(1, MAX_DB_INT), 'error': string(MAX_ERROR_TEXT, description='Text the last error contains'),
    'since': {**_TIME, 'description': 'Dead-lettered at or after (ISO 8601 or UNIX seconds)'},
    'until': {**_TIME, 'description': 'Dead-lettered before (ISO 8601 or UNIX seconds)'},
}
_BULK_BODY = obj({**FILTER_SCHEMAS, 'expected': integer(0, COUNT_CAP, description='The count the user confirmed')},
                 required=['expected'])
_LISTED = obj({**DEAD['properties'], 'sub_id': INT}, required=['msg_id', 'sub_id'], additional=True)


def _time(value: Any, key: str) -> float | None:
    if value is None or value == '':
        return None
    if isinstance(value, str):
        if len(value) > _MAX_TIME_TEXT or has_bad_chars(value):
            raise InvalidInput(key, 'must be an ISO 8601 time or UNIX seconds')
        try:
            value = float(value)
        except ValueError:
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                raise InvalidInput(key, 'must be an ISO 8601 time or UNIX seconds') from None
            return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidInput(key, 'must be an ISO 8601 time or UNIX seconds')
    return float(value)


def _text(value: Any, key: str, max_len: int) -> str:
    if value is None:
        return ''
    if not isinstance(value, str):
        raise InvalidInput(key, 'must be a string')
    if len(value) > max_len:
        raise InvalidInput(key, f'must be at most {max_len} characters')
    if has_bad_chars(value):
        raise InvalidInput(key, 'must not contain control characters or invalid Unicode')
    return value


def _sub_id(value: Any) -> int | None:
    if value is None or value == '':
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 10:
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_DB_INT:
        raise InvalidInput('sub_id', f'must be a subscription id, a whole number from 1 to {MAX_DB_INT}')
    return value


class _DeadLetterResource(AdminResource):
    def __init__(self, parts: AdminParts) -> None:
        self._queues = parts.queue_admin

    def _filter(self, values: dict[str, Any]) -> DeadLetterFilter:
        """A filter from query parameters or a JSON body; each bad part is a 400 naming it."""
        topic = _text(values.get('topic'), 'topic', 200)
        if topic:
            topic = validate_pattern(topic)
        since, until = _time(values.get('since'), 'since'), _time(values.get('until'), 'until')
        return self._queues.dead_letter_filter(topic, _sub_id(values.get('sub_id')),
                                               _text(values.get('error'), 'error', MAX_ERROR_TEXT), since, until)

    def _body(self, req: falcon.Request, extra: set[str]) -> tuple[Body, DeadLetterFilter]:
        body = Body(req, {*_FILTER_FIELDS, *extra}, required=bool(extra))
        return body, self._filter(body.data)


class DeadLettersSearchResource(_DeadLetterResource):
    """GET /admin/dead-letters: a page of the dead letters matching a filter, newest first."""

    openapi = {'get': operation(
        'Search dead letters across every subscription (newest first, keyset pages)', tags=_T, errors=(400,),
        params=[query('topic', FILTER_SCHEMAS['topic'], 'A topic name or a pattern with * and **'),
                query('sub_id', FILTER_SCHEMAS['sub_id'], 'A subscription id'),
                query('error', FILTER_SCHEMAS['error'], 'Text the last error contains (case-insensitive)'),
                query('since', string(_MAX_TIME_TEXT), 'Dead-lettered at or after (ISO 8601 or UNIX seconds)'),
                query('until', string(_MAX_TIME_TEXT), 'Dead-lettered before (ISO 8601 or UNIX seconds)'),
                query('limit', integer(1, MAX_PAGE), f'Page size (default {DEFAULT_PAGE})'),
                query('before', integer(1, MAX_ID), 'The next_before of the previous page')],
        response={'dead_letters': arr(_LISTED), 'limit': INT, 'next_before': {'type': ['integer', 'null']}})}

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        f = self._filter({k: req.get_param(k) for k in _FILTER_FIELDS})
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_PAGE) or DEFAULT_PAGE
        before = req.get_param_as_int('before', min_value=1, max_value=MAX_ID)
        rows, next_before = self._queues.dead_letters.search(f, limit, before)
        resp.media = {'is_ok': True, 'dead_letters': rows, 'limit': limit, 'next_before': next_before}


class DeadLettersCountResource(_DeadLetterResource):
    """POST /admin/dead-letters/count: how many dead letters match a filter."""

    openapi = {'post': operation(
        'Count the dead letters matching a filter (for the confirmation of a bulk action)', tags=_T, errors=(400,),
        body=obj(FILTER_SCHEMAS),
        response={'count': INT, 'capped': {**BOOL, 'description': f'More than {COUNT_CAP} match: count is the cap'}})}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        _, f = self._body(req, set())
        count, capped = self._queues.dead_letters.count(f)
        resp.media = {'is_ok': True, 'count': count, 'capped': capped}


def _expected(body: Body) -> int:
    body.require('expected')
    return body.whole('expected', 0, COUNT_CAP) or 0


class DeadLettersRedriveResource(_DeadLetterResource):
    """POST /admin/dead-letters/redrive: re-drive every dead letter matching a filter."""

    openapi = {'post': operation(
        'Re-drive every dead letter matching a filter: back into its queue, delivery count reset', tags=_T,
        errors=(400, 409), body=_BULK_BODY,
        description='Refused with 409 when more letters match now than expected (the count the user confirmed). '
                    'Runs in batches, each in a transaction of its own.',
        response={'redriven': INT, 'expected': INT})}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body, f = self._body(req, {'expected'})
        expected = _expected(body)
        resp.media = {'is_ok': True, 'redriven': self._queues.dead_letters.redrive(f, expected),
                      'expected': expected}


class DeadLettersDeleteResource(_DeadLetterResource):
    """POST /admin/dead-letters/delete: delete every dead letter matching a filter."""

    openapi = {'post': operation(
        'Delete every dead letter matching a filter', tags=_T, errors=(400, 409), body=_BULK_BODY,
        description='Refused with 409 when more letters match now than expected (the count the user confirmed). '
                    'Runs in batches, each in a transaction of its own.',
        response={'deleted': INT, 'expected': INT})}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body, f = self._body(req, {'expected'})
        expected = _expected(body)
        resp.media = {'is_ok': True, 'deleted': self._queues.dead_letters.delete(f, expected), 'expected': expected}

