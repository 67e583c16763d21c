"""Tests for envckpt.report.sources: what a report reads from a root, and what it names damaged."""

from __future__ import annotations

from pathlib import Path

from envckpt.report.sources import read_root
from envckpt.telemetry.log import TELEMETRY_NAME

from helpers.report_root import IDS, VERDICT, write_root
from helpers.telemetry_samples import T0


def test_a_root_reads_as_records_runs_kills_results_and_verdict(tmp_path: Path) -> None:
    """Every source of the sample root, in order; nothing damaged."""
    data = read_root(write_root(tmp_path))
    assert [r.checkpoint_id for r in data.published] == list(IDS)
    assert len(data.failed) == 1 and len(data.restores) == 2
    assert [(run.incarnation, run.exit_code) for run in data.runs] == [(1, -9), (2, 0)]
    assert [(k.incarnation, k.kind) for k in data.interruptions] == [(1, "kill")]
    assert data.verdict == VERDICT
    assert data.resumed_turns == {("task-1", 2): 4}
    assert data.start == T0 - 1
    assert data.problems == () and data.on_disk == frozenset()


def test_damaged_files_are_named_and_the_rest_still_reads(tmp_path: Path) -> None:
    """A torn telemetry line and a verdict that is not JSON are problems, not failures."""
    root = write_root(tmp_path)
    with (root / TELEMETRY_NAME).open("a") as stream:
        stream.write('{"kind": "snapshot", "checkp\n')
    (root / "verdict.json").write_text("{not json")
    data = read_root(root)
    assert len(data.published) == 3 and data.verdict is None
    assert len(data.problems) == 2
    assert data.problems[0].startswith(f"{TELEMETRY_NAME}:7: not JSON")
    assert data.problems[1].startswith("verdict.json: unreadable")


def test_a_bare_root_reads_as_nothing(tmp_path: Path) -> None:
    """No telemetry, no events, no verdict: empty, without problems."""
    data = read_root(tmp_path)
    assert (data.snapshots, data.runs, data.verdict, data.resumed_turns) == ((), (), None, None)
    assert data.start == 0.0
