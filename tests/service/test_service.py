"""The ``Service`` class (input, response, hooks, configuration), run in-process through the invoker.

Every test uses ``runtime_factory`` (a started runtime on a temporary SQLite database): the
invoker, the store and the hooks are the real ones, only HTTP is left out. REST dispatch is
exercised by passing an ``HttpInfo`` to ``Invoker.run``, as the channel sink does.
"""

from __future__ import annotations

import logging
import types
from datetime import UTC, datetime

import pytest

from runtime.errors import InvalidInput, InvalidOutput, InvalidService, MethodNotAllowed, RequestRejected
from runtime.service import HttpInfo, Service
from runtime.service.base import derive_name
from runtime.service.invoke import CHANNEL_INVOKE, CHANNEL_REST
from tests.recorder import Recorder

# What services under test saw or did goes, in order, to the test's recorder ('events'): each test
# deploys them bound to it (recorder.bind).


class Counter(Service):
    """Keeps a count on the instance: a fresh instance per call must always start from zero."""

    name = 'svc.counter'
    recorder: Recorder

    def handle(self) -> None:
        self.count = getattr(self, 'count', 0) + 1
        self.recorder.add('events', id(self))
        self.response.payload = {'count': self.count}


class Describe(Service):
    """Answers what the invoker set on the instance."""

    name = 'svc.describe'

    def handle(self) -> None:
        self.response.payload = {'cid': self.cid, 'channel': self.channel, 'time': self.invocation_time,
                                 'name': self.name, 'payload': self.request.payload}


class WithInput(Service):
    """Declares two required input fields and an optional one."""

    name = 'svc.with-input'
    recorder: Recorder
    input = 'name', 'email', '-phone'

    def handle(self) -> None:
        self.response.payload = dict(self.request.input)
        self.recorder.add('events', self.request.input.email)  # attribute access works too


class WithOutput(Service):
    """Declares a required and an optional output field; the payload says which ones to set."""

    name = 'svc.with-output'
    output = 'customer_id', '-note'

    def handle(self) -> None:
        self.response.payload = self.request.payload


class Picky(Service):
    """Accepts only requests with ok=True."""

    name = 'svc.picky'
    recorder: Recorder

    def accept(self) -> bool:
        return bool(self.request.payload and self.request.payload.get('ok'))

    def handle(self) -> None:
        self.recorder.add('events', 'handle')
        self.response.payload = 'accepted'


class Hooked(Service):
    """Records its hooks; the payload names the steps that raise."""

    name = 'svc.hooked'
    recorder: Recorder

    def _step(self, step: str) -> None:
        self.recorder.add('events', step)
        if step in (self.request.payload or {}).get('fail', ()):
            raise RuntimeError(f'{step} failed on purpose')

    def before_handle(self) -> None:
        self._step('before_handle')

    def handle(self) -> None:
        self._step('handle')
        self.response.payload = 'done'

    def after_handle(self) -> None:
        self._step('after_handle')

    def finalize_handle(self) -> None:
        self._step('finalize_handle')


class ByVerb(Service):
    """Implements GET and POST only."""

    name = 'svc.by-verb'

    def handle_GET(self) -> None:
        self.response.payload = {'verb': 'GET', 'input': dict(self.request.input)}

    def handle_POST(self) -> None:
        self.response.payload = {'verb': 'POST', 'input': dict(self.request.input)}


class VerbAndHandle(Service):
    """Implements GET and a general handle() for everything else."""

    name = 'svc.verb-and-handle'

    def handle_GET(self) -> None:
        self.response.payload = 'GET'

    def handle(self) -> None:
        self.response.payload = 'handle'


class CreateCustomerRecord(Service):
    """No explicit name: it is derived from the module and the class."""

    def handle(self) -> None:
        self.response.payload = self.name


# A fresh instance per call


def test_every_call_gets_a_fresh_instance(runtime_factory, recorder):
    counter = recorder.bind(Counter)
    rt = runtime_factory(counter)
    assert rt.invoke('svc.counter') == {'count': 1}
    assert rt.invoke('svc.counter') == {'count': 1}
    first, second = (rt.invoker.run(counter) for _ in range(2))
    assert first is not second
    assert not hasattr(counter, 'count') and not hasattr(Counter, 'count')


def test_cid_channel_and_invocation_time_are_set(runtime_factory):
    rt = runtime_factory(Describe)
    before = datetime.now(UTC)
    seen = rt.invoke('svc.describe', {'a': 1})
    after = datetime.now(UTC)
    assert seen['channel'] == CHANNEL_INVOKE
    assert seen['name'] == 'svc.describe'
    assert seen['payload'] == {'a': 1}
    assert isinstance(seen['cid'], str) and len(seen['cid']) == 24
    assert seen['time'].tzinfo is not None and before <= seen['time'] <= after
    assert rt.invoke('svc.describe')['cid'] != seen['cid']


def test_run_uses_the_given_cid_channel_and_raw_request(runtime_factory):
    rt = runtime_factory(Describe)
    svc = rt.invoker.run(Describe, {'a': 1}, channel='scheduler', cid='my-cid', raw_request=b'{"a": 1}')
    assert (svc.cid, svc.channel) == ('my-cid', 'scheduler')
    assert svc.request.raw_request == b'{"a": 1}'
    assert rt.invoker.run(Describe, {'a': 1}).request.raw_request == {'a': 1}


# Input and output declarations


def test_declared_input_fills_request_input(runtime_factory, recorder):
    rt = runtime_factory(recorder.bind(WithInput))
    payload = {'name': 'Ada', 'email': 'ada@example.com', 'phone': '123', 'extra': 'ignored'}
    assert rt.invoke('svc.with-input', payload) == {'name': 'Ada', 'email': 'ada@example.com', 'phone': '123'}
    assert recorder['events'] == ['ada@example.com']


def test_optional_input_may_be_missing(runtime_factory, recorder):
    rt = runtime_factory(recorder.bind(WithInput))
    assert rt.invoke('svc.with-input', {'name': 'Ada', 'email': 'a@x'}) == {
        'name': 'Ada', 'email': 'a@x', 'phone': None}


@pytest.mark.parametrize('payload', [
    {'name': 'Ada'},
    {'name': 'Ada', 'email': None},
    {'name': 'Ada', 'email': ''},
    {'name': '', 'email': 'a@x'},
])
def test_missing_required_input_names_the_field(runtime_factory, payload, recorder):
    rt = runtime_factory(recorder.bind(WithInput))
    missing = 'email' if payload.get('name') else 'name'
    with pytest.raises(InvalidInput) as info:
        rt.invoke('svc.with-input', payload)
    assert info.value.field == missing
    assert repr(missing) in str(info.value)
    assert recorder['events'] == []


@pytest.mark.parametrize('payload', [{}, {'phone': '123'}, {'name': None, 'email': ''}, None])
def test_every_missing_required_input_field_is_named(runtime_factory, payload, recorder):
    rt = runtime_factory(recorder.bind(WithInput))
    with pytest.raises(InvalidInput) as info:
        rt.invoke('svc.with-input', payload)
    assert info.value.fields == ('name', 'email')
    assert "input fields 'name', 'email' are required" in str(info.value)
    assert recorder['events'] == []


def test_required_input_needs_an_object_payload(runtime_factory, recorder):
    rt = runtime_factory(recorder.bind(WithInput))
    for payload in (None, ['name', 'email'], 'name=Ada'):
        with pytest.raises(InvalidInput) as info:
            rt.invoke('svc.with-input', payload)
        assert info.value.field == 'name'


def test_input_without_a_declaration_is_the_payload(runtime_factory):
    rt = runtime_factory(Describe)
    svc = rt.invoker.run(Describe, {'a': 1})
    assert svc.request.input == {'a': 1} and svc.request.input.a == 1
    assert rt.invoker.run(Describe, [1, 2]).request.input == {}


def test_output_with_its_required_field_passes(runtime_factory):
    rt = runtime_factory(WithOutput)
    assert rt.invoke('svc.with-output', {'customer_id': 7}) == {'customer_id': 7}


@pytest.mark.parametrize('payload', [{'note': 'no id'}, None, ['customer_id']])
def test_missing_required_output_names_the_field(runtime_factory, payload):
    rt = runtime_factory(WithOutput)
    with pytest.raises(InvalidOutput) as info:
        rt.invoke('svc.with-output', payload)
    assert (info.value.service, info.value.field) == ('svc.with-output', 'customer_id')
    assert "'customer_id'" in str(info.value)


# accept() and the hooks


def test_accept_false_rejects_the_request(runtime_factory, recorder):
    rt = runtime_factory(recorder.bind(Picky))
    with pytest.raises(RequestRejected) as info:
        rt.invoke('svc.picky', {'ok': False})
    assert info.value.service == 'svc.picky'
    assert recorder['events'] == []
    assert rt.invoke('svc.picky', {'ok': True}) == 'accepted'
    assert recorder['events'] == ['handle']


def test_hooks_run_in_order(runtime_factory, recorder):
    rt = runtime_factory(recorder.bind(Hooked))
    assert rt.invoke('svc.hooked', {}) == 'done'
    assert recorder['events'] == ['before_handle', 'handle', 'after_handle', 'finalize_handle']


@pytest.mark.parametrize('hook', ['before_handle', 'after_handle', 'finalize_handle'])
def test_a_failing_hook_is_logged_not_raised(runtime_factory, caplog, hook, recorder):
    rt = runtime_factory(recorder.bind(Hooked))
    with caplog.at_level(logging.ERROR):
        assert rt.invoke('svc.hooked', {'fail': [hook]}) == 'done'
    assert recorder['events'] == ['before_handle', 'handle', 'after_handle', 'finalize_handle']
    [record] = [r for r in caplog.records if r.exc_info]
    assert hook in record.getMessage() and 'svc.hooked' in record.getMessage()
    assert str(record.exc_info[1]) == f'{hook} failed on purpose'


def test_finalize_handle_runs_when_handle_raises(runtime_factory, recorder):
    rt = runtime_factory(recorder.bind(Hooked))
    with pytest.raises(RuntimeError, match='handle failed on purpose'):
        rt.invoke('svc.hooked', {'fail': ['handle']})
    assert recorder['events'] == ['before_handle', 'handle', 'finalize_handle']


def test_finalize_handle_runs_when_input_is_invalid(runtime_factory, recorder):
    class Strict(Hooked):
        name = 'svc.strict'
        input = 'needed',

    rt = runtime_factory(recorder.bind(Strict))
    with pytest.raises(InvalidInput):
        rt.invoke('svc.strict', {})
    assert recorder['events'] == ['finalize_handle']


# Dispatch by HTTP verb


def test_handle_verb_dispatch(runtime_factory):
    rt = runtime_factory(ByVerb)
    get = rt.invoker.run(ByVerb, None, channel=CHANNEL_REST,
                         http=HttpInfo(method='GET', params={'q': '1'}, path_params={'id': '7'}))
    assert get.response.payload == {'verb': 'GET', 'input': {'q': '1', 'id': '7'}}
    post = rt.invoker.run(ByVerb, {'q': '2'}, channel=CHANNEL_REST,
                          http=HttpInfo(method='POST', params={'q': '1'}))
    assert post.response.payload == {'verb': 'POST', 'input': {'q': '2'}}


def test_unimplemented_verb_is_not_allowed(runtime_factory):
    rt = runtime_factory(ByVerb)
    with pytest.raises(MethodNotAllowed) as info:
        rt.invoker.run(ByVerb, None, channel=CHANNEL_REST, http=HttpInfo(method='DELETE'))
    assert info.value.method == 'DELETE'
    assert info.value.allowed == ['GET', 'POST']
    with pytest.raises(MethodNotAllowed):
        rt.invoke('svc.by-verb')  # no HTTP method at all: no handler either


def test_handle_serves_the_verbs_without_their_own_handler(runtime_factory):
    rt = runtime_factory(VerbAndHandle)
    assert rt.invoker.run(VerbAndHandle, http=HttpInfo(method='GET')).response.payload == 'GET'
    assert rt.invoker.run(VerbAndHandle, http=HttpInfo(method='PUT')).response.payload == 'handle'
    assert rt.invoke('svc.verb-and-handle') == 'handle'


# Registration


def test_a_class_without_any_handler_is_rejected_at_registration(runtime_factory):
    class NoHandler(Service):
        name = 'svc.no-handler'

        def helper(self) -> None:
            pass

    rt = runtime_factory()
    with pytest.raises(InvalidService) as info:
        rt.deploy(NoHandler)
    assert 'NoHandler' in str(info.value) and 'handle' in info.value.reason
    assert not rt.store.has('svc.no-handler')


@pytest.mark.parametrize('spec', [5, ('ok', ''), ('ok', '-'), ('ok', 3)])
def test_a_bad_input_declaration_is_rejected_at_registration(runtime_factory, spec):
    cls = type('BadInput', (Service,), {'name': 'svc.bad-input', 'input': spec, 'handle': lambda self: None})
    rt = runtime_factory()
    with pytest.raises(InvalidService, match='input'):
        rt.deploy(cls)


def test_name_is_derived_from_module_and_class(runtime_factory):
    rt = runtime_factory(CreateCustomerRecord)
    assert rt.store.has('test_service.create-customer-record')
    assert rt.invoke('test_service.create-customer-record') == 'test_service.create-customer-record'


@pytest.mark.parametrize('class_name, expected', [
    ('CreateCustomer', 'crm.create-customer'),
    ('Ping', 'crm.ping'),
    ('HTTPGetter', 'crm.http-getter'),
    ('GetCustomerByID', 'crm.get-customer-by-id'),
    ('XMLHttpRequest', 'crm.xml-http-request'),
    ('Sync2Ledger', 'crm.sync2-ledger'),
])
def test_derive_name(class_name, expected):
    assert derive_name('crm', class_name) == expected


def _module(name: str, source: str) -> types.ModuleType:
    module = types.ModuleType(name)
    exec(compile(source, f'{name}.py', 'exec'), module.__dict__)
    return module


def test_module_deployment_skips_private_and_abstract_classes(runtime_factory):
    module = _module('billing', '''
from runtime import Service

class _Private(Service):
    def handle(self):
        pass

class Base(Service):
    __abstract__ = True

    def helper(self):
        return 'helped'

class OpenAccount(Base):
    def handle(self):
        self.response.payload = self.helper()
''')
    rt = runtime_factory(module)
    assert rt.store.names() == ['billing.open-account']
    assert rt.invoke('billing.open-account') == 'helped'
    assert rt.store.info('billing.open-account').module_name == 'billing'


def test_module_with_a_duplicate_name_is_rejected(runtime_factory):
    module = _module('dup', '''
from runtime import Service

class A(Service):
    name = 'dup.same'
    def handle(self):
        pass

class B(Service):
    name = 'dup.same'
    def handle(self):
        pass
''')
    rt = runtime_factory()
    with pytest.raises(InvalidService, match='dup.same'):
        rt.deploy(module)
    assert not rt.store.has('dup.same')
