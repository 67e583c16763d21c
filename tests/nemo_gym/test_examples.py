"""Tests of the ready-made deployments and tasks."""

from __future__ import annotations

from pathlib import Path

from envckpt.nemo_gym import examples
from envckpt.nemo_gym.launcher import server_names


def test_configs_name_three_servers_and_the_scripted_policy() -> None:
    """Each deployment is an agent, the policy model and a resources server, on the script."""
    for config in (examples.counter_config(), examples.multi_turn_config()):
        assert len(server_names(config)) == 3
        assert config["envckpt"]["scripted_policy"] == [examples.POLICY]
        assert config["token_id_capture"]["enabled"] is True


def test_tasks_are_deterministic_and_state_their_plan() -> None:
    """A counter task's expected count is its start plus its planned increments."""
    assert examples.counter_tasks(5) == examples.counter_tasks(5)
    for task in examples.counter_tasks(5):
        plan = examples.planned_increments(task)
        assert 2 <= len(plan) <= 3
        assert task["expected_count"] == task["initial_count"] + sum(plan)
    for task in examples.multi_turn_tasks(4):
        assert task["expected_answer"] in task["follow_ups"][-1]


def test_the_example_job_runs_each_shard_on_its_deployment(tmp_path: Path) -> None:
    """Counter rollouts on the counter deployment, multi-turn ones on the other, in order."""
    spec = examples.example_job(tmp_path, counters=3, multi_turns=2, snapshot_every=0.3)
    assert [d.shard for d in spec.deployments] == ["counter", "multi"]
    assert [(t["rollout_id"], t["shard"]) for t in spec.tasks] == [
        ("count-00", "counter"),
        ("count-01", "counter"),
        ("count-02", "counter"),
        ("talk-00", "multi"),
        ("talk-01", "multi"),
    ]
    assert [t["task"] for t in spec.tasks] == [
        *examples.counter_tasks(3),
        *examples.multi_turn_tasks(2),
    ]
    assert spec.snapshot_every == 0.3
