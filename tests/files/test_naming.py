"""Name templates of file transfer: ``runtime.files.naming``.

Values come from file names and messages, which anyone dropping a file or publishing controls: a
rendered name must stay below its directory whatever they hold, while spaces and non-ASCII letters,
which are valid in names, survive as they are.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from runtime.errors import ConfigError
from runtime.files.naming import (
    INBOUND_FIELDS,
    OUTBOUND_FIELDS,
    check_template,
    inbound_values,
    outbound_values,
    render,
    safe_part,
    time_values,
)

pytestmark = pytest.mark.unit

#: 2026-03-04 05:06:07 UTC
NOW = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()

HOSTILE = ['../../etc/passwd', '/abs', 'a\x00b', '..', '.', '', 'a\\..\\b', 'x/../../y', '\n', '.hidden',
           'tab\there', 'line\u2028sep', 'del\x7f', 'c1\x85', 'bad\udcffbyte']


@pytest.mark.parametrize('value', HOSTILE)
def test_safe_part_never_leaves_its_component(value: str) -> None:
    part = safe_part(value)
    assert part not in ('', '.', '..')
    assert not part.startswith('.')
    assert not any(c in part for c in '/\\\x00\n\t\x7f\x85\u2028\udcff')


def test_safe_part_keeps_what_is_valid_in_names() -> None:
    assert safe_part('Zoë Łódź invoice 2026.csv') == 'Zoë Łódź invoice 2026.csv'
    assert safe_part('  spaced  ') == '  spaced  '
    assert safe_part('請求書.csv') == '請求書.csv'
    assert safe_part('a.b.c') == 'a.b.c'
    assert safe_part('../x') == '_._x'
    assert safe_part('a\x00b') == 'a_b'
    # Inside a component a leading dot is harmless and kept.
    assert safe_part('.csv', leading=False) == '.csv'


@pytest.mark.parametrize('value', HOSTILE)
@pytest.mark.parametrize('template', ['processed/{date}/{name}', '{name}', 'x{name}', '{name}.{name}', '.{name}',
                                      'a/{name}{name}/b', '{stem}{suffix}'])
def test_rendered_paths_stay_below_their_directory(template: str, value: str) -> None:
    values = {'name': value, 'date': '2026-03-04', 'stem': value, 'suffix': value}
    path = render(template, values, 'channel x: move_to')
    assert not path.startswith('/')
    parts = path.split('/')
    assert all(p not in ('', '.', '..') for p in parts)
    assert len(parts) == template.count('/') + 1
    assert '\x00' not in path and '\\' not in path


def test_absolute_only_when_the_template_is() -> None:
    assert render('/archive/{name}', {'name': '/etc/passwd'}, 'w') == '/archive/_etc_passwd'
    assert render('{name}', {'name': '/etc/passwd'}, 'w') == '_etc_passwd'


def test_names_with_spaces_and_non_ascii_survive() -> None:
    values = inbound_values('sub dir/Faktura nr 7 — Łódź.csv', 'invoices', NOW)
    assert render('processed/{date}/{name}', values, 'w') == 'processed/2026-03-04/Faktura nr 7 — Łódź.csv'
    assert render('{stem} ({channel}){suffix}', values, 'w') == 'Faktura nr 7 — Łódź (invoices).csv'


def test_inbound_values() -> None:
    assert inbound_values('a/b/data.tar.gz', 'ch', NOW) == {
        'name': 'data.tar.gz', 'stem': 'data.tar', 'suffix': '.gz', 'channel': 'ch',
        'date': '2026-03-04', 'time': '050607', 'year': '2026', 'month': '03', 'day': '04'}
    values = inbound_values('README', 'ch', NOW)
    assert (values['stem'], values['suffix']) == ('README', '')
    assert render('{stem}{suffix}', values, 'w') == 'README'
    values = inbound_values('.profile', 'ch', NOW)
    assert (values['stem'], values['suffix']) == ('.profile', '')
    assert render('done/{name}', values, 'w') == 'done/_profile'
    assert set(values) == set(INBOUND_FIELDS)


def test_outbound_values() -> None:
    values = outbound_values('payroll.paid', 'msg-1', 'jsonl', 7, NOW)
    assert set(values) == set(OUTBOUND_FIELDS)
    assert render('{topic}-{date}-{msg_id}.{ext}', values, 'w') == 'payroll.paid-2026-03-04-msg-1.jsonl'
    assert render('{date}/{time}-{seq}.{ext}', values, 'w') == '2026-03-04/050607-7.jsonl'


def test_time_values_are_utc() -> None:
    assert time_values(0) == {'date': '1970-01-01', 'time': '000000', 'year': '1970', 'month': '01', 'day': '01'}


def test_braces_can_be_written() -> None:
    assert render('{{literal}}-{name}', {'name': 'a'}, 'w') == '{literal}-a'


def test_a_literal_dot_and_a_dot_value_make_no_dot_component() -> None:
    assert render('.{name}/x', {'name': '.'}, 'w') == '__/x'
    assert render('a/.{name}', {'name': ''}, 'w') == 'a/_'


def test_unknown_field_is_a_config_error_naming_where() -> None:
    with pytest.raises(ConfigError) as info:
        render('{name}-{nope}', {'name': 'a'}, 'file channel invoices: move_to')
    assert info.value.where == 'file channel invoices: move_to'
    assert '{nope}' in str(info.value)


@pytest.mark.parametrize('template', ['processed/{date}/{name}', '/var/archive/{year}/{month}/{name}', '{name}',
                                      '{stem}-{time}{suffix}', '.archive/{name}', 'done/{{x}}{name}'])
def test_check_template_accepts(template: str) -> None:
    check_template(template, INBOUND_FIELDS, 'w')


@pytest.mark.parametrize('template, problem', [
    ('', 'empty'),
    ('{topic}', 'unknown field {topic}'),
    ('../{name}', "'..'"),
    ('a/../{name}', "'..'"),
    ('./{name}', "'.'"),
    ('a//{name}', 'empty'),
    ('{name}/', 'empty'),
    ('/', 'empty'),
    ('{date:%Y}', 'format'),
    ('{name!r}', 'conversion'),
    ('{}', 'plain name'),
    ('{0}', 'plain name'),
    ('{name.__class__}', 'plain name'),
    ('{name[0]}', 'plain name'),
    ('{name', 'malformed'),
    ('name}', 'malformed'),
    ('a\x00{name}', 'control character'),
    ('a\n{name}', 'control character'),
])
def test_check_template_refuses(template: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_template(template, INBOUND_FIELDS, 'file channel x: move_to')
    assert info.value.where == 'file channel x: move_to'
    assert problem in str(info.value)
    # render refuses the same templates given the values of the allowed fields.
    with pytest.raises(ConfigError):
        render(template, dict.fromkeys(INBOUND_FIELDS, 'v'), 'w')
