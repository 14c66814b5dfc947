"""``self.invoke`` and ``self.invoke_async``, run in-process.

Services record what happens to them in the test's recorder (``events``); background results
are awaited with ``runtime.testing.wait_until``, never with timing assertions.
"""

from __future__ import annotations

import logging
from typing import Any

import gevent
import pytest

from runtime.errors import InvocationTimeout, SelfInvocation, ServiceNotFound
from runtime.service import Service
from runtime.service.invoke import CHANNEL_CALLBACK, CHANNEL_INVOKE, CHANNEL_INVOKE_ASYNC
from runtime.testing import wait_until
from tests.recorder import Recorder

# The services below are deployed bound to the test's recorder (recorder.bind): what they saw or
# did goes, in order, to 'events', and every exception object Failing raised to 'raised'.


class CalleeError(Exception):
    """Raised by the failing callee; the tests check they get this very object back."""


class Echo(Service):
    """Answers its payload, wrapped."""

    name = 'inv.echo'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', ('echo', self.channel, self.cid, self.request.payload))
        self.response.payload = {'echo': self.request.payload}


class Failing(Service):
    """Raises a fresh CalleeError."""

    name = 'inv.failing'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', ('failing', self.channel, self.cid))
        error = CalleeError(f'failed on {self.request.payload!r}')
        self.recorder.add('raised', error)
        raise error


class Slow(Service):
    """Sleeps for payload['sleep'] seconds; records start, end and finalization."""

    name = 'inv.slow'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', 'started')
        gevent.sleep(self.request.payload['sleep'])
        self.recorder.add('events', 'finished')
        self.response.payload = 'slept'

    def finalize_handle(self) -> None:
        self.recorder.add('events', 'finalized')


class Caller(Service):
    """Invokes payload['target'] (a name, or 'class:echo' for Echo by class) and answers the result."""

    name = 'inv.caller'
    recorder: Recorder

    def handle(self) -> None:
        p = self.request.payload
        target = self.recorder.bind(Echo) if p['target'] == 'class:echo' else p['target']
        try:
            self.response.payload = self.invoke(target, p.get('payload'), timeout=p.get('timeout'))
        except Exception as e:
            self.recorder.add('events', ('caught', e))
            raise


class Trigger(Service):
    """Invokes payload['target'] asynchronously, with payload['callback'] if given; answers the cid."""

    name = 'inv.trigger'

    def handle(self) -> None:
        p = self.request.payload
        kwargs = {'callback': p['callback']} if 'callback' in p else {}
        self.response.payload = self.invoke_async(p['target'], p.get('payload'), **kwargs)


class Callback1(Service):
    """Records what an async invocation reported."""

    name = 'inv.callback1'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', ('callback1', self.channel, self.request.payload))


class Callback2(Service):
    """A second callback, for lists."""

    name = 'inv.callback2'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', ('callback2', self.channel, self.request.payload))


class GreedyCallback(Service):
    """A callback that empties the dict it was given."""

    name = 'inv.greedy-callback'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', ('greedy', self.channel, dict(self.request.payload)))
        self.request.payload.clear()


class EchoConventionalCallback(Service):
    """Called by convention when inv.echo was invoked asynchronously without a callback."""

    name = 'inv.echo-async-callback'
    recorder: Recorder

    def handle(self) -> None:
        self.recorder.add('events', ('conventional', self.channel, self.request.payload))


ALL = (Echo, Failing, Slow, Caller, Trigger, Callback1, Callback2)


def _events(recorder: Recorder, kind: str) -> list[Any]:
    return [e for e in recorder['events'] if isinstance(e, tuple) and e[0] == kind]


# Synchronous invoke


def test_invoke_returns_the_callee_response(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    assert rt.invoke('inv.caller', {'target': 'inv.echo', 'payload': {'a': 1}}) == {'echo': {'a': 1}}
    [(_, channel, _, payload)] = _events(recorder, 'echo')
    assert (channel, payload) == (CHANNEL_INVOKE, {'a': 1})


def test_invoke_by_class(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    assert rt.invoke('inv.caller', {'target': 'class:echo', 'payload': 2}) == {'echo': 2}
    assert rt.invoke(recorder.bind(Echo), 3) == {'echo': 3}


@pytest.mark.parametrize('timeout', [None, 5.0])
def test_callee_exception_propagates_as_the_live_exception(runtime_factory, caplog, timeout, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with caplog.at_level(logging.ERROR), pytest.raises(CalleeError) as info:
        rt.invoke('inv.caller', {'target': 'inv.failing', 'payload': 'x', 'timeout': timeout})
    [raised] = recorder['raised']
    assert info.value is raised
    assert _events(recorder, 'caught') == [('caught', raised)]
    # The caller got it, so nothing may report it as an unhandled greenlet failure.
    assert not [r for r in caplog.records if 'greenlet' in r.getMessage()]


def test_invoking_oneself_is_an_error(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(SelfInvocation) as info:
        rt.invoke('inv.caller', {'target': 'inv.caller', 'payload': None})
    assert info.value.name == 'inv.caller'
    assert len(_events(recorder, 'caught')) == 1  # the caller ran once, and was not invoked a second time


def test_unknown_service_names_it(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(ServiceNotFound) as info:
        rt.invoke('inv.caller', {'target': 'inv.no-such-service'})
    assert info.value.name == 'inv.no-such-service'
    assert "'inv.no-such-service'" in str(info.value)


def test_unregistered_class_is_not_found(runtime_factory, recorder):
    rt = runtime_factory(recorder.bind(Echo))
    with pytest.raises(ServiceNotFound):
        rt.invoke(recorder.bind(Failing))


def test_invoke_with_a_timeout_returns_in_time(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    assert rt.invoke('inv.caller', {'target': 'inv.echo', 'payload': 1, 'timeout': 5.0}) == {'echo': 1}


def test_timeout_kills_the_callee_and_raises(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(InvocationTimeout) as info:
        rt.invoke('inv.caller', {'target': 'inv.slow', 'payload': {'sleep': 5}, 'timeout': 0.2})
    assert (info.value.name, info.value.timeout) == ('inv.slow', 0.2)
    # Killed, not abandoned: its finalize_handle has run already and it never finishes.
    assert recorder['events'][:2] == ['started', 'finalized']


def test_timed_out_callee_never_completes(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(InvocationTimeout):
        rt.invoke('inv.slow', {'sleep': 0.3}, timeout=0.05)
    gevent.sleep(0.6)  # well past the moment the callee would have finished
    assert 'finished' not in recorder['events']
    assert rt.spawner.running('invoke:') == []


def test_killing_the_caller_kills_a_callee_it_waits_for(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    waiting = gevent.spawn(rt.invoke, 'inv.slow', {'sleep': 0.3}, timeout=5)
    wait_until(lambda: 'started' in recorder['events'])
    waiting.kill()
    gevent.sleep(0.6)
    assert 'finished' not in recorder['events']
    assert 'finalized' in recorder['events']


def test_a_callee_stopped_with_the_runtime_stops_its_caller(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    waiting = gevent.spawn(rt.invoke, 'inv.slow', {'sleep': 5}, timeout=10)
    wait_until(lambda: 'started' in recorder['events'])
    rt.spawner.stop()
    waiting.join(1)
    assert waiting.ready()
    assert waiting.exception is None and isinstance(waiting.value, gevent.GreenletExit)


# invoke_async


def test_invoke_async_returns_the_cid_at_once(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    cid = rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': {'a': 1}})
    assert isinstance(cid, str) and cid
    assert _events(recorder, 'echo') == []  # nothing ran yet: the caller has not yielded
    wait_until(lambda: _events(recorder, 'echo'))
    assert _events(recorder, 'echo') == [('echo', CHANNEL_INVOKE_ASYNC, cid, {'a': 1})]


def test_invoke_async_calls_back_with_the_response(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    cid = rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': 5, 'callback': 'inv.callback1'})
    [(_, channel, payload)] = wait_until(lambda: _events(recorder, 'callback1'))
    assert channel == CHANNEL_CALLBACK
    assert payload == {'cid': cid, 'source': 'inv.trigger', 'target': 'inv.echo', 'ok': True,
                       'response': {'echo': 5}, 'exception': None}


def test_invoke_async_calls_back_with_the_failure(runtime_factory, caplog, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with caplog.at_level(logging.ERROR):
        cid = rt.invoke('inv.trigger', {'target': 'inv.failing', 'payload': 'y', 'callback': 'inv.callback1'})
        [(_, _, payload)] = wait_until(lambda: _events(recorder, 'callback1'))
    assert payload == {'cid': cid, 'source': 'inv.trigger', 'target': 'inv.failing', 'ok': False,
                       'response': None, 'exception': "CalleeError: failed on 'y'"}
    assert any(r.exc_info and r.exc_info[1] is recorder['raised'][0] for r in caplog.records)


def test_invoke_async_calls_every_callback_of_a_list(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    cid = rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': 1,
                                    'callback': ['inv.callback1', 'inv.callback2']})
    wait_until(lambda: _events(recorder, 'callback1') and _events(recorder, 'callback2'))
    expected = {'cid': cid, 'source': 'inv.trigger', 'target': 'inv.echo', 'ok': True,
                'response': {'echo': 1}, 'exception': None}
    assert [e[2] for e in _events(recorder, 'callback1') + _events(recorder, 'callback2')] == [expected, expected]


def test_each_callback_gets_its_own_payload(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL), recorder.bind(GreedyCallback))
    rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': 1,
                              'callback': ['inv.greedy-callback', 'inv.callback1']})
    [(_, _, seen)] = wait_until(lambda: _events(recorder, 'callback1'))
    assert seen == _events(recorder, 'greedy')[0][2]
    assert seen['response'] == {'echo': 1}


def test_invoke_async_without_a_callback_uses_the_conventional_one(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL), recorder.bind(EchoConventionalCallback))
    cid = rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': 1})
    [(_, channel, payload)] = wait_until(lambda: _events(recorder, 'conventional'))
    assert channel == CHANNEL_CALLBACK
    assert payload == {'cid': cid, 'source': 'inv.trigger', 'target': 'inv.echo', 'ok': True,
                       'response': {'echo': 1}, 'exception': None}


def test_an_explicit_callback_replaces_the_conventional_one(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL), recorder.bind(EchoConventionalCallback))
    rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': 1, 'callback': 'inv.callback1'})
    wait_until(lambda: _events(recorder, 'callback1'))
    gevent.sleep(0.05)
    assert _events(recorder, 'conventional') == []


def test_invoke_async_without_any_callback_just_runs(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': 1})
    wait_until(lambda: _events(recorder, 'echo'))
    wait_until(lambda: not rt.spawner.running('invoke-async:'), message='the async greenlet to end')


@pytest.mark.parametrize('callback', ['inv.no-such-callback', ['inv.callback1', 'inv.no-such-callback']])
def test_unknown_callback_fails_in_the_caller(runtime_factory, callback, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(ServiceNotFound) as info:
        rt.invoke('inv.trigger', {'target': 'inv.echo', 'payload': 1, 'callback': callback})
    assert info.value.name == 'inv.no-such-callback'
    gevent.sleep(0.05)
    assert _events(recorder, 'echo') == []  # nothing was started


def test_invoke_async_of_an_unknown_service_fails_in_the_caller(runtime_factory, recorder):
    rt = runtime_factory(*recorder.bind_all(ALL))
    with pytest.raises(ServiceNotFound) as info:
        rt.invoke('inv.trigger', {'target': 'inv.nothing'})
    assert info.value.name == 'inv.nothing'
