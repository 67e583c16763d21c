"""Tests for envckpt.demo.events: the launcher's exit line in the job's event log."""

from __future__ import annotations

from pathlib import Path

from envckpt.demo.events import read_events, record_exit


def test_a_line_cut_by_a_kill_is_skipped(tmp_path: Path) -> None:
    """A half-written last line (the process died mid-write) does not hide the others."""
    path = tmp_path / "events.jsonl"
    record_exit(tmp_path, 1, -9)
    with path.open("a") as stream:
        stream.write('{"event": "seal')
    assert [(e["event"], e["code"]) for e in read_events(path)] == [("exited", -9)]
    assert list(read_events(tmp_path / "missing.jsonl")) == []
