"""Tests for envckpt.demo.ray_cluster: ``envckpt demo --ray --nodes 3`` for real, on a local
three-node Ray cluster (three raylets on this machine) that loses a node mid-rollout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from envckpt.demo.events import EVENTS_NAME, read_events

from helpers.demo_cli import run_main

pytest.importorskip("ray")


@pytest.mark.ray
@pytest.mark.slow
def test_a_three_node_cluster_loses_a_node_and_the_job_restores(tmp_path: Path) -> None:
    """The instances spread over 3 nodes, one node's raylet is killed during the rollouts,
    replacements on the 2 others restore the newest snapshot and the job passes its verdict."""
    ray_tmpdir = os.environ.get("RAY_TMPDIR")
    code, text, _ = run_main(
        ["--ray", "--nodes", "3", "--instances", "3", "--rollouts", "12",
         "--snapshot-every", "0.3", "--dir", str(tmp_path)]
    )  # fmt: skip
    assert code == 0, text
    assert "VERDICT: PASS" in text
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["passed"] is True and verdict["nodes"] == 3
    assert verdict["nodes_killed"] >= 1 and verdict["instances_lost"] >= 1
    assert verdict["restores"] >= 1 and verdict["continued_from_saved_turn"] >= 1
    events = read_events(tmp_path / EVENTS_NAME)
    killed = {e["node"] for e in events if e["event"] == "node_killed"}
    later = [e for e in events if e["event"] == "placed" and e["incarnation"] > 1]
    assert later and not killed & set(later[-1]["placement"].values())
    assert os.environ.get("RAY_TMPDIR") == ray_tmpdir  # the cluster's own directory is unset
