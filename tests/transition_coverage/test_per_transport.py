"""Coverage is judged per machine and per transport: an in-process row is no HTTP row."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from envckpt.machines.tables import ALL_TABLES, PARTICIPANT_PHASES
from envckpt.statecharts.overlay import CoverageEntry

from transition_coverage.__main__ import main
from transition_coverage.rows import HTTP, IN_PROCESS, WHY_IN_PROCESS, coverage_report


def _every_row(via: str) -> list[CoverageEntry]:
    return [
        CoverageEntry(table.name, str(source), trigger, str(dest), via=via)
        for table in ALL_TABLES
        for source, trigger, dest in table.edges()
    ]


def test_rows_fired_only_in_process_are_missed_over_http() -> None:
    report = coverage_report(_every_row(IN_PROCESS))
    assert not report.never
    missed = report.missed()
    assert set(missed) == {
        (table.name, HTTP) for table in ALL_TABLES if table.name != "rollout_ledger"
    }
    lines = report.per_transport()
    rows = len(list(PARTICIPANT_PHASES.edges()))
    assert f"participant_phases in-process: {rows}/{rows}" in lines
    assert f"participant_phases http: 0/{rows}" in lines
    assert f"rollout_ledger http: n/a, in-process only by design ({WHY_IN_PROCESS})" in lines


def test_both_runs_complete_pass_and_a_gap_fails(tmp_path: Path) -> None:
    complete = coverage_report(_every_row(IN_PROCESS) + _every_row(HTTP))
    assert not complete.missed()
    path = tmp_path / "coverage.jsonl"
    _write(path, _every_row(IN_PROCESS) + _every_row(HTTP))
    assert main([str(path)]) == 0
    _write(path, _every_row(IN_PROCESS))
    assert main([str(path)]) == 1  # nothing over HTTP: the run fails


def _write(path: Path, entries: list[CoverageEntry]) -> None:
    """``entries`` as the plugin writes them."""
    records = (
        {"event": "transition", "instance_id": "*", **dataclasses.asdict(e)} for e in entries
    )
    path.write_text("\n".join(json.dumps(record) for record in records) + "\n")


def test_the_summary_prints_only_the_per_machine_lines_and_the_total(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "coverage.jsonl"
    entries = _every_row(IN_PROCESS) + _every_row(HTTP)
    _write(path, entries)
    assert main(["--summary", str(path)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == coverage_report(entries).summary_lines()
    assert printed[-1] == f"transition coverage: {len(entries) // 2}/{len(entries) // 2} rows"
    assert "participant_phases http: 13/13" in printed
    assert not any("-->" in line for line in printed)  # no per-row detail
    assert main(["--summary"]) == 2
