"""A report from a root, start to end: read, draw, render the page.

built = build_report(root)                  # logs found under root, statecharts drawn
built.html                                  # the page
built.notice, built.problems                # what was not drawn or read, and why
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from envckpt.report import plots
from envckpt.report.page import Figures, render_page
from envckpt.report.sources import read_root
from envckpt.report.statecharts import DrawnCharts, draw_statecharts
from envckpt.report.transition_logs import find_logs, read_transitions

NO_STATECHARTS = "statecharts not drawn: --no-statecharts"


@dataclass(frozen=True, slots=True)
class BuiltReport:
    html: str
    summary: str
    notice: str = ""
    problems: tuple[str, ...] = ()


def build_report(
    root: Path, *, logs: Sequence[Path] | None = None, statecharts: bool = True
) -> BuiltReport:
    """The page of ``root``; ``logs`` replace the ones found under it."""
    data = read_root(root)
    paths = list(logs) if logs is not None else find_logs(root)
    events, log_problems = read_transitions(paths)
    charts = draw_statecharts(events) if statecharts else DrawnCharts(notice=NO_STATECHARTS)
    problems = (*data.problems, *log_problems)
    data = replace(data, problems=problems)
    figures = Figures(
        timeline=plots.timeline(data),
        latency=plots.instance_latency(data),
        phases=plots.phase_breakdown(data),
        bytes=plots.snapshot_bytes(data),
    )
    html = render_page(data, figures=figures, charts=charts, logs=paths)
    summary = (
        f"{len(data.published)} snapshots, {len(data.failed)} failed, "
        f"{len(data.restores)} restores, {len(charts.svgs)} statecharts"
    )
    notice = "" if charts.notice == NO_STATECHARTS else charts.notice
    return BuiltReport(html=html, summary=summary, notice=notice, problems=problems)
