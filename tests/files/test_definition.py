"""FileChannelDef: what a file channel accepts, and every hostile value it refuses with the field named."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from runtime.errors import ConfigError
from runtime.files.definition import DEFAULT_RECORDS, FILE_CHANNELS_KEY, FileChannelDef

pytestmark = pytest.mark.unit

WHERE = 'objects.yaml [file_channel] invoices'

#: A real ed25519 public key line (its blob names its type, as a server's key does).
_BLOB = base64.b64encode(len(b'ssh-ed25519').to_bytes(4, 'big') + b'ssh-ed25519'
                         + (32).to_bytes(4, 'big') + bytes(range(32))).decode()
HOST_KEY = f'ssh-ed25519 {_BLOB} root@sftp'

LOCAL = {'name': 'invoices', 'directory': '/data/in', 'topics': ['invoice.received']}
SFTP = {**LOCAL, 'directory': 'upload/in', 'sftp_host': 'sftp.example.com', 'sftp_username': 'conduit',
        'sftp_private_key': '${CONDUIT_SECRET_SFTP_KEY}', 'sftp_host_key': HOST_KEY}


def make(**changes: Any) -> FileChannelDef:
    return FileChannelDef.from_values({**LOCAL, **changes}, WHERE)


def refused(values: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as info:
        FileChannelDef.from_values(values, WHERE)
    assert info.value.where == WHERE
    return info.value.reason


def test_the_sync_key_is_stable() -> None:
    assert FILE_CHANNELS_KEY == 'file_channels'


def test_defaults_of_a_minimal_local_channel() -> None:
    d = make()
    assert (d.name, d.directory, d.patterns, d.format, d.after, d.batch_size) == \
        ('invoices', '/data/in', ('*',), 'json', 'delete', 500)
    assert d.sftp is None and d.label == '/data/in' and d.is_active


@pytest.mark.parametrize('fmt', list(DEFAULT_RECORDS))
def test_record_mode_defaults_per_format(fmt: str) -> None:
    assert make(format=fmt).record_mode == DEFAULT_RECORDS[fmt]
    assert make(format=fmt, records='file').record_mode == 'file'


def test_values_round_trip_through_storage() -> None:
    d = FileChannelDef.from_values({**SFTP, 'patterns': ['*.csv', '*.CSV'], 'format': 'csv', 'csv_delimiter': ';',
                                    'service': 'crm.invoice.ingest', 'invoke_per': 'record',
                                    'after': 'move', 'move_to': 'done/{year}/{month}/{name}', 'is_active': False},
                                   WHERE)
    values = d.as_values()
    assert json.loads(json.dumps(values)) == values  # plain JSON
    assert values['patterns'] == ['*.csv', '*.CSV']
    stored = json.loads(d.stored())
    assert 'name' not in stored and 'is_active' not in stored
    again = FileChannelDef.from_stored('invoices', d.stored(), False)
    assert again == d
    assert FileChannelDef.from_values(values, WHERE) == d


def test_a_stored_definition_that_is_not_json_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="file channel 'x'"):
        FileChannelDef.from_stored('x', '{not json', True)
    with pytest.raises(ConfigError):
        FileChannelDef.from_stored('x', '[1, 2]', True)


def test_sftp_parameters_carry_references_only() -> None:
    d = FileChannelDef.from_values(SFTP, WHERE)
    assert d.label == 'sftp://conduit@sftp.example.com:22/upload/in'
    assert d.as_values()['sftp_private_key'] == '${CONDUIT_SECRET_SFTP_KEY}'
    assert d.sftp_host_key == HOST_KEY.rsplit(' ', 1)[0]  # the comment is dropped


def test_sftp_params_are_made_from_the_definition() -> None:
    d = FileChannelDef.from_values(SFTP, WHERE)
    params = d.sftp
    assert params is not None
    assert params.host == 'sftp.example.com' and params.private_key_ref == '${CONDUIT_SECRET_SFTP_KEY}'
    assert params.host_key == d.sftp_host_key and params.password_ref == ''


def test_a_single_string_is_taken_as_a_list_of_one() -> None:
    d = make(patterns='*.json', topics='a.b')
    assert d.patterns == ('*.json',) and d.topics == ('a.b',)


def test_a_service_alone_is_enough() -> None:
    assert make(topics=[], service='crm.ingest').service == 'crm.ingest'


def test_whole_floats_are_taken_as_whole_numbers() -> None:
    assert make(batch_size=100.0).batch_size == 100


@pytest.mark.parametrize(('changes', 'field'), [
    ({'colour': 'red'}, 'colour'),
    ({'name': ''}, 'name'),
    ({'name': 'a/b'}, 'name'),
    ({'name': ' padded'}, 'name'),
    ({'name': 'x' * 201}, 'name'),
    ({'name': 'bell\x07'}, 'name'),
    ({'name': 7}, 'name'),
    ({'directory': ''}, 'directory'),
    ({'directory': 'relative/in'}, 'directory'),
    ({'directory': '/data/../etc'}, 'directory'),
    ({'directory': '/data/in\x00'}, 'directory'),
    ({'directory': ['/data']}, 'directory'),
    ({'directory': 'C:\\in'}, 'directory'),
    ({'patterns': []}, 'patterns'),
    ({'patterns': ['']}, 'patterns'),
    ({'patterns': ['../*.csv']}, 'patterns'),
    ({'patterns': ['sub/*.csv']}, 'patterns'),
    ({'patterns': [3]}, 'patterns'),
    ({'patterns': {'a': 1}}, 'patterns'),
    ({'patterns': ['*'] * 101}, 'patterns'),
    ({'recursive': 'yes'}, 'recursive'),
    ({'recursive': 1}, 'recursive'),
    ({'poll_interval_secs': 0}, 'poll_interval_secs'),
    ({'poll_interval_secs': -5}, 'poll_interval_secs'),
    ({'poll_interval_secs': 0.01}, 'poll_interval_secs'),
    ({'poll_interval_secs': float('nan')}, 'poll_interval_secs'),
    ({'poll_interval_secs': float('inf')}, 'poll_interval_secs'),
    ({'poll_interval_secs': '5'}, 'poll_interval_secs'),
    ({'poll_interval_secs': True}, 'poll_interval_secs'),
    ({'complete_when': 'soon'}, 'complete_when'),
    ({'stable_polls': 0}, 'stable_polls'),
    ({'stable_polls': -1}, 'stable_polls'),
    ({'stable_polls': 1.5}, 'stable_polls'),
    ({'marker_suffix': ''}, 'marker_suffix'),
    ({'marker_suffix': '.'}, 'marker_suffix'),
    ({'marker_suffix': '/x'}, 'marker_suffix'),
    ({'format': 'xml'}, 'format'),
    ({'format': ['json']}, 'format'),
    ({'records': 'some'}, 'records'),
    ({'format': 'bytes', 'records': 'each'}, 'records'),
    ({'csv_delimiter': ''}, 'csv_delimiter'),
    ({'csv_delimiter': ';;'}, 'csv_delimiter'),
    ({'csv_delimiter': '"'}, 'csv_delimiter'),
    ({'csv_delimiter': '\n'}, 'csv_delimiter'),
    ({'csv_delimiter': 'a'}, 'csv_delimiter'),
    ({'csv_delimiter': '\x0b'}, 'csv_delimiter'),
    ({'csv_delimiter': '\x00'}, 'csv_delimiter'),
    ({'topics': ['invoice.*']}, 'topics'),
    ({'topics': ['**']}, 'topics'),
    ({'topics': ['a#b']}, 'topics'),
    ({'topics': [' padded']}, 'topics'),
    ({'topics': ['é']}, 'topics'),
    ({'topics': [None]}, 'topics'),
    ({'topics': ['a', 'A']}, 'topics'),
    ({'topics': 5}, 'topics'),
    ({'topics': ['t'] * 101}, 'topics'),
    ({'service': 5}, 'service'),
    ({'invoke_per': 'line'}, 'invoke_per'),
    ({'invoke_retries': -1}, 'invoke_retries'),
    ({'invoke_retries': 10 ** 9}, 'invoke_retries'),
    ({'invoke_retry_wait_secs': -0.5}, 'invoke_retry_wait_secs'),
    ({'batch_size': 0}, 'batch_size'),
    ({'batch_size': -10}, 'batch_size'),
    ({'batch_size': 10_001}, 'batch_size'),
    ({'batch_size': 10 ** 30}, 'batch_size'),
    ({'batch_size': '500'}, 'batch_size'),
    ({'max_parallel_files': 0}, 'max_parallel_files'),
    ({'max_parallel_files': 10_000}, 'max_parallel_files'),
    ({'after': 'shred'}, 'after'),
    ({'move_to': ''}, 'move_to'),
    ({'move_to': '../outside/{name}'}, 'move_to'),
    ({'move_to': 'done/../../{name}'}, 'move_to'),
    ({'move_to': 'done\\..\\{name}'}, 'move_to'),
    ({'move_to': 'done/'}, 'move_to'),
    ({'error_dir': ''}, 'error_dir'),
    ({'error_dir': '../errors'}, 'error_dir'),
    ({'error_dir': '.'}, 'error_dir'),
    ({'error_dir': 'errors/{date}'}, 'error_dir'),
    ({'reprocess_same': 'no'}, 'reprocess_same'),
    ({'is_active': None, 'reprocess_same': 0}, 'reprocess_same'),
    ({'sftp_port': 2222}, 'sftp_port'),
    ({'sftp_username': 'bob'}, 'sftp_username'),
    ({'sftp_password': '${CONDUIT_SECRET_X}'}, 'sftp_password'),
    ({'sftp_host_key': HOST_KEY}, 'sftp_host_key'),
    ({'sftp_known_hosts': '/etc/ssh/known'}, 'sftp_known_hosts'),
])
def test_hostile_values_are_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    assert repr(field) in refused({**LOCAL, **changes})


def test_topics_or_service_are_required() -> None:
    reason = refused({'name': 'x', 'directory': '/in'})
    assert 'topics' in reason and 'service' in reason
    refused({'name': 'x', 'directory': '/in', 'topics': [], 'service': ''})


def test_a_non_mapping_is_refused() -> None:
    with pytest.raises(ConfigError):
        FileChannelDef.from_values(['name', 'x'], WHERE)  # type: ignore[arg-type]


@pytest.mark.parametrize(('changes', 'field'), [
    ({'sftp_username': ''}, 'sftp_username'),
    ({'sftp_private_key': ''}, 'sftp_password'),
    ({'sftp_host_key': ''}, 'sftp_host_key'),
    ({'sftp_host_key': 'ssh-ed25519'}, 'sftp_host_key'),
    ({'sftp_host_key': 'ssh-dss AAAAB3NzaC1kc3M='}, 'sftp_host_key'),
    ({'sftp_host_key': 'ssh-ed25519 not!base64'}, 'sftp_host_key'),
    ({'sftp_host_key': 'ssh-rsa ' + _BLOB}, 'sftp_host_key'),  # the blob holds an ed25519 key
    ({'sftp_host_key': 'ssh-ed25519 AAAA'}, 'sftp_host_key'),
    ({'sftp_host_key': '', 'sftp_known_hosts': 'known_hosts'}, 'sftp_known_hosts'),
    ({'sftp_host': 'user@host'}, 'sftp_host'),
    ({'sftp_host': 'host/in'}, 'sftp_host'),
    ({'sftp_host': '-oProxyCommand=x'}, 'sftp_host'),
    ({'sftp_host': 'two words'}, 'sftp_host'),
    ({'sftp_port': 0}, 'sftp_port'),
    ({'sftp_port': 70_000}, 'sftp_port'),
    ({'sftp_port': '22'}, 'sftp_port'),
    ({'directory': 'in/../..'}, 'directory'),
])
def test_hostile_sftp_values_are_refused_naming_the_field(changes: dict[str, Any], field: str) -> None:
    assert repr(field) in refused({**SFTP, **changes})


def test_sftp_without_any_host_key_is_refused() -> None:
    reason = refused({**SFTP, 'sftp_host_key': ''})
    assert 'sftp_known_hosts' in reason and 'pinned' in reason


def test_known_hosts_stands_in_for_a_pinned_key() -> None:
    d = FileChannelDef.from_values({**SFTP, 'sftp_host_key': '', 'sftp_known_hosts': '/etc/conduit/known_hosts'},
                                   WHERE)
    assert d.sftp_known_hosts == '/etc/conduit/known_hosts'


@pytest.mark.parametrize('secret', ['hunter2', 'correct horse battery staple', '$CONDUIT_SECRET_X',
                                    '${DATABASE_PASSWORD}', '${HOME}'])
@pytest.mark.parametrize('field', ['sftp_password', 'sftp_private_key'])
def test_a_secret_in_clear_is_refused_and_never_quoted(field: str, secret: str) -> None:
    with pytest.raises(ConfigError) as info:
        FileChannelDef.from_values({**SFTP, field: secret}, WHERE)
    assert field in str(info.value)
    if not secret.startswith('${'):
        assert secret not in str(info.value)


def test_a_private_key_text_is_refused_and_never_quoted() -> None:
    key = '-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n'
    with pytest.raises(ConfigError) as info:
        FileChannelDef.from_values({**SFTP, 'sftp_private_key': key}, WHERE)
    assert 'b3BlbnNz' not in str(info.value) and 'sftp_private_key' in str(info.value)


def test_a_password_given_as_a_number_is_refused_and_never_quoted() -> None:
    with pytest.raises(ConfigError) as info:
        FileChannelDef.from_values({**SFTP, 'sftp_password': 123456789}, WHERE)
    assert '123456789' not in str(info.value)


def test_an_unknown_encoding_is_refused() -> None:
    with pytest.raises(ConfigError, match='encoding'):
        make(encoding='no-such-codec')
    assert make(encoding='latin-1').encoding == 'latin-1'


def test_a_move_template_with_an_unknown_field_is_refused() -> None:
    with pytest.raises(ConfigError, match='move_to'):
        make(after='move', move_to='done/{password}')
    assert make(after='move', move_to='/archive/{channel}/{date}/{stem}-{time}{suffix}').move_to.startswith('/')


def test_unknown_fields_are_all_named() -> None:
    reason = refused({**LOCAL, 'pasword': 'x', 'sftp_pass': 'y'})
    assert "'pasword'" in reason and "'sftp_pass'" in reason


def test_common_delimiters_are_accepted() -> None:
    assert [make(format='csv', csv_delimiter=d).csv_delimiter for d in (';', '\t', '|')] == [';', '\t', '|']


def test_a_flood_of_unknown_fields_is_named_briefly() -> None:
    reason = refused({**LOCAL, **{f'x{i}' * 50: 1 for i in range(100)}})
    assert len(reason) < 2000 and '...' in reason


def test_null_takes_the_default() -> None:
    assert make(batch_size=None, records=None).batch_size == 500
