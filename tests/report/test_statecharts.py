"""Tests for envckpt.report.statecharts: the four machines with a run's counts, as inline SVG."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envckpt.machines.binding import TransitionRecord
from envckpt.machines.tables import ALL_TABLES
from envckpt.report.statecharts import draw_statecharts
from envckpt.statecharts.charts import TIMES
from envckpt.statecharts.renderer import RendererMissing, find_renderer

EVENTS = [
    TransitionRecord("snapshot_session", "c1", "prepare", "opened", "prepared", None, 0.0),
    TransitionRecord("snapshot_session", "c1", "commit", "prepared", "committed", None, 0.0),
]


def test_without_the_renderer_nothing_is_drawn_and_the_notice_says_why(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A tool directory that is not tools/mermaid: no SVG, the counts, and the reason."""
    monkeypatch.setenv("ENVCKPT_MERMAID_TOOL", str(tmp_path))
    drawn = draw_statecharts(EVENTS)
    assert drawn.svgs == {}
    assert drawn.notice.startswith("statecharts not drawn: ") and "render.mjs" in drawn.notice
    assert drawn.counts["snapshot_session"] == 2 and drawn.counts["rollout_ledger"] == 0


def test_every_machine_is_drawn_with_the_run_s_counts() -> None:
    """Four SVGs; the fired edges carry their counts, an unfired machine is still drawn."""
    try:
        find_renderer()
    except RendererMissing as missing:
        if os.environ.get("ENVCKPT_REQUIRE_RENDERER") == "1":
            raise
        pytest.skip(str(missing))
    drawn = draw_statecharts(EVENTS)
    assert drawn.notice == ""
    assert list(drawn.svgs) == [table.name for table in ALL_TABLES]
    assert all(svg.startswith("<svg") for svg in drawn.svgs.values())
    assert f"prepare {TIMES}1" in drawn.svgs["snapshot_session"]
    assert "0/" in drawn.svgs["rollout_ledger"]  # no transition: the empty coverage chart
