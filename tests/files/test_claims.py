"""Claim names: one format both ways, staleness by age or by a dead owner on this host, internal names."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from runtime.files import claims
from runtime.files.claims import Claim, claim_name, is_claim, is_internal, is_stale, parse_claim, this_owner

pytestmark = pytest.mark.unit


def test_owner_is_safe_and_names_this_process() -> None:
    owner = this_owner()
    assert owner.endswith(f'_{os.getpid()}')
    assert claims.re.fullmatch(r'[A-Za-z0-9_-]+', owner)


def test_hostile_host_names_are_made_safe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(claims.socket, 'gethostname', lambda: 'a.b/c d_e\x00' + 'x' * 300)
    owner = this_owner()
    assert claims.re.fullmatch(r'[A-Za-z0-9_-]+', owner)
    assert owner.startswith('a-b-c-d-e-')
    assert len(owner) <= claims.MAX_HOST_CHARS + 1 + len(str(os.getpid()))
    assert parse_claim(claim_name('f.csv', owner, 5)) == Claim('f.csv', owner, 5)


@pytest.mark.parametrize('name', ['a.csv', 'no suffix', 'Ünïcødé – файл.json', '.hidden', 'x.conduit-claim.y',
                                  'a.csv.conduit-claim.host_1.100', 'dir/sub/a.csv'])
def test_claim_names_round_trip(name: str) -> None:
    claimed = claim_name(name, 'host-1_42', 1700000000.9)
    assert claimed == f'{name}.conduit-claim.host-1_42.1700000000'
    assert parse_claim(claimed) == Claim(name, 'host-1_42', 1700000000)
    assert is_claim(claimed)


@pytest.mark.parametrize('owner', ['', 'a.b', 'a/b', 'a b', '../x'])
def test_bad_owners_are_refused(owner: str) -> None:
    with pytest.raises(ValueError):
        claim_name('a.csv', owner, 1)


@pytest.mark.parametrize('name', ['a.csv', 'a.csv.conduit-claim.', 'a.csv.conduit-claim.owner',
                                  'a.csv.conduit-claim.owner.', 'a.csv.conduit-claim.own.er.12',
                                  'a.csv.conduit-claim.owner.12x', '.conduit-claim.owner.12',
                                  'a.csv.conduit-claim.owner.12\n', 'a.csv.conduit-claim.ow/ner.1'])
def test_other_names_are_not_claims(name: str) -> None:
    assert parse_claim(name) is None
    assert not is_claim(name)


def test_claim_parts() -> None:
    claim = Claim('a', 'my-host_123', 1)
    assert (claim.host, claim.pid) == ('my-host', 123)
    assert Claim('a', 'nopid', 1).pid is None


def test_old_claims_are_stale() -> None:
    claim = Claim('a', 'elsewhere_1', 1000)
    assert not is_stale(claim, 1000 + 300, 300)
    assert is_stale(claim, 1000 + 301, 300)


def test_a_live_owner_on_this_host_keeps_its_claim() -> None:
    claim = Claim('a', this_owner(), 1000)
    assert not is_stale(claim, 1001, 300)


def test_a_dead_owner_on_this_host_loses_its_claim_at_once() -> None:
    child = subprocess.run([sys.executable, '-c', 'import os; print(os.getpid())'], capture_output=True, text=True,
                           check=True)
    dead_pid = int(child.stdout)
    claim = Claim('a', f'{claims.this_host()}_{dead_pid}', 1000)
    assert is_stale(claim, 1001, 300)


def test_a_dead_pid_on_another_host_waits_for_the_timeout() -> None:
    claim = Claim('a', f'{claims.this_host()}x_999999999', 1000)
    assert not is_stale(claim, 1001, 300)


@pytest.mark.parametrize('pid', ['0', '99999999999'])
def test_hostile_pids_do_not_break_staleness(pid: str) -> None:
    claim = Claim('a', f'{claims.this_host()}_{pid}', 1000)
    assert is_stale(claim, 1001, 300) is (pid != '0')


@pytest.mark.parametrize('name', ['a.csv.conduit-claim.h_1.5', '.a.csv.conduit-tmp-0a1b', 'a.csv.error.json',
                                  'sub/a.csv.error.json', 'sub/.x.conduit-tmp-1'])
def test_internal_names(name: str) -> None:
    assert is_internal(name)


@pytest.mark.parametrize('name', ['a.csv', 'error.json.csv', 'conduit-tmp', 'sub.conduit-claim.h_1.5/a.csv'])
def test_ordinary_names_are_not_internal(name: str) -> None:
    assert not is_internal(name)
