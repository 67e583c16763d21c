"""Tests for envckpt.report.build: a root in, a page and what it could not show out."""

from __future__ import annotations

from pathlib import Path

from envckpt.report.build import build_report

from helpers.report_root import write_root


def test_a_root_builds_into_a_page_with_its_summary(tmp_path: Path) -> None:
    """Without statecharts: the rest is drawn, and no notice is raised about them."""
    built = build_report(write_root(tmp_path), statecharts=False)
    assert built.summary == "3 snapshots, 1 failed, 2 restores, 0 statecharts"
    assert built.notice == "" and built.problems == ()
    assert 'id="timeline-snapshot-3"' in built.html


def test_damaged_logs_are_reported_beside_the_page(tmp_path: Path) -> None:
    """A damaged transition log given explicitly is a problem; the page is still built."""
    root = write_root(tmp_path)
    bad = tmp_path / "other.log"
    bad.write_text("not json at all\n")
    built = build_report(root, logs=[bad], statecharts=False)
    assert built.problems == (f"{bad}: line 1 not a JSON transition event; skipped",)
    assert "not a JSON transition event" in built.html
