"""Tests for envckpt.report.transition_logs: transitions read from logs, damaged lines named."""

from __future__ import annotations

import json
from pathlib import Path

from envckpt.machines.binding import TransitionRecord
from envckpt.report.transition_logs import find_logs, read_transitions


def line(**fields: object) -> str:
    return json.dumps({"event": "transition", **fields}) + "\n"


def test_transitions_are_read_and_other_events_skipped(tmp_path: Path) -> None:
    """Two transitions of two files; a log line of another event is no problem."""
    (tmp_path / "run").mkdir()
    first = tmp_path / "trainer-1.log"
    first.write_text(
        line(machine="m", instance_id="i", trigger="t", source="a", dest="b", elapsed=0.5)
        + json.dumps({"event": "snapshot done"})
        + "\n"
    )
    second = tmp_path / "run" / "gym-0-1.jsonl"
    second.write_text(line(machine="m", instance_id="j", trigger="u", source="b", dest="a"))
    (tmp_path / "trainer-1.out").write_text("plain text, not a log")
    assert find_logs(tmp_path) == [second, first]
    events, problems = read_transitions(find_logs(tmp_path))
    assert problems == []
    assert TransitionRecord("m", "i", "t", "a", "b", None, 0.5) in events and len(events) == 2


def test_a_cut_line_and_a_transition_without_its_fields_are_named(tmp_path: Path) -> None:
    """Line 2 is cut short, line 3 lacks its dest: both named, line 1 still read."""
    log = tmp_path / "trainer-1.log"
    log.write_text(
        line(machine="m", instance_id="i", trigger="t", source="a", dest="b")
        + '{"event": "transition", "mach\n'
        + line(machine="m", instance_id="i", trigger="t", source="a")
    )
    events, problems = read_transitions([log, tmp_path / "missing.log"])
    assert len(events) == 1
    assert problems[0] == f"{log}: lines 2, 3 not a JSON transition event; skipped"
    assert problems[1].startswith(f"{tmp_path / 'missing.log'}:")
