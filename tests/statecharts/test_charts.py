"""Charts drawn from the tables: nothing lost, boxes only where every state agrees, styles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from enum import StrEnum

import pytest

from envckpt.machines.table import STAYS, ChartLayout, MachineTable, Row, StateGroup
from envckpt.machines.tables import ALL_TABLES, INSTANCE_LIFECYCLE, SNAPSHOT_SESSION
from envckpt.statecharts.charts import Edge, drawing, mermaid, yaml_quoted

from helpers.chart_reading import chart_transitions


class Door(StrEnum):
    SHUT = "shut"
    AJAR = "ajar"
    OPEN = "open"
    GONE = "gone"


BOTH = StateGroup("closable", frozenset({Door.AJAR, Door.OPEN}))


def door(*rows: Row, layout: ChartLayout | None = None, **extra: object) -> MachineTable:
    return MachineTable(
        name="door",
        title='A "door"',
        states=tuple(Door),
        initial=Door.SHUT,
        rows=rows,
        chart=layout or ChartLayout(boxes=(BOTH,)),
        **extra,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda table: table.name)
def test_chart_reads_back_into_the_tables_transitions(table: MachineTable) -> None:
    """Expanding boxes, loops and shared edges gives exactly the table's transitions."""
    read = chart_transitions(mermaid(table))
    assert read.transitions == set(table.edges())
    assert read.initial == table.initial
    assert sorted(read.states) == sorted(table.states)


def test_a_chart_missing_a_transition_does_not_read_back() -> None:
    """Dropping one edge line or one folded self-loop from a chart breaks the round trip."""
    chart = mermaid(INSTANCE_LIFECYCLE)
    expected = set(INSTANCE_LIFECYCLE.edges())
    without_edge = chart.replace("    prepared --> committed: commit\n", "")
    without_loop = chart.replace("        prepared : \u27f2 renew\n", "")
    assert without_edge != chart and without_loop != chart
    assert chart_transitions(without_edge).transitions == expected - {
        ("prepared", "commit", "committed")
    }
    assert chart_transitions(without_loop).transitions == expected - {
        ("prepared", "renew", "prepared")
    }


def test_a_trigger_every_box_state_has_is_one_edge_from_the_box() -> None:
    """A row from every state of a box to a state outside is drawn once, from the box."""
    shapes = drawing(door(Row("slam", (Door.AJAR, Door.OPEN), Door.SHUT)))
    assert shapes.edges == (Edge("closable", "shut", ("slam",)),)


def test_a_trigger_only_some_box_states_have_stays_per_state() -> None:
    """A row from part of a box is drawn from each of its states."""
    shapes = drawing(
        door(Row("slam", (Door.OPEN,), Door.SHUT), Row("nudge", (Door.AJAR,), Door.SHUT))
    )
    assert shapes.edges == (Edge("open", "shut", ("slam",)), Edge("ajar", "shut", ("nudge",)))


def test_a_row_into_its_own_box_is_not_collapsed() -> None:
    """A row from every state of a box into one of them is drawn per state."""
    shapes = drawing(door(Row("widen", (Door.AJAR, Door.OPEN), Door.OPEN)))
    assert shapes.edges == (Edge("ajar", "open", ("widen",)),)
    assert shapes.loops == {"open": ("widen",)}


def test_self_loops_are_folded_into_the_state_label() -> None:
    """STAYS rows and rows back into the same state become label lines, not edges."""
    table = door(Row("knock", (Door.SHUT,), STAYS), Row("lock", (Door.SHUT,), Door.SHUT))
    assert drawing(table).edges == ()
    lines = mermaid(table).splitlines()
    at = lines.index('    state "shut" as shut')
    assert lines[at + 1 : at + 3] == ["    shut : \u27f2 knock", "    shut : \u27f2 lock"]


def test_triggers_between_the_same_states_share_one_edge() -> None:
    """Two rows with the same source and destination are one edge with both labels."""
    table = door(Row("push", (Door.SHUT,), Door.OPEN), Row("kick", (Door.SHUT,), Door.OPEN))
    assert drawing(table).edges == (Edge("shut", "open", ("push", "kick")),)
    assert "    shut --> open: push<br/>kick\n" in mermaid(table)


def test_happy_path_edges_come_first_in_its_order() -> None:
    """Edges along the happy path are written first, in path order, then the rest by row."""
    table = door(
        Row("burn", (Door.SHUT,), Door.GONE),
        Row("open", (Door.AJAR,), Door.OPEN),
        Row("crack", (Door.SHUT,), Door.AJAR),
        layout=ChartLayout(happy_path=(Door.SHUT, Door.AJAR, Door.OPEN)),
    )
    assert [edge.triggers[0] for edge in drawing(table).edges] == ["crack", "open", "burn"]


def test_boxes_nest_and_hold_their_states_in_table_order() -> None:
    """An inner box sits inside the outer one where its first state is."""
    outer = StateGroup("not gone", frozenset({Door.SHUT, Door.AJAR, Door.OPEN}))
    table = door(
        Row("burn", (Door.SHUT, Door.AJAR, Door.OPEN), Door.GONE),
        layout=ChartLayout(boxes=(BOTH, outer)),
    )
    shapes = drawing(table)
    assert shapes.top == ("not_gone", "gone")
    assert shapes.boxes["not_gone"].children == ("shut", "closable")
    assert shapes.boxes["closable"].children == ("ajar", "open")
    assert shapes.edges == (Edge("not_gone", "gone", ("burn",)),)
    assert shapes.states_of("not_gone") == ("shut", "ajar", "open")


def test_chart_has_quoted_title_direction_and_style_classes() -> None:
    """Front matter carries the quoted title; the body sets direction and role classes."""
    table = door(
        Row("crack", (Door.SHUT,), Door.AJAR),
        Row("burn", (Door.AJAR, Door.OPEN), Door.GONE),
        layout=ChartLayout(
            direction="LR", happy_path=(Door.SHUT, Door.AJAR), failure=frozenset({Door.GONE})
        ),
        terminal=frozenset({Door.GONE}),
    )
    lines = mermaid(table).splitlines()
    assert lines[0] == "---"
    assert lines[1] == 'title: "A \\"door\\""'
    assert "stateDiagram-v2" in lines
    assert "    direction LR" in lines
    assert "    class shut, ajar happy" in lines
    assert "    class gone failure" in lines
    assert "    class gone terminal" in lines
    assert not any("--> [*]" in line for line in lines)


def test_yaml_quoting_escapes_quotes_and_backslashes() -> None:
    """The title is a double-quoted YAML scalar whatever it contains."""
    assert yaml_quoted('a "b" \\ c: d') == '"a \\"b\\" \\\\ c: d"'


def test_notes_follow_their_state() -> None:
    """A note is written right after its state's declaration."""
    lines = mermaid(SNAPSHOT_SESSION).splitlines()
    for state, text in SNAPSHOT_SESSION.state_notes:
        at = lines.index(f'    state "{state}" as {state}')
        assert lines[at + 1 : at + 4] == [
            f"    note right of {state}",
            f"        {text}",
            "    end note",
        ]


def test_the_start_dot_sits_in_the_box_holding_the_initial_state() -> None:
    """With the initial state in a box, ``[*]`` is declared inside that box only."""
    lines = mermaid(SNAPSHOT_SESSION).splitlines()
    at = lines.index('    state "in progress" as in_progress {')
    assert lines[at + 1] == "        [*] --> opened"
    assert sum("[*]" in line for line in lines) == 1
    top = mermaid(INSTANCE_LIFECYCLE).splitlines()
    assert "    [*] --> undiscovered" in top


def test_charts_do_not_depend_on_hash_seed() -> None:
    """Charts drawn in processes with different hash seeds are identical."""
    script = (
        "import json; from envckpt.statecharts.charts import mermaid;"
        " from envckpt.machines.tables import ALL_TABLES;"
        " print(json.dumps([mermaid(t) for t in ALL_TABLES]))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(outputs) == 1
    assert json.loads(outputs.pop()) == [mermaid(table) for table in ALL_TABLES]
