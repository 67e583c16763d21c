"""What the demo runs: the rollout tasks, the instance layout, the checks.

Shared by the in-process demo and the multi-process one, so both are judged
by the same verdict.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.demo.report import Verdict
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.sim.gym import expected_transcript
from envckpt.trainer.job import RolloutTask


@dataclass(frozen=True, slots=True)
class DemoSettings:
    instances: int = 4
    rollouts: int = 40
    seed: int = 0
    directory: Path = Path("envckpt-demo")
    snapshot_every: float = 0.4
    tool_latency: float = 0.06
    min_turns: int = 4
    max_turns: int = 10
    in_flight_per_instance: int = 3
    keep_latest_k: int = 3

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


def crash_fraction(settings: DemoSettings) -> float:
    """How far into the expected work the crash strikes (seeded)."""
    return random.Random(settings.seed + 1).uniform(0.25, 0.75)


def judge(
    settings: DemoSettings,
    tasks: Sequence[RolloutTask],
    results: Mapping[str, Mapping[str, Any]],
    *,
    continued: int,
    restarted: int,
    audit: Sequence[Mapping[str, Any]] = (),
) -> Verdict:
    """The demo's verdict, computed only from what happened."""
    verdict = Verdict()
    expected_ids = {task.rollout_id for task in tasks}
    verdict.check(
        "every rollout finished exactly once",
        set(results) == expected_ids and len(results) == len(tasks),
        f"{len(results)} results for {len(tasks)} rollouts",
    )
    wrong = [
        task.rollout_id
        for task in tasks
        if task.rollout_id in results
        and results[task.rollout_id].get("transcript")
        != expected_transcript(task.rollout_id, task.task, seed=settings.gym_seed())
    ]
    verdict.check(
        "every transcript equals an uninterrupted run",
        not wrong,
        f"{len(wrong)} differ {wrong[:3]}" if wrong else "all identical",
    )
    twice = []
    for rollout_id, result in results.items():
        turns = [turn["turn"] for turn in result.get("turns", [])]
        if len(turns) != len(set(turns)):
            twice.append(rollout_id)
    verdict.check(
        "no turn's tool effect applied twice in any final result",
        not twice,
        f"{len(twice)} rollouts with a repeated turn" if twice else "each turn once",
    )
    resumed = sum(1 for r in results.values() if r.get("resumed_from_turn", 0) > 0)
    verdict.check(
        "rollouts continued from a saved turn",
        resumed == continued,
        f"{continued} continued from a saved turn, {restarted} restarted from their task",
    )
    if audit:
        verdict.check(*audit_check(results, audit))
    return verdict


def audit_check(
    results: Mapping[str, Mapping[str, Any]], audit: Sequence[Mapping[str, Any]]
) -> tuple[str, bool, str]:
    """Effects in the tool's audit log (which outlives crashes) against the final results.

    Every application carries an id naming the process that applied it. Each
    turn of each final result names the application it kept; that one must be
    in the log exactly once, for the same rollout, turn and value. Any other
    entry was applied by a process that then crashed before a snapshot kept
    it: its tool state died with it, so the effect never took hold.
    """
    by_id: dict[str, list[Mapping[str, Any]]] = {}
    for entry in audit:
        by_id.setdefault(str(entry.get("application")), []).append(entry)
    problems: list[str] = []
    credited: set[str] = set()
    for rollout_id, result in results.items():
        for turn in result.get("turns", []):
            application = str(turn.get("application"))
            credited.add(application)
            entries = by_id.get(application, [])
            if len(entries) != 1:
                problems.append(f"{rollout_id}/t{turn['turn']}: {len(entries)} log entries")
                continue
            entry = entries[0]
            if (entry["rollout_id"], entry["turn"], entry["value"]) != (
                rollout_id,
                turn["turn"],
                turn["value"],
            ):
                problems.append(f"{rollout_id}/t{turn['turn']}: log entry disagrees")
    lost = sum(
        len(entries) for application, entries in by_id.items() if application not in credited
    )
    detail = (
        f"{len(credited)} effects applied once; {lost} more were applied by processes that "
        "crashed before a snapshot kept them"
        if not problems
        else "; ".join(problems[:3])
    )
    return "tool effects applied exactly once (audit log)", not problems, detail
