"""What a nemo-gym job process runs: its deployments, tasks and settings, saved as JSON.

    spec = JobSpec(directory=d, deployments=(DeploymentSpec("counter", config, agent="agent"),),
                   tasks=({"rollout_id": "c-0", "shard": "counter", "task": {...}},))
    spec.save(d / "job.json")          # then: python -m envckpt.nemo_gym.job --spec d/job.json
    JobSpec.load(d / "job.json")

Apart from ``job`` so that the process wrapper (``job_process``) reads a spec
without importing the job it wraps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.fsutil import atomic_write_bytes
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.trainer.job import RolloutTask

SNAPSHOTS_DIR = "snapshots"  # the job's snapshot root, under its directory


@dataclass(frozen=True, eq=False)  # hashed by identity: the config is a dict
class DeploymentSpec:
    """One Gym instance: a nemo-gym config and the agent server its rollouts go to."""

    shard: str
    config: Mapping[str, Any]
    agent: str

    @property
    def instance(self) -> GymCheckpointInstance:
        return GymCheckpointInstance(self.shard, 0)


@dataclass(frozen=True)
class JobSpec:
    """Everything a job process needs; saved as JSON beside its outputs."""

    directory: Path
    deployments: tuple[DeploymentSpec, ...]
    tasks: tuple[Mapping[str, Any], ...]  # {"rollout_id", "shard", "task"}
    snapshot_every: float = 0.5
    keep_latest_k: int = 3
    in_flight_per_instance: int | None = 4
    policy_latency: float = 0.0
    control_run: bool = False
    prepare_seconds: float = 30.0
    # What the policy model's prepare does with generations still running.
    model_calls: str = "wait_then_refuse"
    # When every snapshot is refused: start from scratch instead of exiting 3.
    allow_fresh_start: bool = False

    @property
    def root(self) -> Path:
        """The job's snapshot root (where it also records that it finished)."""
        return self.directory / SNAPSHOTS_DIR

    def rollout_tasks(self) -> list[RolloutTask]:
        by_shard = {d.shard: d.instance.instance_id for d in self.deployments}
        return [
            RolloutTask(
                rollout_id=t["rollout_id"], instance_id=by_shard[t["shard"]], task=t["task"]
            )
            for t in self.tasks
        ]

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": str(self.directory),
            "deployments": [
                {"shard": d.shard, "config": dict(d.config), "agent": d.agent}
                for d in self.deployments
            ],
            "tasks": [dict(t) for t in self.tasks],
            "snapshot_every": self.snapshot_every,
            "keep_latest_k": self.keep_latest_k,
            "in_flight_per_instance": self.in_flight_per_instance,
            "policy_latency": self.policy_latency,
            "control_run": self.control_run,
            "prepare_seconds": self.prepare_seconds,
            "model_calls": self.model_calls,
            "allow_fresh_start": self.allow_fresh_start,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> JobSpec:
        fields = dict(value)
        fields["directory"] = Path(fields["directory"])
        fields["deployments"] = tuple(DeploymentSpec(**d) for d in fields["deployments"])
        fields["tasks"] = tuple(fields["tasks"])
        return cls(**fields)

    def save(self, path: Path) -> None:
        atomic_write_bytes(path, json.dumps(self.to_json(), indent=1, sort_keys=True).encode())

    @classmethod
    def load(cls, path: Path) -> JobSpec:
        return cls.from_json(json.loads(path.read_text(encoding="utf-8")))
