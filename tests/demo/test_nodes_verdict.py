"""Tests for envckpt.demo.nodes_verdict: each cluster check holds on a faithful event log and
fails on a tampered one (the real run: test_ray_cluster.py)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envckpt.demo.nodes_verdict import check_nodes, render_nodes, write_nodes_verdict
from envckpt.demo.report import Verdict

HEAD, N1, N2 = "head" + "0" * 52, "node1" + "1" * 51, "node2" + "2" * 51
I0, I1, I2 = "demo/replica-0", "demo/replica-1", "demo/replica-2"


def faithful() -> list[dict[str, Any]]:
    """The events of a run that lost node 1 (hosting replica 1) and restored elsewhere."""
    return [
        {"event": "placed", "incarnation": 1, "nodes": [HEAD, N1, N2], "head": HEAD,
         "placement": {I0: HEAD, I1: N1, I2: N2}},
        {"event": "snapshot", "incarnation": 1, "exported": 3},
        {"event": "node_kill", "incarnation": 1, "node": N1, "instances": [I1], "snapshots": 1},
        {"event": "node_killed", "incarnation": 1, "node": N1},
        {"event": "instances_lost", "incarnation": 1, "instances": [I1], "nodes": [N1]},
        {"event": "placed", "incarnation": 2, "nodes": [HEAD, N2], "head": HEAD,
         "placement": {I0: HEAD, I1: N2, I2: N2}},
        {"event": "restored", "incarnation": 2, "snapshot": "snap-1"},
    ]  # fmt: skip


def judged(events: list[dict[str, Any]], nodes: int = 3) -> tuple[Verdict, dict[str, Any]]:
    verdict = Verdict()
    numbers = check_nodes(verdict, events, nodes=nodes)
    return verdict, numbers


def test_a_faithful_run_passes_every_cluster_check() -> None:
    """Spread, killed after a snapshot, lost, replaced elsewhere, restored: all hold."""
    verdict, numbers = judged(faithful())
    assert verdict.passed, verdict.render()
    assert len(verdict.checks) == 5
    assert (numbers["nodes"], numbers["nodes_killed"], numbers["instances_lost"]) == (3, 1, 1)


def _first(events: list[dict[str, Any]], name: str, incarnation: int = 1) -> dict[str, Any]:
    return next(e for e in events if e["event"] == name and e["incarnation"] == incarnation)


def _not_spread(events: list[dict[str, Any]]) -> None:
    _first(events, "placed")["placement"] = {I0: N1, I1: N1, I2: N2}


def _smaller_cluster(events: list[dict[str, Any]]) -> None:
    _first(events, "placed")["nodes"] = [HEAD, N1]


def _head_killed(events: list[dict[str, Any]]) -> None:
    _first(events, "node_kill")["node"] = HEAD


def _before_a_snapshot(events: list[dict[str, Any]]) -> None:
    _first(events, "node_kill")["snapshots"] = 0


def _never_killed(events: list[dict[str, Any]]) -> None:
    events.remove(_first(events, "node_killed"))


def _nothing_lost(events: list[dict[str, Any]]) -> None:
    _first(events, "instances_lost")["instances"] = []


def _node_never_dead(events: list[dict[str, Any]]) -> None:
    _first(events, "instances_lost")["nodes"] = []


def _replaced_on_the_dead_node(events: list[dict[str, Any]]) -> None:
    _first(events, "placed", 2)["placement"][I1] = N1


def _not_replaced(events: list[dict[str, Any]]) -> None:
    events.remove(_first(events, "placed", 2))


def _not_restored(events: list[dict[str, Any]]) -> None:
    _first(events, "restored", 2)["snapshot"] = None


def _no_kill_at_all(events: list[dict[str, Any]]) -> None:
    events[:] = [e for e in events if e["event"] in ("placed", "snapshot", "restored")][:2]


TAMPERS: dict[str, tuple[Callable[[list[dict[str, Any]]], None], str]] = {
    "not spread": (_not_spread, "spread over every node"),
    "smaller cluster": (_smaller_cluster, "spread over every node"),
    "head killed": (_head_killed, "a node was killed"),
    "before a snapshot": (_before_a_snapshot, "a node was killed"),
    "never killed": (_never_killed, "a node was killed"),
    "nothing lost": (_nothing_lost, "lost with it"),
    "node never dead": (_node_never_dead, "lost with it"),
    "replaced on the dead node": (_replaced_on_the_dead_node, "remaining nodes only"),
    "not replaced": (_not_replaced, "remaining nodes only"),
    "not restored": (_not_restored, "restored a snapshot after each node loss"),
    "no kill at all": (_no_kill_at_all, "a node was killed"),
}


@pytest.mark.parametrize("name", sorted(TAMPERS))
def test_each_check_fails_on_a_tampered_run(name: str) -> None:
    """The check that guards what the tampering broke fails (and the verdict with it)."""
    tamper, check = TAMPERS[name]
    events = copy.deepcopy(faithful())
    tamper(events)
    verdict, _ = judged(events)
    failed = verdict.failed()
    assert any(check in failure for failure in failed), (name, failed)
    assert not verdict.passed


def test_verdict_json_carries_the_clusters_numbers(tmp_path: Path) -> None:
    """nodes, nodes_killed, instances_lost and each run's placement beside the usual fields."""
    verdict, numbers = judged(faithful())
    write_nodes_verdict(verdict, numbers, tmp_path / "verdict.json")
    document = json.loads((tmp_path / "verdict.json").read_text())
    assert (document["nodes"], document["nodes_killed"], document["instances_lost"]) == (3, 1, 1)
    assert document["passed"] is True and len(document["placement"]) == 2


def test_the_nodes_table_names_where_each_instance_ran(tmp_path: Path) -> None:
    """One row per node and run; the killed node is marked."""
    lines = [json.dumps(event) for event in faithful()]
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    text = render_nodes(tmp_path)
    assert "killed" in text and I1 in text and "(head)" in text
    assert text.count("(worker)") == 3
