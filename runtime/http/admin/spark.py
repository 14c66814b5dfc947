"""The admin API of Spark jobs, under /admin/spark.

- ``GET /admin/spark/jobs[?status=&pipeline=&limit=]``: jobs, newest first.
- ``POST /admin/spark/jobs {pipeline, args?, master?, conf?, timeout?, callback?}``: submit (201),
  answering at once with the job id.
- ``GET /admin/spark/jobs/{job_id}[?lines=n]``: one job with the tail of its driver's log.
- ``GET /admin/spark/jobs/{job_id}/log[?lines=n]``: the driver's log (the last n lines, default 200).
- ``POST /admin/spark/jobs/{job_id}/kill``: kill it, wherever it runs (recorded as killed).
- ``POST /admin/spark/jobs/{job_id}/wait[?timeout=s]``: answer once the job ended (or the time is up).
- ``GET /admin/spark/pipelines``: the pipelines that can be submitted.
"""

from __future__ import annotations

import falcon

from runtime.errors import BadRequest
from runtime.http.admin.base import AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT
from runtime.http.body import read_json
from runtime.http.openapi import INT, STR, arr, integer, obj, operation, query, string

#: Most log lines one request returns.
MAX_LOG_LINES = 100_000

#: Longest a wait request waits.
MAX_WAIT_SECS = 600.0

#: Keys a submission may have.
_SUBMIT_KEYS = {'pipeline', 'args', 'master', 'conf', 'timeout', 'callback'}


class _SparkResource(AdminResource):
    """A resource of Spark jobs: reads and kills through the admin; submit and wait through this worker's manager."""

    def __init__(self, parts: AdminParts) -> None:
        self._admin = parts.spark_admin
        self._spark = parts.spark


class SparkJobsResource(_SparkResource):
    """GET /admin/spark/jobs: jobs, newest first; POST: submit one."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit = req.get_param_as_int('limit', min_value=1, max_value=10000) or 50
        offset = req.get_param_as_int('offset', min_value=0, max_value=MAX_DB_INT) or 0
        jobs = self._admin.list(req.get_param('status'), req.get_param('pipeline'), limit, offset)
        resp.media = {'is_ok': True, 'jobs': jobs, 'limit': limit, 'offset': offset,
                      'next_offset': offset + limit if len(jobs) == limit else None}

    def on_post(self, req: falcon.Request, resp: falcon.Response) -> None:
        body = read_json(req)
        if not isinstance(body, dict):
            raise BadRequest('body must be a JSON object: {pipeline, args?, master?, conf?, timeout?, callback?}')
        unknown = sorted(set(body) - _SUBMIT_KEYS)
        if unknown:
            raise BadRequest(f'unknown key(s) in the submission: {", ".join(unknown)}')
        job_id = self._spark.submit(body.get('pipeline'), body.get('args'), master=body.get('master'),
                                    conf=body.get('conf'), timeout=body.get('timeout'),
                                    callback=body.get('callback') or '', service='admin', cid=req.context.cid)
        resp.status = falcon.HTTP_201
        resp.media = {'is_ok': True, 'job_id': job_id, 'job': self._admin.get(job_id, log_lines=0)}


class SparkJobResource(_SparkResource):
    """GET /admin/spark/jobs/{job_id}: one job with the tail of its log."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        lines = req.get_param_as_int('lines', min_value=0, max_value=MAX_LOG_LINES)
        resp.media = {'is_ok': True, 'job': self._admin.get(job_id, log_lines=lines)}


class SparkJobLogResource(_SparkResource):
    """GET /admin/spark/jobs/{job_id}/log: the last lines of the driver's log."""

    def on_get(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        lines = req.get_param_as_int('lines', min_value=1, max_value=MAX_LOG_LINES) or 200
        admin = self._admin
        job = admin.get(job_id, log_lines=0)
        resp.media = {'is_ok': True, 'job_id': job_id, 'status': job['status'], 'log_path': job['log_path'],
                      'lines': admin.log(job_id, lines, job['log_path'])}


class SparkJobKillResource(_SparkResource):
    """POST /admin/spark/jobs/{job_id}/kill."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        resp.media = {'is_ok': True, 'job': self._admin.kill(job_id, 'killed on request (admin API)')}


class SparkJobWaitResource(_SparkResource):
    """POST /admin/spark/jobs/{job_id}/wait: the job once it ended, or as it is at the timeout."""

    def on_post(self, req: falcon.Request, resp: falcon.Response, job_id: str) -> None:
        timeout = req.get_param_as_float('timeout', min_value=0.0, max_value=MAX_WAIT_SECS) or 60.0
        resp.media = {'is_ok': True, 'job': self._spark.wait(job_id, timeout)}


class SparkPipelinesResource(_SparkResource):
    """GET /admin/spark/pipelines: the pipelines that can be submitted."""

    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        admin = self._admin
        resp.media = {'is_ok': True, 'pipelines': admin.pipelines(), 'master': admin.settings.master,
                      'directory': str(admin.pipelines_dir)}


# OpenAPI operations of the resources above (read by runtime.http.openapi).

_SPARK_JOB = obj({'job_id': STR, 'pipeline': STR, 'status': STR}, required=['job_id', 'pipeline', 'status'],
                 additional=True)
_LINES = query('lines', integer(0, MAX_LOG_LINES), 'How many last lines of the log')
_WAIT = {'type': 'number', 'minimum': 0, 'maximum': MAX_WAIT_SECS}
_S = ['admin: spark']
SparkJobsResource.openapi = {
    'get': operation('Spark jobs, newest first', tags=_S, errors=(400,),
                     params=[query('status', string(16)), query('pipeline', string(200)),
                             query('limit', integer(1, 10000)), query('offset', integer(0, MAX_DB_INT))],
                     response={'jobs': arr(_SPARK_JOB), 'limit': INT, 'offset': INT,
                               'next_offset': {'type': ['integer', 'null']}}),
    'post': operation('Submit a pipeline job (answers at once with its id)', tags=_S, status=201,
                      errors=(400, 404, 503),
                      body=obj({'pipeline': string(200, 1), 'args': arr(STR), 'master': string(400),
                                'conf': obj(additional=STR), 'timeout': {'type': 'number', 'minimum': 0},
                                'callback': string(200)}, required=['pipeline']),
                      response={'job_id': STR, 'job': _SPARK_JOB}),
}
SparkJobResource.openapi = {'get': operation('A Spark job with the tail of its log', tags=_S, errors=(400, 404),
                                             params=[_LINES], response={'job': _SPARK_JOB})}
SparkJobLogResource.openapi = {'get': operation(
    "The last lines of a job's driver log", tags=_S, errors=(400, 404), params=[_LINES],
    response={'job_id': STR, 'status': STR, 'lines': arr(STR)})}
SparkJobKillResource.openapi = {'post': operation('Kill a job, wherever it runs', tags=_S, errors=(404,),
                                                  response={'job': _SPARK_JOB})}
SparkJobWaitResource.openapi = {'post': operation(
    'Wait for a job to end (or the timeout)', tags=_S, errors=(400, 404),
    params=[query('timeout', _WAIT, 'Seconds (default 60)')], response={'job': _SPARK_JOB})}
SparkPipelinesResource.openapi = {'get': operation('The pipelines that can be submitted', tags=_S, errors=(),
                                                   response={'pipelines': arr(STR), 'master': STR, 'directory': STR})}
