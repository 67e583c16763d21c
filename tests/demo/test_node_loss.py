"""Tests for envckpt.demo.node_loss: the node-kill plan, the victim, the lost-instance error
(the cluster itself: test_ray_cluster.py)."""

from __future__ import annotations

import pickle

from envckpt.demo.node_loss import InstancesLost, node_kill_plan, victim_node
from envckpt.demo.plan import KILL


def test_the_plan_kills_one_node_per_run_after_a_snapshot() -> None:
    """Seeded, one KILL per planned node loss, each after a published snapshot."""
    plan = node_kill_plan(seed=3, kills=2)
    assert plan == node_kill_plan(seed=3, kills=2)
    assert [p.kind for p in plan] == [KILL, KILL]
    assert [p.after_snapshots for p in plan] == [1, 1] and plan[0].seed != plan[1].seed
    assert node_kill_plan(seed=3, kills=0) == []


def test_the_victim_is_the_busiest_worker_node_never_the_head() -> None:
    """Most instances first, the smallest id on a tie; no worker node hosting any: None."""
    placement = {"a": "head", "b": "n2", "c": "n1", "d": "n2", "e": "head"}
    assert victim_node(placement, "head") == "n2"
    assert victim_node({"a": "n2", "b": "n1"}, "head") == "n1"
    assert victim_node({"a": "head"}, "head") is None


def test_instances_lost_names_them_and_survives_pickling() -> None:
    """The instances and nodes are kept, and a round trip through pickle keeps them."""
    error = InstancesLost(["demo/replica-1"], ["n1"])
    again = pickle.loads(pickle.dumps(error))
    assert (again.instances, again.nodes) == (("demo/replica-1",), ("n1",))
    assert "demo/replica-1" in str(again)
