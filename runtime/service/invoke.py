"""Running services: one invocation, sync ``invoke`` and RAM-only ``invoke_async``.

``Invoker.run`` is the single place where a service instance is made and its hooks are called,
whatever the channel (REST, invoke, pub/sub, scheduler). It is on the hot path of every call, so
it does the least work it can: no locks, no copies of the payload, one instance per call.

Async invocations live only in this worker's memory: a restart loses them, by design. Use
``self.pubsub.publish`` for anything that must survive.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from time import perf_counter
from typing import TYPE_CHECKING, Any

import gevent

from runtime.errors import (
    InvalidInput,
    InvalidOutput,
    InvocationTimeout,
    MethodNotAllowed,
    RequestRejected,
    SelfInvocation,
)
from runtime.service.base import Bunch, HttpInfo, Request, Response, Service
from runtime.service.context import CHANNEL_CALLBACK as CHANNEL_CALLBACK
from runtime.service.context import CHANNEL_INVOKE as CHANNEL_INVOKE
from runtime.service.context import CHANNEL_INVOKE_ASYNC as CHANNEL_INVOKE_ASYNC
from runtime.service.context import CHANNEL_REST as CHANNEL_REST
from runtime.service.context import ServiceContext
from runtime.service.context import new_cid as new_cid

if TYPE_CHECKING:
    from runtime.service.store import ServiceStore

_log = logging.getLogger(__name__)

#: Suffix of the service that receives async responses by convention.
ASYNC_CALLBACK_SUFFIX = '-async-callback'

#: How long a timed-out callee may take to unwind (its finally blocks, finalize_handle) once killed.
KILL_WAIT_SECS = 1.0

def _build_input(cls: type[Service], payload: Any) -> Bunch:
    required, optional = cls._required_input, cls._optional_input
    if not required and not optional:
        return Bunch(payload) if isinstance(payload, dict) else Bunch()
    if not isinstance(payload, dict):
        if required:
            raise InvalidInput(required, f"{'is' if len(required) == 1 else 'are'} required "
                                         '(the request is not a JSON object)')
        return Bunch.fromkeys(optional)
    result = Bunch()
    # Every missing field at once: a client fixing them one request at a time would need as many tries.
    missing = [field for field in required if payload.get(field) is None or payload.get(field) == '']
    if missing:
        raise InvalidInput(missing)
    for field in required:
        result[field] = payload[field]
    for field in optional:
        result[field] = payload.get(field)
    return result


def _call_hook(svc: Service, hook: str) -> None:
    try:
        getattr(svc, hook)()
    except Exception:
        _log.exception('%s of service %s failed (cid %s); ignored', hook, svc.name, svc.cid)


def _ignore_timing(service: str, secs: float) -> None:
    """The default Invoker.observe: timings go nowhere."""


class Invoker:
    """Makes service instances and runs them, in the caller's greenlet or in a new one."""

    def __init__(self, store: ServiceStore, spawn: Callable[..., gevent.Greenlet], *,
                 pubsub: Callable[[Service], Any], config: Mapping[str, Mapping[str, Any]],
                 observe: Callable[[str, float], None] | None = None,
                 spark: Callable[[], Any] | None = None,
                 spark_admin: Callable[[], Any] | None = None,
                 outcome: Callable[[str, float, bool], None] | None = None) -> None:
        #: The services this invoker runs.
        self.store = store
        self._spawn = spawn
        #: Called with (service name, seconds) after every run, failed ones too (the runtime's metrics).
        self.observe: Callable[[str, float], None] = observe or _ignore_timing
        #: Called with (service name, seconds, whether it succeeded) after every run (the runtime's statistics).
        self.outcome = outcome
        #: What every service this invoker runs may use of the runtime (svc._context). spark and spark_admin
        #: are getters: the Spark jobs are built after the invoker, as they run services.
        self.context = ServiceContext(self, spawn, pubsub, config, spark, spark_admin)

    def run(self, cls: type[Service], payload: Any = None, *, channel: str = CHANNEL_INVOKE,
            cid: str | None = None, raw_request: Any = None, http: HttpInfo | None = None) -> Service:
        """Run one invocation of cls and return the finished instance (with its response)."""
        started = perf_counter()
        svc = cls()
        svc.cid = cid or new_cid()
        svc.channel = channel
        svc.invocation_time = datetime.now(UTC)
        svc._context = self.context
        request = svc.request = Request(payload, raw_request, http)
        svc.response = Response()
        ok = False
        try:
            if http is None:
                request.input = _build_input(cls, payload)
            else:
                # Over REST, input comes from the query string, the body and the path, later ones winning.
                source = dict(http.params)
                if isinstance(payload, dict):
                    source.update(payload)
                source.update(http.path_params)
                try:
                    request.input = _build_input(cls, source)
                except InvalidInput as e:
                    if payload is None or isinstance(payload, dict):
                        raise
                    # A text or list body is not merged; say so, as the field may be in it.
                    verb = 'is' if len(e.fields) == 1 else 'are'
                    raise InvalidInput(e.fields, f'{verb} required (the request body is not a JSON object, so only '
                                                 'the query string and the path were read)') from None
            if not svc.accept():
                raise RequestRejected(cls.name)
            hooks = cls._hooks  # only the hooks the class overrides: the others are no-ops
            if 'before_handle' in hooks:
                _call_hook(svc, 'before_handle')
            is_job = channel == 'scheduler'
            if is_job and 'before_job' in hooks:
                _call_hook(svc, 'before_job')
            method = http.method if http is not None else ''
            if method in cls._verbs:
                getattr(svc, f'handle_{method}')()
            elif cls._has_handle:
                svc.handle()
            else:
                raise MethodNotAllowed(method or channel, sorted(cls._verbs))
            if cls._required_output:
                self._check_output(svc)
            if 'after_handle' in hooks:
                _call_hook(svc, 'after_handle')
            if is_job and 'after_job' in hooks:
                _call_hook(svc, 'after_job')
            ok = True
        finally:
            if 'finalize_handle' in cls._hooks:
                _call_hook(svc, 'finalize_handle')
            secs = perf_counter() - started
            self.observe(cls.name, secs)
            if self.outcome is not None:
                self.outcome(cls.name, secs, ok)
        return svc

    @staticmethod
    def _check_output(svc: Service) -> None:
        payload = svc.response.payload
        for field in svc._required_output:
            if not isinstance(payload, dict) or field not in payload:
                raise InvalidOutput(svc.name, field)

    def invoke(self, name_or_class: str | type[Service], payload: Any = None, timeout: float | None = None,
               caller: Service | None = None, channel: str = CHANNEL_INVOKE, cid: str | None = None) -> Any:
        """Invoke a service synchronously and return its response payload.

        The callee's exception propagates unchanged. With a timeout, the callee runs in its own
        greenlet, which is killed when the time is up, and InvocationTimeout is raised.
        """
        cls = self.store.get(name_or_class)
        if caller is not None and cls.name == caller.name:
            raise SelfInvocation(cls.name)
        if timeout is None:
            return self.run(cls, payload, channel=channel, cid=cid).response.payload
        return self._invoke_with_timeout(cls, payload, timeout, channel, cid)

    def _invoke_with_timeout(self, cls: type[Service], payload: Any, timeout: float, channel: str,
                             cid: str | None) -> Any:
        g = self._spawn(self._run_capturing, cls, payload, channel, cid, name=f'invoke:{cls.name}')
        try:
            g.join(timeout)
            timed_out = not g.ready()
        finally:
            # Time is up, or the caller itself is being killed: the callee must not outlive the wait.
            if not g.ready():
                g.kill(block=True, timeout=KILL_WAIT_SECS)
        if timed_out:
            raise InvocationTimeout(cls.name, timeout)
        outcome = g.value
        if isinstance(outcome, BaseException):  # killed from outside, e.g. by Spawner.stop
            raise outcome
        svc, error = outcome
        if error is not None:
            raise error  # the callee's own exception object, with its traceback
        return svc.response.payload

    def _run_capturing(self, cls: type[Service], payload: Any, channel: str,
                       cid: str | None) -> tuple[Service | None, Exception | None]:
        # The caller re-raises the error; letting it escape the greenlet would also log it as a crash.
        try:
            return self.run(cls, payload, channel=channel, cid=cid), None
        except Exception as e:
            return None, e

    def invoke_async(self, name_or_class: str | type[Service], payload: Any = None, callback: Any = None,
                     caller: Service | None = None, cid: str | None = None) -> str:
        """Invoke a service in a new greenlet; return its cid at once.

        When it ends, each callback service (a name, class or list of them; by default
        ``<name>-async-callback`` if deployed) is invoked with a dict of ``cid``, ``source``,
        ``target``, ``ok``, ``response`` and ``exception`` (the error text or None). Callbacks are
        looked up here, so an unknown one raises ServiceNotFound before anything runs.
        """
        cls = self.store.get(name_or_class)
        if caller is not None and cls.name == caller.name:
            raise SelfInvocation(cls.name)
        targets = self.callback_targets(cls.name, callback)  # an unknown callback fails here, in the caller
        cid = cid or new_cid()
        source = caller.name if caller is not None else None
        self._spawn(self._run_async, cls, payload, cid, source, targets, name=f'invoke-async:{cls.name}')
        return cid

    def _run_async(self, cls: type[Service], payload: Any, cid: str, source: str | None,
                   targets: list[str | type[Service]]) -> None:
        try:
            response = self.run(cls, payload, channel=CHANNEL_INVOKE_ASYNC, cid=cid).response.payload
            ok, error = True, None
        except gevent.GreenletExit:
            raise
        except Exception as e:
            _log.exception('async invocation of %s failed (cid %s)', cls.name, cid)
            response, ok, error = None, False, f'{type(e).__name__}: {e}'
        if not targets:
            return
        result = {'cid': cid, 'source': source, 'target': cls.name, 'ok': ok, 'response': response,
                  'exception': error}
        for target in targets:
            try:
                # A copy each, so that a callback changing its payload cannot change the next one's.
                self.run(self.store.get(target), dict(result), channel=CHANNEL_CALLBACK)
            except Exception:
                _log.exception('callback %s of async invocation %s failed', target, cid)

    def callback_targets(self, name: str, callback: Any) -> list[str | type[Service]]:
        """The callback services to call: explicit ones, else the by-convention one if deployed."""
        if callback is None:
            conventional = name + ASYNC_CALLBACK_SUFFIX
            return [conventional] if self.store.has(conventional) else []
        if isinstance(callback, (str, type)):
            callback = [callback]
        targets = list(callback) if isinstance(callback, Iterable) else [callback]
        for target in targets:
            self.store.get(target)  # fail early, in the caller, on an unknown callback
        return targets

