"""Tests for envckpt.report.cli: the report of a real demo run, looked at in headless Chromium.

A real ``envckpt demo --dir D`` (processes: trainer and Gym servers, killed
and restored; shared with the metrics endpoint's test), then ``envckpt
report D --out D/report.html``: Chromium renders it without a console
error, fetches nothing, draws data in every figure, shows as many snapshots
on its timeline as ``verdict.json`` counts, and the four statecharts. Each
of those checks is also shown failing on a tampered page.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from envckpt.cli import main
from envckpt.telemetry.log import TELEMETRY_NAME

from helpers.page_check import Page, PageCheckUnavailable, judge, look_at
from helpers.report_root import write_root

SCREENSHOTS = os.environ.get("ENVCKPT_REPORT_SCREENSHOTS")  # keep them here, to look at


def report(root: Path, out: Path, *extra: str) -> int:
    return main(["report", str(root), "--out", str(out), *extra])


@pytest.fixture(scope="module")
def page(scraped_demo: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    """The demo's report, written where the issue asks: D/report.html."""
    assert scraped_demo.code == 0, scraped_demo.out[-3000:]
    out = scraped_demo.directory / "report.html"
    assert report(scraped_demo.directory, out) == 0
    return out, scraped_demo


def looked_at(pages: list[Page], scratch: Path) -> list[dict[str, Any]]:
    try:
        return look_at(pages, scratch)
    except PageCheckUnavailable as missing:
        if os.environ.get("ENVCKPT_REQUIRE_RENDERER") == "1":
            raise
        pytest.skip(str(missing))


def test_chromium_shows_the_demo_report_as_the_verdict_counts_it(
    page: tuple[Path, Any], tmp_path: Path
) -> None:
    """No console error, no fetch, data in every figure, the verdict's snapshot count on the
    timeline, four statecharts; and a full-page screenshot."""
    html, demo = page
    screenshot = Path(SCREENSHOTS) / "report.png" if SCREENSHOTS else tmp_path / "report.png"
    [shown] = looked_at([Page(html, screenshot)], tmp_path)
    assert judge(shown, demo.verdict) == []
    assert demo.verdict["snapshots_published"] >= 1
    assert shown["timeline_snapshots"] == demo.verdict["snapshots_published"]
    assert shown["statecharts"] == 4, shown["notice"]
    assert screenshot.stat().st_size > 50_000 and shown["height"] > 2000


def test_each_check_fails_on_a_tampered_page(page: tuple[Path, Any], tmp_path: Path) -> None:
    """A page missing a snapshot bar, one with a console error, one fetching from the
    network, and one whose latency figure is empty: each is caught."""
    html, demo = page
    text = html.read_text()
    assert '<g id="timeline-snapshot-1">' in text
    tampered = {
        "dropped": _drop_group(text, "timeline-snapshot-1"),
        "console": text.replace("</body>", '<script>console.error("boom")</script></body>'),
        "fetch": text.replace("</body>", '<img src="http://127.0.0.1:9/x.png"></body>'),
        "empty": text.replace('id="latency-bar-', 'id="nothing-'),
    }
    pages = []
    for name, content in tampered.items():
        path = tmp_path / f"{name}.html"
        path.write_text(content)
        pages.append(Page(path))
    dropped, console, fetch, empty = (judge(s, demo.verdict) for s in looked_at(pages, tmp_path))
    assert any("the timeline shows" in problem for problem in dropped), dropped
    assert any("console error: boom" in problem for problem in console), console
    assert any("fetched http://127.0.0.1:9/x.png" in problem for problem in fetch), fetch
    assert "the latency figure draws no data" in empty, empty


def test_a_root_whose_log_lost_a_snapshot_fails_the_count(
    page: tuple[Path, Any], tmp_path: Path
) -> None:
    """The count is the report's, not copied from the verdict: a telemetry log without its
    first published snapshot draws one bar fewer than verdict.json counts."""
    _, demo = page
    root = tmp_path / "root"
    shutil.copytree(demo.directory, root, ignore=shutil.ignore_patterns("report.html", "*.sqlite"))
    lines = (root / TELEMETRY_NAME).read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if '"outcome":"published"' in line)
    (root / TELEMETRY_NAME).write_text("".join(lines[:first] + lines[first + 1 :]))
    out = tmp_path / "lost.html"
    assert report(root, out, "--no-statecharts") == 0
    [shown] = looked_at([Page(out)], tmp_path)
    assert shown["timeline_snapshots"] == demo.verdict["snapshots_published"] - 1
    assert any("the timeline shows" in problem for problem in judge(shown, demo.verdict))


def _drop_group(text: str, gid: str) -> str:
    """The page without the SVG group ``gid`` (a matplotlib artist: one <g> with no nesting)."""
    pattern = re.compile(rf'<g id="{gid}">.*?</g>', re.DOTALL)
    dropped, count = pattern.subn("", text, count=1)
    assert count == 1
    return dropped


def test_without_the_renderer_the_page_is_still_written_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No Mermaid renderer: exit 0, every other section drawn, the reason on stderr and page."""
    monkeypatch.setenv("ENVCKPT_MERMAID_TOOL", str(tmp_path / "no-tool"))
    root = write_root(tmp_path / "root")
    out = tmp_path / "page.html"
    assert report(root, out) == 0
    captured = capsys.readouterr()
    assert "envckpt report: statecharts not drawn:" in captured.err
    assert f"wrote {out}: 3 snapshots, 1 failed, 2 restores, 0 statecharts" in captured.out
    html = out.read_text()
    assert '<p class="notice">statecharts not drawn:' in html
    assert 'id="timeline-snapshot-3"' in html


def test_what_is_no_snapshot_root_is_refused_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file, and a directory with neither telemetry.jsonl nor snapshots/: exit 2, said why."""
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert report(a_file, tmp_path / "a.html") == 2
    assert "is not a directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert report(tmp_path / "empty", tmp_path / "b.html") == 2
    assert "is no snapshot root" in capsys.readouterr().err


def test_a_page_that_cannot_be_written_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--out in a directory that does not exist: exit 1, the reason on stderr."""
    root = write_root(tmp_path / "root")
    assert report(root, tmp_path / "missing" / "page.html", "--no-statecharts") == 1
    assert "cannot write" in capsys.readouterr().err
