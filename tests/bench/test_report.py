"""bench/run.py writes RESULTS.md without losing what is written by hand, and says when figures are of two runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import common, run

pytestmark = pytest.mark.unit


def _throughput(measured_at: str) -> dict:
    return {'measured_at': measured_at, 'rows': [{'broker': 'sqlite', 'publishers': 50, 'rates': [12_000.0]}]}


def _peers(measured_at: str) -> dict:
    return {'measured_at': measured_at, 'rows': [
        {'system': 'celery', 'broker': 'rabbitmq', 'confirms': False, 'publishers': 50, 'rates': [2_000.0]},
        {'system': 'dramatiq', 'broker': 'rabbitmq', 'confirms': False, 'publishers': 50, 'rates': [4_000.0]}]}


def test_figures_of_one_run_are_compared_as_such() -> None:
    text, summary = run.comparison(_throughput('2026-11-23 04:10 UTC'), _peers('2026-11-23 04:40 UTC'))
    assert 'measured in the same `make bench` run' in text
    assert [s['measured'] for s in summary] == ['6.00×', '3.00×']


def test_figures_of_two_runs_say_so() -> None:
    # Conduit measured again alone a day later: before, the table still said "in the same run".
    text, summary = run.comparison(_throughput('2026-11-24 22:12 UTC'), _peers('2026-11-23 04:12 UTC'))
    assert 'same `make bench` run' not in text
    assert '**not measured in one run** (Conduit measured 2026-11-24 22:12 UTC, the peers 2026-11-23 04:12 UTC)' in text
    assert all('2026-11-23 04:12 UTC' in s['measured'] for s in summary)


def test_the_report_keeps_the_hand_written_notes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    results, notes = tmp_path / 'results', tmp_path / 'notes'
    results.mkdir()
    notes.mkdir()
    monkeypatch.setattr(common, 'RESULTS_DIR', results)
    monkeypatch.setattr(common, 'NOTES_DIR', notes)
    monkeypatch.setattr(run, 'RESULTS_MD', tmp_path / 'RESULTS.md')
    monkeypatch.setattr(run, 'MACHINE_MD', results / 'machine.md')
    (results / 'machine.md').write_text('- CPU: a test machine\n', encoding='utf-8')
    (results / 'throughput.md').write_text('## Conduit: throughput\n\nfigures', encoding='utf-8')
    (results / 'throughput.json').write_text(json.dumps({'summary': [
        {'figure': 'durable service→service', 'target': '≥ 1', 'measured': '2', 'met': True}]}), encoding='utf-8')
    (notes / 'targets.md').write_text('## Targets kept by hand\n\nmeasured since', encoding='utf-8')
    (notes / 'throughput.md').write_text('### Where the time goes\n\nprofiled', encoding='utf-8')
    run.write_report({})
    report = (tmp_path / 'RESULTS.md').read_text(encoding='utf-8')
    headline = report.index('## Performance targets: the last run of each benchmark')
    assert headline < report.index('## Targets kept by hand') < report.index('## Conduit: throughput')
    assert report.index('## Conduit: throughput') < report.index('### Where the time goes')
