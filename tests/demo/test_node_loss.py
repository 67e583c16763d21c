"""Tests for envckpt.demo.node_loss: the node-kill plan, the victim, the lost-instance error
(the cluster itself: test_ray_cluster.py)."""

from __future__ import annotations

import pickle

from envckpt.demo.node_loss import InstancesLost, node_kill_plan, victim_node, wait_until_dead
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


class _Cluster:
    """``ray.nodes()`` of a cluster whose node ``n2`` is marked dead at the third look."""

    def __init__(self) -> None:
        self.looks = 0

    def nodes(self) -> list[dict[str, object]]:
        self.looks += 1
        return [
            {"NodeID": "n1", "Alive": True},
            {"NodeID": "n2", "Alive": self.looks < 3},
        ]


def test_the_trainer_is_held_until_the_killed_node_is_marked_dead() -> None:
    cluster = _Cluster()
    assert wait_until_dead(cluster, "n2", seconds=5.0) is True
    assert cluster.looks == 3


def test_the_hold_ends_when_the_node_never_dies() -> None:
    cluster = _Cluster()
    assert wait_until_dead(cluster, "n1", seconds=0.3) is False
