"""One place that turns exceptions into HTTP answers.

Every error body is ``{is_ok: false, cid, status, details}``. ``ConduitError`` subclasses map to
their ``http_status``; falcon's own errors keep theirs; anything else is a 500 whose body only
says where to look (the cid), while the traceback goes to the log.
"""

from __future__ import annotations

import logging
from typing import Any

import falcon

from runtime.errors import AccessDenied, ConduitError, MethodNotAllowed, TooManyRequests, TopicFull, Unauthorized

_log = logging.getLogger(__name__)


def envelope(req: falcon.Request, status: str, details: str) -> dict[str, Any]:
    """The body of an error answer."""
    return {'is_ok': False, 'cid': getattr(req.context, 'cid', None), 'status': status, 'details': details}


def handle_conduit_error(req: falcon.Request, resp: falcon.Response, ex: ConduitError, _params: Any) -> None:
    """Map a ConduitError to its status and a JSON body naming what is wrong."""
    status = falcon.code_to_http_status(ex.http_status)
    if isinstance(ex, TopicFull):
        # A full topic or queue is the publishers' doing, answered as designed: no server error.
        _log.warning('cid %s: %s %s refused: %s', req.context.cid, req.method, req.path, ex)
    elif ex.http_status >= 500:
        # An error raised because of another one (a service that raised) keeps that one's traceback.
        _log.error('cid %s: %s %s failed: %s', req.context.cid, req.method, req.path, ex,
                   exc_info=ex if ex.__cause__ is not None else None)
    resp.status = status
    resp.media = envelope(req, status, ex.details)
    if isinstance(ex, Unauthorized):
        resp.set_header('WWW-Authenticate', f'Basic realm="{ex.realm}"')
        req.context.auth_failed = True  # counted by the sign-in throttle (runtime.http.auth)
    elif isinstance(ex, AccessDenied):
        # A 401 carries a challenge; the credentials were right, so this is no failed sign-in.
        resp.set_header('WWW-Authenticate', f'Basic realm="{ex.realm}"')
    elif isinstance(ex, TooManyRequests):
        resp.set_header('Retry-After', str(ex.retry_after_secs))
    elif isinstance(ex, MethodNotAllowed) and ex.allowed:
        resp.set_header('Allow', ', '.join(ex.allowed))


def handle_unexpected(req: falcon.Request, resp: falcon.Response, ex: Exception, _params: Any) -> None:
    """Log an unexpected exception with its cid and answer 500 without details of it."""
    _log.error('cid %s: %s %s failed', req.context.cid, req.method, req.path, exc_info=ex)
    status = falcon.code_to_http_status(500)
    resp.status = status
    resp.media = envelope(req, status, f'internal error; the server log has the details under cid '
                                       f'{req.context.cid}')


def serialize_http_error(req: falcon.Request, resp: falcon.Response, ex: falcon.HTTPError) -> None:
    """Falcon's own errors (bad routes, bad media) in the same envelope."""
    status = falcon.code_to_http_status(ex.status)
    resp.content_type = falcon.MEDIA_JSON
    resp.media = envelope(req, status, ex.description or ex.title or status)


def install(app: falcon.App) -> None:
    """Register the handlers on an app."""
    app.add_error_handler(Exception, handle_unexpected)
    app.add_error_handler(ConduitError, handle_conduit_error)
    app.set_error_serializer(serialize_http_error)
