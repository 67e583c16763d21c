"""Tests for envckpt.demo.plan: seeded interruptions, struck by events after a snapshot."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest

from envckpt.crashpoints import RESTORE_POINTS
from envckpt.demo.plan import (
    KILL,
    KILL_IN_RESTORE,
    PREEMPT,
    Interrupter,
    Interruption,
    add_run_arguments,
    load_plan,
    plan_interruptions,
    save_plan,
)


class Result:
    def __init__(self, exported: int) -> None:
        self.exported_episodes = exported


@pytest.mark.parametrize(
    ("kills", "preempt", "kinds"),
    [
        (1, False, [KILL]),
        (2, False, [KILL, KILL_IN_RESTORE]),
        (3, False, [KILL, KILL_IN_RESTORE, KILL]),
        (2, True, [PREEMPT, PREEMPT]),
        (0, False, []),
    ],
)
def test_the_plan_has_one_kill_inside_a_restore_from_two_kills_on(
    kills: int, preempt: bool, kinds: list[str]
) -> None:
    """The second kill strikes inside the restore after the first; --preempt only preempts."""
    plan = plan_interruptions(seed=4, kills=kills, preempt=preempt)
    assert [i.kind for i in plan] == kinds
    assert all(i.after_snapshots >= 1 for i in plan)
    assert all(i.restore_point in RESTORE_POINTS for i in plan if i.kind == KILL_IN_RESTORE)
    assert all(i.after_snapshots == 1 for i in plan[1:])


def test_the_plan_is_seeded() -> None:
    """The same seed gives the same plan; the seeds spread over k in {1, 2} and every point."""
    assert plan_interruptions(seed=9, kills=3, preempt=False) == plan_interruptions(
        seed=9, kills=3, preempt=False
    )
    plans = [plan_interruptions(seed=seed, kills=2, preempt=False) for seed in range(40)]
    assert {p[0].after_snapshots for p in plans} == {1, 2}
    assert {p[1].restore_point for p in plans} == set(RESTORE_POINTS)


def test_a_plan_round_trips_through_its_file_and_argument(tmp_path: Path) -> None:
    """plan.json and --interrupt carry every field."""
    plan = plan_interruptions(seed=2, kills=3, preempt=False)
    save_plan(plan, tmp_path / "plan.json")
    assert load_plan(tmp_path / "plan.json") == plan
    assert [Interruption.from_arg(i.to_arg()) for i in plan] == plan
    assert load_plan(tmp_path / "absent.json") == []


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "nap"},
        {"kind": KILL, "after_snapshots": 0},
        {"kind": KILL_IN_RESTORE, "restore_point": "snapshot.under_cut"},
    ],
)
def test_an_impossible_interruption_is_refused(bad: dict[str, Any]) -> None:
    """Unknown kinds, striking before any snapshot, or a restore kill outside a restore."""
    with pytest.raises(ValueError):
        Interruption(**bad)


def test_the_interrupter_strikes_once_after_the_kth_snapshot_holding_rollouts() -> None:
    """Snapshots that hold no rollout do not count; seals before the k-th do not either."""
    struck: list[dict[str, Any]] = []
    interrupter = Interrupter(
        Interruption(KILL, after_snapshots=2, seed=1), total=30, finished=0, strike=struck.append
    )
    interrupter.progress("sealed", {"rollout_id": "r", "attempt": 0})
    interrupter.progress("snapshot", {"result": Result(3)})
    interrupter.progress("snapshot", {"result": Result(0)})  # nothing in flight: not counted
    for _ in range(5):
        interrupter.progress("sealed", {"rollout_id": "r", "attempt": 0})
    assert struck == [] and interrupter.countdown is None
    interrupter.progress("snapshot", {"result": Result(2)})
    assert interrupter.countdown is not None and 1 <= interrupter.countdown <= (30 - 6) // 3
    for _ in range(30):
        interrupter.progress("sealed", {"rollout_id": "r", "attempt": 0})
    assert len(struck) == 1
    assert struck[0]["kind"] == KILL and struck[0]["snapshots"] == 2
    assert struck[0]["finished"] < 30  # the job was still running


def test_a_restore_kill_is_not_the_interrupters(tmp_path: Path) -> None:
    """Kills inside a restore are crash points; the progress interrupter never strikes them."""
    struck: list[dict[str, Any]] = []
    interrupter = Interrupter(
        Interruption(KILL_IN_RESTORE, restore_point=RESTORE_POINTS[0]),
        total=5,
        finished=0,
        strike=struck.append,
    )
    interrupter.progress("snapshot", {"result": Result(3)})
    for _ in range(5):
        interrupter.progress("sealed", {})
    assert struck == []


def test_a_runs_command_line_names_the_run_its_interruption_and_a_fresh_start() -> None:
    """--incarnation is required; --interrupt reads back as the plan; --allow-fresh-start."""
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    plan = Interruption(kind=KILL, after_snapshots=2, seed=5)
    args = parser.parse_args(["--incarnation", "2", "--interrupt", plan.to_arg()])
    assert (args.incarnation, args.allow_fresh_start) == (2, False)
    assert Interruption.from_arg(args.interrupt) == plan
    assert parser.parse_args(["--incarnation", "1", "--allow-fresh-start"]).allow_fresh_start
    with pytest.raises(SystemExit):
        parser.parse_args([])
