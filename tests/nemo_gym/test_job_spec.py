"""Tests for envckpt.nemo_gym.job_spec: a job's spec survives its JSON file."""

from __future__ import annotations

from pathlib import Path

from envckpt.nemo_gym.job_spec import SNAPSHOTS_DIR, DeploymentSpec, JobSpec


def _spec(directory: Path) -> JobSpec:
    return JobSpec(
        directory=directory,
        deployments=(
            DeploymentSpec("counter", {"agent": {"x": 1}}, agent="agent"),
            DeploymentSpec("multi", {"agent": {"y": [1, 2]}}, agent="other_agent"),
        ),
        tasks=(
            {"rollout_id": "c-0", "shard": "counter", "task": {"n": 1}},
            {"rollout_id": "m-0", "shard": "multi", "task": {"n": 2}},
        ),
        snapshot_every=1.5,
        prepare_seconds=2.0,
        model_calls="refuse",
        allow_fresh_start=True,
    )


def test_a_saved_spec_loads_back_equal_in_every_field(tmp_path: Path) -> None:
    """save then load gives the same settings, deployments and tasks."""
    spec = _spec(tmp_path)
    spec.save(tmp_path / "job.json")
    loaded = JobSpec.load(tmp_path / "job.json")
    assert loaded.to_json() == spec.to_json()
    assert [d.shard for d in loaded.deployments] == ["counter", "multi"]
    assert (loaded.model_calls, loaded.prepare_seconds) == ("refuse", 2.0)
    assert loaded.allow_fresh_start is True


def test_tasks_go_to_their_deployments_instance_and_the_root_is_under_the_directory(
    tmp_path: Path,
) -> None:
    """Each task names its shard's instance; the snapshot root is directory/snapshots."""
    spec = _spec(tmp_path)
    assert [(t.rollout_id, t.instance_id) for t in spec.rollout_tasks()] == [
        ("c-0", "counter/replica-0"),
        ("m-0", "multi/replica-0"),
    ]
    assert spec.root == tmp_path / SNAPSHOTS_DIR
