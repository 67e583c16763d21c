"""When the demo interrupts its job: a seeded plan, struck by events, never by the clock.

    plan = plan_interruptions(seed=0, kills=2, preempt=False)
    # [Interruption("kill", after_snapshots=2, ...), Interruption("kill_in_restore", ...)]
    interrupter = Interrupter(plan[0], total=40, finished=0, strike=kill_the_job)
    job.on_progress = interrupter.progress        # strikes at the planned moment

A wall-clock crash on a loaded machine often struck before the first
snapshot, and the demo then "passed" without restoring anything. Here each
running interruption waits for the k-th published snapshot that holds
rollouts in flight (k >= 1), then strikes after a seeded random number of
further rollouts finished (at most a third of those left), so every restart
has something to restore and the job is still running when it strikes.

Kinds: ``kill`` (SIGKILL of the whole job), ``kill_in_restore`` (SIGKILL at a
seeded crash point inside the restore that follows the previous kill) and
``preempt`` (SIGTERM: a final snapshot, then exit). With ``kills`` >= 2 the
second one falls inside a restore.
"""

from __future__ import annotations

import argparse
import json
import random
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from envckpt.crashpoints import RESTORE_POINTS
from envckpt.fsutil import atomic_write_bytes
from envckpt.machines.tables import LedgerStatus

KILL = "kill"
KILL_IN_RESTORE = "kill_in_restore"
PREEMPT = "preempt"
KINDS = (KILL, KILL_IN_RESTORE, PREEMPT)
PLAN_NAME = "plan.json"


@dataclass(frozen=True, slots=True)
class Interruption:
    """One planned interruption of one incarnation of the job."""

    kind: str
    after_snapshots: int = 1
    restore_point: str = ""
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown interruption {self.kind!r}")
        if self.after_snapshots < 1:
            raise ValueError("an interruption waits for at least one published snapshot")
        if self.kind == KILL_IN_RESTORE and self.restore_point not in RESTORE_POINTS:
            raise ValueError(f"unknown restore crash point {self.restore_point!r}")

    def to_arg(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_arg(cls, text: str) -> Interruption:
        return cls(**json.loads(text))


def plan_interruptions(*, seed: int, kills: int, preempt: bool) -> list[Interruption]:
    """The seeded interruptions, one per incarnation, in order (the last one finishes)."""
    if kills < 0:
        raise ValueError("kills must not be negative")
    rng = random.Random(seed + 1)
    plan: list[Interruption] = []
    for index in range(kills):
        if preempt:
            kind = PREEMPT
        elif index == 1:
            kind = KILL_IN_RESTORE
        else:
            kind = KILL
        # Only the first run has all the work ahead of it; later ones strike
        # after their first snapshot so they never run out of rollouts first.
        after = rng.choice((1, 2)) if index == 0 else 1
        point = rng.choice(RESTORE_POINTS) if kind == KILL_IN_RESTORE else ""
        plan.append(Interruption(kind, after, point, rng.randrange(1 << 30)))
    return plan


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of one run of a demo's job process: which run, its planned interruption
    (``Interruption.to_arg``), and the trainer's ``--allow-fresh-start``."""
    from envckpt.trainer.startup import add_start_arguments

    parser.add_argument("--incarnation", type=int, required=True)
    parser.add_argument("--interrupt", default=None, help="the demo's plan for this run (JSON)")
    add_start_arguments(parser)


def save_plan(plan: list[Interruption], path: Path) -> None:
    atomic_write_bytes(path, json.dumps([asdict(i) for i in plan], indent=1).encode())


def load_plan(path: Path) -> list[Interruption]:
    if not path.exists():
        return []
    return [Interruption(**raw) for raw in json.loads(path.read_text())]


class Interrupter:
    """Follows a job's progress events and strikes once, at the planned moment."""

    def __init__(
        self,
        plan: Interruption,
        *,
        total: int,
        finished: int,
        strike: Callable[[Mapping[str, Any]], None],
    ) -> None:
        self.plan = plan
        self.total = total
        self.finished = finished
        self.strike = strike
        self.snapshots = 0
        self.countdown: int | None = None
        self.struck = False
        self._rng = random.Random(plan.seed)

    def progress(self, event: str, fields: Mapping[str, Any]) -> None:
        if self.struck or self.plan.kind == KILL_IN_RESTORE:
            return
        if event == "snapshot" and _holds_rollouts(fields):
            self.snapshots += 1
            if self.snapshots == self.plan.after_snapshots:
                left = max(1, self.total - self.finished)
                self.countdown = self._rng.randint(1, max(1, left // 3))
        elif event == LedgerStatus.SEALED:
            self.finished += 1
            if self.countdown is not None:
                self.countdown -= 1
                if self.countdown <= 0:
                    self.struck = True
                    self.strike(
                        {
                            "kind": self.plan.kind,
                            "snapshots": self.snapshots,
                            "finished": self.finished,
                        }
                    )


def _holds_rollouts(fields: Mapping[str, Any]) -> bool:
    result = fields.get("result")
    return int(getattr(result, "exported_episodes", 0) or 0) > 0
