"""What the demo runs: its settings, the instance layout and the rollout tasks.

Shared by the in-process demo and the multi-process one, so both run the
same job and are judged by the same verdict (``verdict``).
"""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from envckpt.fsutil import atomic_write_bytes
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.trainer.job import RolloutTask


@dataclass(frozen=True, slots=True)
class DemoSettings:
    instances: int = 4
    rollouts: int = 40
    seed: int = 0
    directory: Path = Path("envckpt-demo")
    snapshot_every: float = 0.5
    tool_latency: float = 0.06
    min_turns: int = 4
    max_turns: int = 10
    in_flight_per_instance: int = 3
    keep_latest_k: int = 3
    # The job's preemption grace and its adaptive snapshot interval (snapshot_loop).
    grace_seconds: float = 30.0
    min_running_ratio: float = 3.0
    # When every snapshot is refused: start from scratch instead of exiting 3
    # (the trainer's ``--allow-fresh-start``).
    allow_fresh_start: bool = False

    def __post_init__(self) -> None:
        if self.instances < 1 or self.rollouts < 1:
            raise ValueError("need at least one instance and one rollout")
        if not 1 <= self.min_turns <= self.max_turns:
            raise ValueError("turns must satisfy 1 <= min_turns <= max_turns")

    def instance_list(self) -> list[GymCheckpointInstance]:
        return [GymCheckpointInstance("demo", index) for index in range(self.instances)]

    def gym_seed(self) -> int:
        # Every instance runs the same scripted policy, so a rollout's transcript
        # depends only on its id and task.
        return self.seed


SETTINGS_NAME = "job.json"


def save_settings(settings: DemoSettings, path: Path) -> None:
    raw = asdict(settings)
    raw["directory"] = str(settings.directory)
    atomic_write_bytes(path, json.dumps(raw, sort_keys=True, indent=1).encode())


def load_settings(path: Path) -> DemoSettings:
    raw = json.loads(path.read_text())
    raw["directory"] = Path(raw["directory"])
    return DemoSettings(**raw)


def make_tasks(settings: DemoSettings) -> list[RolloutTask]:
    rng = random.Random(settings.seed)
    instances = settings.instance_list()
    return [
        RolloutTask(
            rollout_id=f"rollout-{index:03d}",
            instance_id=instances[index % len(instances)].instance_id,
            task={
                "prompt": f"task {index}",
                "turns": rng.randint(settings.min_turns, settings.max_turns),
            },
        )
        for index in range(settings.rollouts)
    ]
