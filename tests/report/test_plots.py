"""Tests for envckpt.report.plots: matplotlib figures as inline SVG, every datum a named mark."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from envckpt.report import plots
from envckpt.report.sources import ReportData, read_root

from helpers.report_root import write_root


def marks(svg: str, prefix: str) -> list[str]:
    """Ids of the groups whose id starts with ``prefix``, each holding a drawn path."""
    root = ET.fromstring(svg)
    found = []
    for group in root.iter("{http://www.w3.org/2000/svg}g"):
        gid = group.get("id", "")
        if gid.startswith(prefix) and group.find(".//{http://www.w3.org/2000/svg}path") is not None:
            found.append(gid)
    return found


def test_the_timeline_draws_each_snapshot_restore_kill_and_run(tmp_path: Path) -> None:
    """3 pause bars, 1 failed, 2 restore bands, 1 kill line (in both lanes), 2 runs."""
    svg = plots.timeline(read_root(write_root(tmp_path)))
    assert svg.startswith("<svg") and "<?xml" not in svg
    assert marks(svg, "timeline-snapshot-") == [f"timeline-snapshot-{n}" for n in (1, 2, 3)]
    assert len(marks(svg, "timeline-failed-")) == 1
    assert len(marks(svg, "timeline-restore-")) == 2
    assert len(marks(svg, "timeline-kill-")) == 2
    assert len(marks(svg, "timeline-run-")) == 2
    assert "SIGKILL" in svg and "#3" in svg  # text stays text


def test_latency_bytes_and_phases_draw_a_mark_per_datum(tmp_path: Path) -> None:
    """2 instances x 3 snapshots prepare bars, 3 byte bars, 7 phases x 3 snapshots."""
    data = read_root(write_root(tmp_path))
    assert len(marks(plots.instance_latency(data), "latency-bar-")) == 6
    assert len(marks(plots.snapshot_bytes(data), "bytes-bar-")) == 3
    assert len(marks(plots.phase_breakdown(data), "phases-bar-")) == 21


def test_an_empty_root_draws_no_marks_and_says_so(tmp_path: Path) -> None:
    """Nothing recorded: each figure says so instead of drawing data."""
    data = ReportData(root=tmp_path)
    for draw, prefix, text in (
        (plots.timeline, "timeline-snapshot-", "no snapshot recorded"),
        (plots.instance_latency, "latency-bar-", "no per-instance latency recorded"),
        (plots.snapshot_bytes, "bytes-bar-", "no snapshot published"),
        (plots.phase_breakdown, "phases-bar-", "no snapshot published"),
    ):
        svg = draw(data)
        assert marks(svg, prefix) == [] and text in svg


def test_the_same_data_draws_the_same_svg(tmp_path: Path) -> None:
    """Ids are salted, not random: two drawings are byte-identical."""
    data = read_root(write_root(tmp_path))
    assert plots.timeline(data) == plots.timeline(data)
    assert not re.search(r"<dc:date>", plots.snapshot_bytes(data))
