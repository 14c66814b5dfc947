"""The admin API of runtime insight: workers, statistics, totals, deepest queues, service sources and users,
and the deployment history. Read-only; every read is made by ``runtime.insight.overview`` or ``runtime.deploy.history``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import falcon

from runtime.cluster.workers import STALE_FACTOR
from runtime.errors import ConduitError, InvalidInput
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT, has_bad_chars
from runtime.http.openapi import BOOL, INT, NUM, STR, TIME, arr, integer, obj, operation, query, string
from runtime.insight.overview import MAX_DEEPEST

if TYPE_CHECKING:
    from runtime.deploy.history import DeployHistory
    from runtime.insight.overview import Insight

#: Longest search string of the services' usage list.
MAX_SEARCH_CHARS = 200

#: Largest page of the services' usage list and of the deployment history.
MAX_PAGE = 200

#: Page size when none is asked for.
DEFAULT_PAGE = 50

#: Deepest queues listed when no limit is asked for.
DEFAULT_DEEPEST = 10


class InsightUnavailable(ConduitError):
    """This server was built without the insight reader (an embedded app)."""

    http_status = 503

    def __init__(self) -> None:
        super().__init__('runtime insight is not available in this server')


class _InsightResource(AdminResource):
    audited = False

    def __init__(self, parts: AdminParts) -> None:
        self._parts = parts

    @property
    def insight(self) -> Insight:
        if self._parts.insight is None:
            raise InsightUnavailable()
        return self._parts.insight

    @property
    def history(self) -> DeployHistory:
        if self._parts.deploy_history is None:
            raise InsightUnavailable()
        return self._parts.deploy_history


def _page(req: falcon.Request) -> tuple[int, int]:
    limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_PAGE) or DEFAULT_PAGE
    offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
    return limit, offset


def _text(req: falcon.Request, key: str, max_len: int = MAX_SEARCH_CHARS) -> str:
    value = req.get_param(key) or ''
    if len(value) > max_len or has_bad_chars(value):
        raise InvalidInput(key, f'must be at most {max_len} characters, without control characters')
    return value


class WorkersResource(_InsightResource):
    """GET /admin/workers: every registered worker, by server, with its heartbeat age and leases."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        insight = self.insight
        resp.media = {'is_ok': True, 'heartbeat_secs': insight.heartbeat_secs,
                      'stale_after_secs': STALE_FACTOR * insight.heartbeat_secs, 'workers': insight.workers()}


class RatesResource(_InsightResource):
    """GET /admin/stats/rates?since=: published, delivered, failed and dead-lettered per bucket, over workers."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        since = req.get_param_as_float('since', min_value=0, max_value=1e11)
        if since is not None and not math.isfinite(since):
            raise InvalidInput('since', 'must be UNIX seconds, a number from 0 to 1e11')
        resp.media = {'is_ok': True, **self.insight.rates(since)}


class ServiceStatsResource(_InsightResource):
    """GET /admin/stats/services?search=&limit=&offset=: deployed services with their usage in the last hour."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        search = _text(req, 'search')
        limit, offset = _page(req)
        total, services = self.insight.services(search, limit, offset)
        resp.media = {'is_ok': True, 'total': total, 'limit': limit, 'offset': offset, 'services': services}


class TotalsResource(_InsightResource):
    """GET /admin/stats/totals: services, topics, subscriptions, messages waiting and dead letters."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.media = {'is_ok': True, **self.insight.totals()}


class DeepestQueuesResource(_InsightResource):
    """GET /admin/queues/deepest?limit=: the subscriptions with the most queued messages."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit = req.get_param_as_int('limit', min_value=1, max_value=MAX_DEEPEST) or DEFAULT_DEEPEST
        resp.media = {'is_ok': True, 'queues': self.insight.deepest(limit)}


class ServiceSourceResource(_InsightResource):
    """GET /admin/services/{name}/source: the source of the module a deployed service comes from."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        info = self._parts.store.info(name)  # 404 naming the service
        source = self.history.source(info.module_name, info.source_file)
        resp.media = {'is_ok': True, 'name': name, 'module': info.module_name, **source}


class ServiceUsageResource(_InsightResource):
    """GET /admin/services/{name}/usage: what uses a deployed service, and its usage in the last hour."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self._parts.store.info(name)  # 404 naming the service
        insight = self.insight
        resp.media = {'is_ok': True, 'name': name, 'users': insight.service_users(name),
                      'stats': insight.service_usage(name)}


class DeploymentsResource(_InsightResource):
    """GET /admin/deployments?limit=&offset=&module=: recorded deployments and undeployments, newest first."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit, offset = _page(req)
        module = _text(req, 'module') or None
        total, entries = self.history.history(limit, offset, module)
        resp.media = {'is_ok': True, 'total': total, 'limit': limit, 'offset': offset, 'deployments': entries}


# OpenAPI operations of the resources above (read by runtime.http.openapi).

_T = ['admin: insight']
_PAGE = [query('limit', integer(1, MAX_PAGE), f'Page size (default {DEFAULT_PAGE})'),
         query('offset', integer(0, MAX_DB_INT), 'Rows to skip')]
_NULL_NUM: dict[str, Any] = {'type': ['number', 'null']}
_WORKER = obj({'id': STR, 'server': STR, 'host': STR, 'pid': INT, 'bind': STR, 'started_at': NUM,
               'heartbeat_at': NUM, 'heartbeat_age_secs': NUM, 'stale': BOOL, 'leases': INT,
               'lease_names': arr(STR)}, required=['id', 'server', 'heartbeat_age_secs', 'stale', 'leases'])
WorkersResource.openapi = {'get': operation(
    'Workers of every server, with heartbeat age and leases held', tags=_T, errors=(),
    description='A worker whose heartbeat is older than stale_after_secs is probably dead; its row is deleted '
                'after a while. lease_names lists the first leases only; leases counts them all.',
    response={'heartbeat_secs': NUM, 'stale_after_secs': NUM, 'workers': arr(_WORKER)})}
_BUCKET = obj({'bucket': INT, 'published': INT, 'delivered': INT, 'failed': INT, 'dead_lettered': INT,
               'published_per_sec': NUM, 'delivered_per_sec': NUM, 'failed_per_sec': NUM,
               'dead_lettered_per_sec': NUM}, required=['bucket'])
RatesResource.openapi = {'get': operation(
    'Published, delivered, failed and dead-lettered messages per time bucket, summed over workers', tags=_T,
    params=[query('since', {'type': 'number', 'minimum': 0, 'maximum': 1e11},
                  'UNIX seconds of the first bucket (default and earliest: one hour ago)')],
    response={'bucket_secs': INT, 'since': INT, 'until': INT, 'buckets': arr(_BUCKET)})}
_USAGE = {'invocations': INT, 'errors': INT, 'total_secs': NUM, 'mean_secs': _NULL_NUM, 'p99_secs': _NULL_NUM}
ServiceStatsResource.openapi = {'get': operation(
    'Deployed services with invocations, errors, mean and p99 time in the last hour (over every worker)', tags=_T,
    params=[query('search', string(MAX_SEARCH_CHARS), 'Part of the name, any case'), *_PAGE],
    response={'total': INT, 'limit': INT, 'offset': INT,
              'services': arr(obj({'name': STR, **_USAGE}, required=['name', 'invocations']))})}
TotalsResource.openapi = {'get': operation(
    'How many services, topics, subscriptions, messages waiting and dead letters there are', tags=_T, errors=(),
    description='Messages waiting and dead letters are exact up to 100,000; above, PostgreSQL gives its planner '
                'estimate (the *_estimated flag says so). Read at most every few seconds.',
    response={'services': INT, 'topics': INT, 'subscriptions': INT, 'messages_waiting': INT,
              'messages_waiting_estimated': BOOL, 'dead_letters': INT, 'dead_letters_estimated': BOOL})}
DeepestQueuesResource.openapi = {'get': operation(
    'The subscriptions with the most queued messages', tags=_T,
    params=[query('limit', integer(1, MAX_DEEPEST), f'How many (default {DEFAULT_DEEPEST})')],
    response={'queues': arr(obj({'sub_id': INT, 'depth': INT, 'pattern': STR, 'kind': STR, 'subscriber': STR,
                                 'is_active': BOOL, 'dead_letters': INT, 'oldest_message': {}},
                                required=['sub_id', 'depth']))})}
ServiceSourceResource.openapi = {'get': operation(
    "The source of a deployed service's module", tags=_T, errors=(404,),
    description='From its latest recorded deployment, else the file it was loaded from; cut at 256,000 characters '
                '(truncated says so). source is null when neither is readable.',
    response={'name': STR, 'module': STR, 'source': {'type': ['string', 'null']},
              'origin': {'type': ['string', 'null']}, 'truncated': BOOL, 'chars': INT})}
_NAMED = obj({'name': STR}, required=['name'], additional=True)
ServiceUsageResource.openapi = {'get': operation(
    'What uses a deployed service (channels, jobs, subscriptions, topic hooks, file channels) and its usage', tags=_T,
    errors=(404,),
    response={'name': STR, 'users': obj({'channels': arr(_NAMED), 'jobs': arr(_NAMED),
                                         'subscriptions': arr(obj({'id': INT}, additional=True)),
                                         'topic_hooks': arr(_NAMED), 'file_channels': arr(_NAMED)}),
              'stats': obj(_USAGE)})}
_DEPLOYMENT = obj({'id': INT, 'kind': STR, 'module': STR, 'file_name': STR, 'services': arr(STR), 'at': TIME,
                   'source_hash': STR, 'size': INT, 'actor': {'type': ['string', 'null']}, 'source': STR,
                   'ok': BOOL}, required=['id', 'kind', 'module', 'services', 'at'])
DeploymentsResource.openapi = {'get': operation(
    'Hot deployments and undeployments that took effect, newest first', tags=_T,
    description='actor and source (api, cli, dashboard) come from the audit entry of the request that made it; '
                "source 'directory' means a file dropped into a hot-deploy directory. Failed deployments are not "
                'recorded.',
    params=[*_PAGE, query('module', string(MAX_SEARCH_CHARS), 'Only this module')],
    response={'total': INT, 'limit': INT, 'offset': INT, 'deployments': arr(_DEPLOYMENT)})}
