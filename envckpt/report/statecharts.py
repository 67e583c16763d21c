"""The four machines' charts with a run's counts, rendered to inline SVG.

The only module of the report that uses the project's chart tooling (the
overlay of ``envckpt.statecharts.overlay`` and the pinned Mermaid renderer of
``envckpt.statecharts.renderer``), through their public functions, so moving
that tooling means changing the imports here and nothing else::

    drawn = draw_statecharts(events)      # one browser for all four charts
    drawn.svgs["instance_lifecycle"]      # "<svg ...>" (with the run's counts)
    drawn.notice                          # why some or all were not drawn ("" when all were)

A machine no event fired is drawn from its table with every edge dotted
(the coverage chart with nothing covered), so all four always appear when
the renderer is there. Without the renderer nothing is drawn and
``notice`` says what to install; the report shows that instead.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from envckpt.machines.binding import TransitionRecord
from envckpt.machines.tables import ALL_TABLES
from envckpt.statecharts.overlay import NoTransitions, coverage, overlay
from envckpt.statecharts.renderer import RendererMissing, RenderFailed, render_svgs


@dataclass(frozen=True, slots=True)
class DrawnCharts:
    """Inline SVG text per machine name (in table order), and why any is missing."""

    svgs: dict[str, str] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    notice: str = ""


def draw_statecharts(records: Sequence[TransitionRecord]) -> DrawnCharts:
    """Render every machine's chart with the counts of ``records``."""
    charts: dict[str, str] = {}
    counts: dict[str, int] = {}
    for table in ALL_TABLES:
        counts[table.name] = sum(1 for record in records if record.machine == table.name)
        try:
            charts[table.name] = overlay(table, records)
        except NoTransitions:
            charts[table.name] = coverage(table, [])
    titles = {table.name: table.title for table in ALL_TABLES}
    try:
        with tempfile.TemporaryDirectory(prefix="envckpt-report-") as scratch:
            paths = render_svgs(
                {f"report_{name}": text for name, text in charts.items()}, Path(scratch)
            )
            svgs = {
                name: path.read_text(encoding="utf-8")
                for name, path in zip(charts, paths, strict=True)
            }
    except (RendererMissing, RenderFailed) as error:
        return DrawnCharts(titles=titles, counts=counts, notice=f"statecharts not drawn: {error}")
    return DrawnCharts(svgs=svgs, titles=titles, counts=counts)
