"""Tests for envckpt.report.page: one HTML page, everything inline."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from envckpt.report.page import Figures, render_page
from envckpt.report.sources import read_root
from envckpt.report.statecharts import DrawnCharts

from helpers.report_root import write_root

FIGURES = Figures(
    timeline="<svg id='t'></svg>", latency="<svg></svg>", phases="<svg></svg>", bytes="<svg></svg>"
)


class Links(HTMLParser):
    """Every URL the page would load or link."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v or "" for k, v in attrs if k in ("src", "href")]


def test_the_page_holds_every_section_and_loads_nothing(tmp_path: Path) -> None:
    """Cards, figures, tables, charts notice, verdict; no src or href anywhere, no script."""
    html = render_page(
        read_root(write_root(tmp_path)),
        figures=FIGURES,
        charts=DrawnCharts(notice="statecharts not drawn: no node"),
        logs=[tmp_path / "trainer-1.log"],
    )
    for anchor in ("timeline", "latency", "phases", "bytes", "snapshots", "restores", "verdict"):
        assert f'<section id="{anchor}">' in html
    assert '<figure class="plot" data-figure="timeline"><svg id=\'t\'>' in html
    assert "statecharts not drawn: no node" in html and "PASS" in html
    assert "<script" not in html
    links = Links()
    links.feed(html)
    assert links.urls == []
    assert re.search(r"<strong>4</strong> turns", html)  # turns saved, from the verdict


def test_without_a_verdict_there_is_no_verdict_section(tmp_path: Path) -> None:
    """A trainer's root (no demo verdict): no verdict card or section."""
    html = render_page(
        read_root(write_root(tmp_path, verdict=False)),
        figures=FIGURES,
        charts=DrawnCharts(svgs={"snapshot_session": "<svg></svg>"}, counts={}),
        logs=[],
    )
    assert '<section id="verdict">' not in html
    assert '<div class="label">verdict</div>' not in html
    assert 'data-machine="snapshot_session"' in html
    assert "no transition of this machine recorded" in html
