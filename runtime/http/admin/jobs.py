"""The admin API of the scheduler, under /admin/jobs.

- ``GET /admin/jobs`` every job, with its next run and last run; ``POST`` creates one (201).
- ``GET|PATCH|DELETE /admin/jobs/{name}``: one job; PATCH changes the attributes given.
- ``POST /admin/jobs/{name}/pause``, ``/resume``: stop and restart firing (firings due while a
  job is paused are not made up).
- ``POST /admin/jobs/{name}/run[?wait=true&timeout=s]``: run now, in the worker that got the
  request; with wait, answer once the run ended (or the timeout passed).
- ``GET /admin/jobs/{name}/runs[?limit=n]``: the run history, newest first.

Changes take effect at once on every worker (they share the database and the sync key).
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.errors import BadRequest, InvalidInput
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import PAGE_PARAMS, has_bad_chars, page
from runtime.http.body import read_json
from runtime.http.openapi import ANY, BOOL, INT, STR, arr, integer, obj, operation, query, string

#: Longest a run-now request waits for the run to end.
MAX_WAIT_SECS = 300.0

#: Longest search text of the job list.
MAX_SEARCH = 200


def _object_body(req: falcon.Request) -> dict[str, Any]:
    body = read_json(req)
    if not isinstance(body, dict):
        raise BadRequest('body must be a JSON object of job attributes')
    return body


class _JobResource(AdminResource):
    """A resource of the scheduler: its jobs' administration, and the scheduler itself (run now)."""

    def __init__(self, parts: AdminParts) -> None:
        self._jobs = parts.job_admin
        self._scheduler = parts.scheduler


class JobsResource(_JobResource):
    """GET /admin/jobs: every job, or a page of them (limit, offset, search); POST: create one."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        search = req.get_param('search') or ''
        if len(search) > MAX_SEARCH or has_bad_chars(search):
            raise InvalidInput('search', f'must be at most {MAX_SEARCH} printable characters')
        if req.get_param('limit') is None and req.get_param('offset') is None and not search:
            resp.media = {'is_ok': True, 'jobs': self._jobs.list()}
            return
        limit, offset = page(req)
        total, jobs = self._jobs.page(search.strip(), limit, offset)
        resp.media = {'is_ok': True, 'jobs': jobs, 'total': total, 'limit': limit, 'offset': offset,
                      'next_offset': offset + limit if offset + limit < total else None}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        job = self._jobs.create(_object_body(req))
        resp.status = falcon.HTTP_201
        resp.media = {'is_ok': True, 'job': job}


class JobResource(_JobResource):
    """GET /admin/jobs/{name}: one job; PATCH: change it; DELETE: delete it with its history."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'job': self._jobs.get(name)}

    def on_patch(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'job': self._jobs.update(name, _object_body(req))}

    def on_delete(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        self._jobs.delete(name)
        resp.media = {'is_ok': True, 'deleted': name}


class JobPauseResource(_JobResource):
    """POST /admin/jobs/{name}/pause."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'job': self._jobs.set_active(name, False)}


class JobResumeResource(_JobResource):
    """POST /admin/jobs/{name}/resume."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        resp.media = {'is_ok': True, 'job': self._jobs.set_active(name, True)}


class JobRunResource(_JobResource):
    """POST /admin/jobs/{name}/run: run the job now."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        wait = req.get_param_as_bool('wait') or False
        timeout = req.get_param_as_float('timeout', min_value=0.0, max_value=MAX_WAIT_SECS) or 30.0
        run_id, greenlet = self._scheduler.run_now(name)
        if wait:
            greenlet.join(timeout)
        resp.media = {'is_ok': True, 'run': self._jobs.run(run_id)}


class JobRunsResource(_JobResource):
    """GET /admin/jobs/{name}/runs: the latest runs, newest first."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, name: str) -> None:
        limit = req.get_param_as_int('limit', min_value=1, max_value=10000) or 50
        resp.media = {'is_ok': True, 'runs': self._jobs.runs(name, limit)}


# OpenAPI operations of the resources above (read by runtime.http.openapi).

_NUM0 = {'type': 'number', 'minimum': 0}
_JOB_FIELDS = {
    'name': string(200, 1), 'service': string(200, 1),
    'job_type': {'enum': ['one_time', 'interval_based', 'cron_style']},
    'start_date': string(64, description='ISO 8601, in timezone unless it has an offset'),
    'weeks': _NUM0, 'days': _NUM0, 'hours': _NUM0, 'minutes': _NUM0, 'seconds': _NUM0,
    'repeats': integer(0), 'cron_definition': string(200), 'timezone': string(64), 'extra': ANY,
    'is_active': BOOL, 'jitter': _NUM0, 'max_execution_time': _NUM0, 'on_success': string(200),
    'on_error': string(200), 'skip_if_running': BOOL, 'catch_up': BOOL,
}
_JOB = obj({'name': STR, 'service': STR, 'job_type': STR, 'schedule': STR,
            'next_run_time': {'type': ['string', 'null']}, 'run_count': INT, 'is_active': BOOL},
           required=['name', 'service', 'job_type'], additional=True)
_RUN = obj({'id': INT, 'kind': STR, 'outcome': STR, 'error': STR}, required=['id', 'outcome'], additional=True)
_J = ['admin: scheduler']
JobsResource.openapi = {
    'get': operation('List scheduler jobs with their next and last run', tags=_J, errors=(400,),
                     description='Every job by name; with limit, offset or search, a page of the jobs whose name '
                                 'or service contains search (case-insensitive), and how many match (total).',
                     params=[*PAGE_PARAMS, query('search', string(MAX_SEARCH), 'Text the name or service contains')],
                     response={'jobs': arr(_JOB), 'total': INT, 'limit': INT, 'offset': INT,
                               'next_offset': {'type': ['integer', 'null']}}),
    'post': operation('Create a scheduler job', tags=_J, status=201, errors=(400, 409),
                      body=obj(_JOB_FIELDS, required=['name', 'service', 'job_type']),
                      example={'name': 'nightly', 'service': 'conduit.ping', 'job_type': 'cron_style',
                               'cron_definition': '0 2 * * *'},
                      response={'job': _JOB}),
}
JobResource.openapi = {
    'get': operation('A scheduler job', tags=_J, errors=(404,), response={'job': _JOB}),
    'patch': operation('Change the attributes given (a changed schedule starts afresh)', tags=_J,
                       errors=(400, 404, 409), body=obj(_JOB_FIELDS), response={'job': _JOB}),
    'delete': operation('Delete a job with its run history', tags=_J, errors=(404,), response={'deleted': STR}),
}
JobPauseResource.openapi = {'post': operation('Pause a job', tags=_J, errors=(404,), response={'job': _JOB})}
JobResumeResource.openapi = {'post': operation('Resume a job', tags=_J, errors=(404,), response={'job': _JOB})}
JobRunResource.openapi = {'post': operation(
    'Run a job now, outside its schedule', tags=_J, errors=(404,),
    params=[query('wait', BOOL, 'Answer once the run ended'),
            query('timeout', {'type': 'number', 'minimum': 0, 'maximum': MAX_WAIT_SECS}, 'Seconds to wait')],
    response={'run': _RUN})}
JobRunsResource.openapi = {'get': operation(
    "A job's latest runs, newest first", tags=_J, errors=(404,),
    params=[query('limit', integer(1, 10000), 'How many (default 50)')], response={'runs': arr(_RUN)})}
