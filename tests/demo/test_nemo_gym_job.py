"""Tests for envckpt.demo.nemo_gym_job: the planned kill strikes on the job's events, once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from envckpt.demo.nemo_gym_job import PlannedStrike
from envckpt.demo.plan import KILL, KILL_IN_RESTORE, PREEMPT, Interruption
from envckpt.machines.tables import LedgerStatus


@dataclass(frozen=True)
class Snapshot:
    """What the trainer's ``snapshot`` progress event carries, as far as a plan reads it."""

    exported_episodes: int


class Recorder:
    """Stands in for the event log and for the group kill (the real ones end the process)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self.kills = 0

    def emit(self, event: str, **fields: Any) -> None:
        self.events.append((event, fields))

    def kill(self) -> None:
        self.kills += 1


def strike_for(plan: Interruption | None, *, total: int = 30) -> tuple[PlannedStrike, Recorder]:
    recorder = Recorder()
    return PlannedStrike(recorder.emit, plan, total=total, kill=recorder.kill), recorder


def seal(strike: PlannedStrike, count: int) -> None:
    for _ in range(count):
        strike.progress(LedgerStatus.SEALED, {"rollout_id": "r", "attempt": 0})


def test_a_kill_waits_for_its_snapshot_then_strikes_once_after_it() -> None:
    """Seals before the k-th snapshot holding rollouts never strike; after it, exactly one does."""
    strike, recorder = strike_for(Interruption(KILL, after_snapshots=2, seed=5))
    strike.emit("restored", snapshot=None, finished_before=0)
    seal(strike, 20)
    strike.progress("snapshot", {"result": Snapshot(exported_episodes=0)})  # holds nothing
    strike.progress("snapshot", {"result": Snapshot(exported_episodes=3)})
    seal(strike, 20)
    assert recorder.kills == 0
    strike.progress("snapshot", {"result": Snapshot(exported_episodes=2)})  # the 2nd holding some
    seal(strike, 30)
    assert recorder.kills == 1
    announced = [fields for event, fields in recorder.events if event == "interrupting"]
    assert announced == [{"kind": KILL, "snapshots": 2, "finished": announced[0]["finished"]}]
    assert recorder.events.index(("interrupting", announced[0])) == len(recorder.events) - 1


def test_no_strike_before_the_restore_reports_or_without_a_plan() -> None:
    """The countdown starts from the restored run's finished rollouts; no plan, no kill."""
    strike, recorder = strike_for(Interruption(KILL, seed=1))
    strike.progress("snapshot", {"result": Snapshot(exported_episodes=3)})
    seal(strike, 30)
    assert recorder.kills == 0  # the restore had not reported yet
    strike, recorder = strike_for(None)
    strike.emit("restored", snapshot="s1", finished_before=4)
    strike.progress("snapshot", {"result": Snapshot(exported_episodes=3)})
    seal(strike, 30)
    strike.in_restore("restore.validated")
    assert recorder.kills == 0


def test_a_kill_in_restore_strikes_at_its_point_only() -> None:
    """Other crash points pass; the planned one announces itself and kills."""
    strike, recorder = strike_for(
        Interruption(KILL_IN_RESTORE, restore_point="restore.environment_restored")
    )
    strike.in_restore("restore.validated")
    strike.emit("restored", snapshot="s1", finished_before=0)
    strike.progress("snapshot", {"result": Snapshot(exported_episodes=3)})
    seal(strike, 30)
    assert recorder.kills == 0
    strike.in_restore("restore.environment_restored")
    assert recorder.kills == 1
    assert recorder.events[-1] == (
        "interrupting",
        {"kind": KILL_IN_RESTORE, "point": "restore.environment_restored", "snapshots": 0},
    )


def test_preemption_is_refused() -> None:
    """nemo-gym's servers get no grace period, so the demo cannot preempt them."""
    with pytest.raises(ValueError, match="cannot strike"):
        strike_for(Interruption(PREEMPT))
