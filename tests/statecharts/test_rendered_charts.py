"""Every chart and overlay through the real Mermaid renderer, measured as a reader sees it.

All charts render in one browser session (about 10 s). Without the renderer
(node, tools/mermaid, chromium: ``make mermaid``) the test is skipped, unless
``ENVCKPT_REQUIRE_RENDERER=1`` (``make test`` sets it) makes that a failure.

Crossings measured with mermaid-cli 11.17.0 (Mermaid 11.17.2) on Chromium 156:
instance_lifecycle 1 (overlay 2), the other three machines 0 (overlays 0).
"""

from __future__ import annotations

import os
import re
from itertools import cycle
from typing import Any

import pytest

from envckpt.machines.binding import TransitionRecord
from envckpt.machines.table import MachineTable
from envckpt.machines.tables import ALL_TABLES, INSTANCE_LIFECYCLE, SNAPSHOT_SESSION
from envckpt.statecharts.charts import drawing, mermaid
from envckpt.statecharts.overlay import overlay
from envckpt.statecharts.renderer import RendererMissing, find_renderer, render_svgs
from envckpt.statecharts.svg_layout import SvgLayout, read_svg

# A GitHub page shows about 1000 px before it shrinks a chart (and its text).
MAX_WIDTH = 1000
# Edge crossings allowed per chart: the most measured (2) plus one.
MAX_CROSSINGS = 3
TABLES = {table.name: table for table in ALL_TABLES}
CHARTS = [*TABLES, *(f"{name}.overlay" for name in TABLES)]


def flat_chart(table: MachineTable[Any]) -> str:
    """The chart as it was drawn before layouts: one edge per transition, notes at the end."""
    lines = ["stateDiagram-v2", f"    [*] --> {table.initial}"]
    lines += [f"    {source} --> {dest}: {trigger}" for source, trigger, dest in table.edges()]
    for state, text in table.state_notes:
        lines += [f"    note right of {state}", f"        {text}", "    end note"]
    return "\n".join(lines) + "\n"


# Charts the checks must reject, rendered in the same browser session.
TAMPERED = {
    "tampered.flat": flat_chart(INSTANCE_LIFECYCLE),
    "tampered.no_check_cut": mermaid(SNAPSHOT_SESSION).replace(
        "    committed --> verified: check_cut\n", ""
    ),
}


def missing_triggers(layout: SvgLayout, table: MachineTable[Any]) -> list[str]:
    """The table's triggers whose names appear nowhere in the rendered text."""
    words = {word for text in layout.texts() for word in re.split(r"[\s,]+", text)}
    return [trigger for trigger in table.triggers if trigger not in words]


def sample_run(table: MachineTable[Any], steps: int = 12) -> list[TransitionRecord]:
    """A deterministic walk taking the legal triggers in turn: some edges fire, some not."""
    records = []
    state = table.initial
    turn = cycle(range(7))
    for _ in range(steps):
        allowed = table.allowed(state)
        if not allowed:
            break
        trigger = allowed[next(turn) % len(allowed)]
        dest = table.destination(state, trigger)
        assert dest is not None
        records.append(TransitionRecord(table.name, "m0", trigger, state, dest, None, 0.0))
        state = dest
    return records


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SvgLayout]:
    try:
        find_renderer()
    except RendererMissing as exc:
        if os.environ.get("ENVCKPT_REQUIRE_RENDERER") == "1":
            pytest.fail(f"the Mermaid renderer is required here: {exc}")
        pytest.skip(f"the Mermaid renderer is not installed: {exc}")
    charts = {name: mermaid(table) for name, table in TABLES.items()}
    charts |= {
        f"{name}.overlay": overlay(table, sample_run(table)) for name, table in TABLES.items()
    }
    charts |= TAMPERED
    out = tmp_path_factory.mktemp("svg")
    paths = render_svgs(charts, out)
    assert paths == [out / f"{name}.svg" for name in charts]
    return {
        name: read_svg(path.read_text(encoding="utf-8"))
        for name, path in zip(charts, paths, strict=True)
    }


def _table(name: str) -> MachineTable[Any]:
    return TABLES[name.removesuffix(".overlay")]


@pytest.mark.parametrize("name", CHARTS)
def test_every_trigger_is_shown(rendered: dict[str, SvgLayout], name: str) -> None:
    """Each trigger's name is in the rendered text: on an edge or as a state's self-loop."""
    assert missing_triggers(rendered[name], _table(name)) == []


@pytest.mark.parametrize("name", CHARTS)
def test_every_drawn_edge_is_rendered(rendered: dict[str, SvgLayout], name: str) -> None:
    """The renderer drew every edge the generator wrote, and the start arrow."""
    assert len(rendered[name].edges) == len(drawing(_table(name)).edges) + 1


@pytest.mark.parametrize("name", CHARTS)
def test_chart_fits_a_page(rendered: dict[str, SvgLayout], name: str) -> None:
    """The chart is at most 1000 px wide."""
    assert rendered[name].width <= MAX_WIDTH


@pytest.mark.parametrize("name", CHARTS)
def test_no_label_covers_another_or_a_state(rendered: dict[str, SvgLayout], name: str) -> None:
    """No two edge labels overlap, and no edge label covers a state or a box title."""
    layout = rendered[name]
    assert [(a.text, b.text) for a, b in layout.overlapping_labels()] == []
    assert [(a.text, b.text) for a, b in layout.labels_over_nodes()] == []


@pytest.mark.parametrize("name", CHARTS)
def test_edges_seldom_cross(rendered: dict[str, SvgLayout], name: str) -> None:
    """Edge crossings stay within the measured bound."""
    assert rendered[name].crossings() <= MAX_CROSSINGS


def test_the_checks_reject_the_old_flat_chart(rendered: dict[str, SvgLayout]) -> None:
    """One edge per transition: too wide, self-loops dropped, labels on labels, crossings."""
    flat = rendered["tampered.flat"]
    assert flat.width > MAX_WIDTH
    assert len(flat.edges) < len(list(INSTANCE_LIFECYCLE.edges())) + 1
    assert flat.overlapping_labels() != []
    assert flat.crossings() > MAX_CROSSINGS


def test_the_checks_notice_a_trigger_left_out(rendered: dict[str, SvgLayout]) -> None:
    """A chart missing its only check_cut edge is caught by the trigger check."""
    assert missing_triggers(rendered["tampered.no_check_cut"], SNAPSHOT_SESSION) == ["check_cut"]
