"""The pattern tester: ``GET /admin/pubsub/topic-matches?pattern=...``, which existing topics a pattern matches.

The same matching as subscriptions and ``pub=``/``sub=`` permissions use (``runtime.pubsub.topics``),
over the topics this worker knows, by name; paged (``limit``, ``offset``) with the ``total`` count.
"""

from __future__ import annotations

import falcon

from runtime.errors import InvalidInput
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT
from runtime.http.openapi import INT, STR, arr, integer, operation, query, string

#: Default and largest page.
DEFAULT_PAGE = 50
MAX_PAGE = 1000


class TopicMatchesResource(AdminResource):
    """GET /admin/pubsub/topic-matches: the topics a pattern matches, a page at a time."""

    openapi = {'get': operation(
        'Which existing topics a pattern matches (as subscriptions and pub=/sub= permissions match them)',
        tags=['admin: pub/sub'], errors=(400,),
        params=[query('pattern', string(200, 1), 'A topic name or pattern (*, **)', required=True),
                query('limit', integer(1, MAX_PAGE), f'Page size (default {DEFAULT_PAGE})'),
                query('offset', integer(0, MAX_DB_INT), 'Matching topics to skip')],
        response={'pattern': STR, 'total': INT, 'limit': INT, 'offset': INT, 'topics': arr(STR)})}

    def __init__(self, parts: AdminParts) -> None:
        self._topics = parts.topic_admin

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        pattern = req.get_param('pattern')
        if not pattern:
            raise InvalidInput('pattern', 'is required: a topic name or pattern such as orders.** or crm.*.created')
        if len(pattern) > 200:
            raise InvalidInput('pattern', 'must be at most 200 characters')
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_PAGE) or DEFAULT_PAGE
        offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
        total, names = self._topics.matches(pattern, limit, offset)
        resp.media = {'is_ok': True, 'pattern': pattern, 'total': total, 'limit': limit, 'offset': offset,
                      'topics': names}
