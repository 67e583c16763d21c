"""Recorded runs over their machine's chart: counts, thick and dotted edges, grey states."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from envckpt.machines.binding import TransitionRecord, bind
from envckpt.machines.table import MachineTable
from envckpt.machines.tables import (
    ALL_TABLES,
    INSTANCE_LIFECYCLE,
    PARTICIPANT_PHASES,
    SNAPSHOT_SESSION,
)
from envckpt.statecharts.overlay import NoTransitions, load_records, overlay

from helpers.chart_reading import overlay_transitions

X = "\u00d7"


def entry(
    trigger: str, source: str, dest: str, machine: str = "instance_lifecycle"
) -> dict[str, Any]:
    return {
        "event": "transition",
        "level": "info",
        "machine": machine,
        "instance_id": "shard/replica-0",
        "trigger": trigger,
        "source": source,
        "dest": dest,
        "checkpoint_id": "ckpt-1",
        "elapsed": 0.25,
    }


def walk(table: MachineTable, model: str, triggers: list[str]) -> list[TransitionRecord]:
    """Fire ``triggers`` on a fresh model of ``table`` (the real binding), return the records."""
    machine = bind(table)
    state = machine.new(model)
    return [machine.fire(state, trigger) for trigger in triggers]


def test_load_records_keeps_only_transition_events(tmp_path: Path) -> None:
    """Other events and blank lines are skipped; the fields of each record are filled."""
    log = tmp_path / "run.jsonl"
    lines = [
        json.dumps({"event": "snapshot started", "level": "info"}),
        json.dumps(entry("discover", "undiscovered", "discovered")),
        "",
        json.dumps({"machine": "instance_lifecycle", "trigger": "x"}),
        json.dumps(entry("prepare", "discovered", "prepared") | {"checkpoint_id": None}),
    ]
    log.write_text("\n".join(lines) + "\n")
    assert load_records(log) == [
        TransitionRecord(
            "instance_lifecycle", "shard/replica-0", "discover", "undiscovered", "discovered",
            "ckpt-1", 0.25,
        ),
        TransitionRecord(
            "instance_lifecycle", "shard/replica-0", "prepare", "discovered", "prepared", None, 0.25
        ),
    ]  # fmt: skip


def test_load_records_reads_several_logs_in_order(tmp_path: Path) -> None:
    """Records of several files come file by file, in the order given."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps(entry("discover", "undiscovered", "discovered")) + "\n")
    second.write_text(
        json.dumps(entry("prepare", "idle", "preparing", "participant_phases")) + "\n"
    )
    assert [r.trigger for r in load_records([first, second])] == ["discover", "prepare"]


def test_load_records_rejects_broken_lines(tmp_path: Path) -> None:
    """A line that is not JSON, not an object, or a transition without fields names the line."""
    log = tmp_path / "run.jsonl"
    log.write_text(json.dumps(entry("discover", "undiscovered", "discovered")) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"run.jsonl:2: not JSON"):
        load_records(log)
    log.write_text("[1, 2]\n")
    with pytest.raises(ValueError, match=r"run.jsonl:1: not a JSON object"):
        load_records(log)
    log.write_text(json.dumps({"event": "transition", "machine": "m"}) + "\n")
    with pytest.raises(ValueError, match=r"run.jsonl:1: transition without instance_id"):
        load_records(log)


def test_overlay_counts_fired_edges_thick_and_unfired_dotted() -> None:
    """Fired edges are thick with their count; the rest are dotted with count 0."""
    runs = walk(
        INSTANCE_LIFECYCLE,
        "i0",
        ["discover", "prepare", "renew", "renew", "commit", "resume", "prepare_blocked", "fail"],
    )
    chart = overlay(INSTANCE_LIFECYCLE, runs)
    lines = chart.splitlines()
    assert f'    s_prepared ==>|"commit {X}1"| s_committed' in lines
    assert f'    s_discovered -.->|"restore {X}0"| s_restored' in lines
    assert f'        s_prepared["prepared<br/>\u27f2 renew {X}2"]' in lines
    # resume fired from committed: the box's one resume edge is thick, its count the sum
    assert f'    s_checkpoint_open ==>|"resume {X}1"| s_resumed' in lines
    assert f'    s_checkpoint_open ==>|"fail {X}1"| s_failed' in lines


@pytest.mark.parametrize("table", ALL_TABLES, ids=lambda table: table.name)
def test_overlay_reads_back_into_every_transition_with_its_count(table: MachineTable) -> None:
    """Every transition of the table is drawn once, with the count of its drawn edge."""
    machine = bind(table)
    runs = []
    for model in ("m0", "m1"):
        state = machine.new(model)
        for _ in range(6):  # always the first legal trigger: a deterministic walk
            allowed = table.allowed(state.state)
            if not allowed:
                break
            runs.append(machine.fire(state, allowed[0]))
    read = overlay_transitions(overlay(table, runs))
    fired = Counter((r.source, r.trigger, r.dest) for r in runs)
    assert read.transitions == set(table.edges())
    assert read.initial == table.initial
    for triple in read.transitions:
        _, trigger, dest = triple
        drawn = sum(fired[(source, trigger, dest)] for source in read.shared[triple])
        assert read.counts[triple] == drawn
        if triple[0] != triple[2]:
            assert (triple in read.thick) == (drawn > 0)
            assert (triple in read.dotted) == (drawn == 0)


def test_a_tampered_overlay_does_not_read_back() -> None:
    """An overlay with an edge removed reads back without that transition."""
    runs = walk(SNAPSHOT_SESSION, "s0", ["prepare", "commit"])
    chart = overlay(SNAPSHOT_SESSION, runs)
    tampered = chart.replace(f'    s_prepared ==>|"commit {X}1"| s_committed\n', "")
    assert tampered != chart
    assert ("prepared", "commit", "committed") not in overlay_transitions(tampered).transitions


def test_unvisited_states_are_grey_and_the_legend_is_in_the_title() -> None:
    """States never entered get the unvisited class; the title explains the styles."""
    runs = walk(PARTICIPANT_PHASES, "model", ["prepare", "ready", "resume"])
    lines = overlay(PARTICIPANT_PHASES, runs).splitlines()
    assert "    class s_committed,s_restored unvisited" in lines
    title = lines[1]
    assert title.startswith('title: "participant_phases: 3 transitions, 1 instance id ·')
    assert "thick: fired" in title and "dotted: never" in title and "grey: not entered" in title
    classdefs = [line for line in lines if line.startswith("    classDef ")]
    assert classdefs[-1].startswith("    classDef unvisited ")  # last: grey wins


def test_transitions_the_table_lacks_are_drawn_and_marked() -> None:
    """A recorded transition with no row is a thick edge marked as not in the table."""
    runs = [
        TransitionRecord(
            "instance_lifecycle", "a", "discover", "undiscovered", "discovered", None, 0
        ),
        TransitionRecord("instance_lifecycle", "a", "teleport", "undiscovered", "end", None, 0),
    ]
    chart = overlay(INSTANCE_LIFECYCLE, runs)
    assert f'    s_undiscovered ==>|"teleport {X}1 (not in table)"| s_end' in chart
    assert '    s_end["end"]' in chart
    assert "    class s_end foreign" in chart


def test_no_transitions_of_the_machine_is_an_error() -> None:
    """An overlay of a log without transitions of the machine names what the log has."""
    with pytest.raises(NoTransitions, match=r"no transitions of snapshot_session were recorded$"):
        overlay(SNAPSHOT_SESSION, [])
    others = walk(PARTICIPANT_PHASES, "p", ["prepare"])
    with pytest.raises(NoTransitions, match="it has transitions of participant_phases"):
        overlay(SNAPSHOT_SESSION, others)


def test_overlay_does_not_depend_on_record_order() -> None:
    """The same records in another order draw the same chart."""
    runs = walk(SNAPSHOT_SESSION, "a", ["prepare", "abort"]) + walk(
        SNAPSHOT_SESSION, "b", ["abort"]
    )
    assert overlay(SNAPSHOT_SESSION, runs) == overlay(SNAPSHOT_SESSION, list(reversed(runs)))
