"""Tests for envckpt.demo.report: tables, the verdict's JSON, pause warnings."""

from __future__ import annotations

import pytest

from envckpt.demo.report import NUMBERS, Verdict, pause_warnings, table


def test_a_table_aligns_its_columns() -> None:
    """Every line of a table has the same width."""
    text = table("t", ("a", "long header"), [(1, "x"), ("wide cell", 2)])
    lines = text.splitlines()[1:]
    assert len({len(line) for line in lines}) == 1
    assert "wide cell" in text


def test_a_verdict_passes_only_with_every_check_and_at_least_one() -> None:
    """No check at all is no pass; one failure fails; to_json carries exactly its fields."""
    verdict = Verdict()
    assert not verdict.passed
    verdict.check("a", True, "fine")
    verdict.number("kills", 2)
    assert verdict.passed
    verdict.check("b", False, "broken")
    assert not verdict.passed and verdict.failed() == ["b"]
    document = verdict.to_json()
    assert set(document) == {"passed", "checks", *NUMBERS}
    assert document["kills"] == 2 and document["restores"] == 0
    assert document["checks"] == [
        {"check": "a", "passed": True, "detail": "fine"},
        {"check": "b", "passed": False, "detail": "broken"},
    ]
    assert "VERDICT: FAIL" in verdict.render()
    with pytest.raises(ValueError):
        verdict.number("happiness", 1)


def test_pause_warnings_count_timer_snapshots_that_paused_longer_than_the_job_ran() -> None:
    """(end, paused, reason): running is the gap since the last snapshot ended."""
    snapshots = [
        (10.0, 0.5, "timer"),  # first: nothing to compare with
        (12.0, 0.5, "timer"),  # ran 1.5 s, paused 0.5 s
        (12.8, 0.5, "timer"),  # ran 0.3 s, paused 0.5 s: warns
        (13.2, 0.3, "requested"),  # asked for: not the timer's fault
    ]
    assert pause_warnings(snapshots) == 1


def test_tables_and_the_verdict_fit_100_columns_whatever_the_cells_hold() -> None:
    """Long cells wrap inside their column: no line of a table or verdict passes 100."""
    text = table("wide", ("run", "what happened"), [("run 1", "x " * 150), ("run 2", "y" * 240)])
    assert max(len(line) for line in text.splitlines()) <= 100
    assert text.count("y") == 240, "a cell too long for its column wraps, never truncates"
    verdict = Verdict()
    verdict.check("a check whose name alone is about sixty characters long!!", True, "d " * 90)
    verdict.check("short", False, "")
    rendered = verdict.render()
    assert max(len(line) for line in rendered.splitlines()) <= 100
    assert "| FAIL | short" in rendered and rendered.endswith("VERDICT: FAIL")
