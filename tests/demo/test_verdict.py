"""Tests for envckpt.demo.verdict: every check fails on a tampered record; the counting is right.

Two real in-process runs are shared by the module (two kills, one of them
inside a restore; and a preemption); the tampering tests change copies of
their records. The counting tests build small records by hand: several
restores, a rollout continued twice, rollouts saved at turn 0.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import structlog

from envckpt.demo.inprocess import run_demo
from envckpt.demo.plan import KILL, KILL_IN_RESTORE, PREEMPT, Interruption
from envckpt.demo.report import NUMBERS
from envckpt.demo.scenario import DemoSettings, make_tasks
from envckpt.demo.verdict import (
    KILLED,
    RestoreRecord,
    RunRecord,
    Strike,
    judge,
    read_run,
)
from envckpt.sim.gym import expected_transcript

Tamper = Callable[[RunRecord], None]


def small_settings(directory: Path) -> DemoSettings:
    return DemoSettings(
        instances=2,
        rollouts=12,
        seed=1,
        directory=directory,
        snapshot_every=0.2,
        in_flight_per_instance=2,
    )


def run_in_process(directory: Path, plan: list[Interruption]) -> tuple[DemoSettings, RunRecord]:
    settings = small_settings(directory)
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    try:
        verdict, text = asyncio.run(run_demo(settings, plan))
    finally:
        structlog.configure(**saved)
    assert verdict.passed, text + "\n" + verdict.render()
    return settings, read_run(directory)


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoSettings, RunRecord]:
    plan = [
        Interruption(KILL, after_snapshots=1, seed=7),
        Interruption(KILL_IN_RESTORE, restore_point="restore.environment_restored"),
    ]
    return run_in_process(tmp_path_factory.mktemp("killed"), plan)


@pytest.fixture(scope="module")
def preempted_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoSettings, RunRecord]:
    return run_in_process(
        tmp_path_factory.mktemp("preempted"), [Interruption(PREEMPT, after_snapshots=1, seed=3)]
    )


def failed(settings: DemoSettings, record: RunRecord) -> list[str]:
    return judge(settings, record).failed()


def failed_once(run: tuple[DemoSettings, RunRecord], tamper: Tamper) -> list[str]:
    """The checks a copy of ``run``'s record fails once ``tamper`` changed it."""
    settings, record = run
    record = copy.deepcopy(record)
    tamper(record)
    return failed(settings, record)


def _first(record: RunRecord) -> dict[str, Any]:
    return record.results[sorted(record.results)[0]]


def _continued(record: RunRecord) -> dict[str, Any]:
    pairs = {pair for r in record.restores for pair in r.continued}
    rollout_id = next(
        rid for rid, r in sorted(record.results.items()) if (rid, r["episode"]["attempt"]) in pairs
    )
    return record.results[rollout_id]


def _fresh(record: RunRecord) -> dict[str, Any]:
    return next(r for _, r in sorted(record.results.items()) if r["resumed_from_turn"] == 0)


def _drop_result(record: RunRecord) -> None:
    del record.results[sorted(record.results)[0]]


def _wrong_transcript(record: RunRecord) -> None:
    _first(record)["transcript"][-1] += " (edited)"


def _turn_twice(record: RunRecord) -> None:
    turns = _first(record)["turns"]
    turns.append(copy.deepcopy(turns[0]))


def _audit_missing(record: RunRecord) -> None:
    kept = _first(record)["turns"][0]["application"]
    record.audit[:] = [e for e in record.audit if e["application"] != kept]


def _audit_doubled(record: RunRecord) -> None:
    kept = _first(record)["turns"][0]["application"]
    record.audit.append(copy.deepcopy(next(e for e in record.audit if e["application"] == kept)))


def _audit_disagrees(record: RunRecord) -> None:
    kept = _first(record)["turns"][0]["application"]
    next(e for e in record.audit if e["application"] == kept)["value"] += 1


def _nothing_continued(record: RunRecord) -> None:
    # Every result claims a fresh run of its final attempt: no saved turn was used.
    for result in record.results.values():
        result["resumed_from_turn"] = 0
        for turn in result["turns"]:
            turn["attempt"] = result["episode"]["attempt"]


def _claims_a_resume(record: RunRecord) -> None:
    _fresh(record)["resumed_from_turn"] = 2


def _carried_turn_of_the_final_attempt(record: RunRecord) -> None:
    result = _continued(record)
    result["turns"][0]["attempt"] = result["episode"]["attempt"]


def _no_strike(record: RunRecord) -> None:
    record.strikes = [s for s in record.strikes if s.incarnation != 1]


def _struck_before_a_snapshot(record: RunRecord) -> None:
    record.strikes = [replace(s, snapshots=0) if s.incarnation == 1 else s for s in record.strikes]


def _survived_its_kill(record: RunRecord) -> None:
    record.exits[1] = 0


def _restart_started_fresh(record: RunRecord) -> None:
    record.restores = [
        replace(r, snapshot=None, continued=frozenset()) if r.incarnation > 1 else r
        for r in record.restores
    ]


def _last_run_failed(record: RunRecord) -> None:
    record.exits[max(record.exits)] = 1


def _no_done_event(record: RunRecord) -> None:
    record.done = False


TAMPERINGS: dict[str, tuple[Tamper, str]] = {
    "missing-result": (_drop_result, "every rollout finished exactly once"),
    "wrong-transcript": (_wrong_transcript, "every transcript equals an uninterrupted run"),
    "turn-applied-twice": (_turn_twice, "no turn's tool effect applied twice in any final result"),
    "audit-entry-missing": (_audit_missing, "tool effects applied exactly once (audit log)"),
    "audit-entry-doubled": (_audit_doubled, "tool effects applied exactly once (audit log)"),
    "audit-entry-disagrees": (_audit_disagrees, "tool effects applied exactly once (audit log)"),
    "nothing-continued": (_nothing_continued, "rollouts continued from a saved turn"),
    "resume-no-restore-made": (_claims_a_resume, "every continued rollout matches a restore"),
    "carried-turn-misattributed": (
        _carried_turn_of_the_final_attempt,
        "every continued rollout matches a restore",
    ),
    "planned-kill-missing": (
        _no_strike,
        "every planned interruption struck after a published snapshot",
    ),
    "kill-before-any-snapshot": (
        _struck_before_a_snapshot,
        "every planned interruption struck after a published snapshot",
    ),
    "kill-not-fatal": (
        _survived_its_kill,
        "every planned interruption struck after a published snapshot",
    ),
    "restart-started-fresh": (_restart_started_fresh, "every restart restored a snapshot"),
    "last-run-failed": (_last_run_failed, "the job finished cleanly"),
    "no-done-event": (_no_done_event, "the job finished cleanly"),
}


def test_the_untampered_runs_pass_every_check(
    killed_run: tuple[DemoSettings, RunRecord], preempted_run: tuple[DemoSettings, RunRecord]
) -> None:
    """Both real runs pass; the preempted one also has its two preemption checks."""
    settings, record = killed_run
    verdict = judge(settings, record)
    assert verdict.passed and len(verdict.checks) == 9
    assert verdict.numbers["kills"] == 2 and verdict.numbers["restores"] == 1
    assert verdict.numbers["continued_from_saved_turn"] > 0
    assert verdict.numbers["turns_saved"] > 0
    settings, record = preempted_run
    verdict = judge(settings, record)
    assert verdict.passed and len(verdict.checks) == 11
    assert verdict.numbers["turns_recomputed"] == 0


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_every_check_fails_on_its_tampering(
    killed_run: tuple[DemoSettings, RunRecord], tampering: str
) -> None:
    """Each tampering fails the check it targets (and the verdict)."""
    tamper, check = TAMPERINGS[tampering]
    assert check in failed_once(killed_run, tamper)


def _final_snapshot_lost(record: RunRecord) -> None:
    record.final_snapshots = dict.fromkeys(record.final_snapshots)


def _restart_used_another_snapshot(record: RunRecord) -> None:
    record.restores = [
        replace(r, snapshot="rollouts-another") if r.incarnation == 2 else r
        for r in record.restores
    ]


def _a_turn_redone(record: RunRecord) -> None:
    record.audit.append(dict(record.audit[0], application="dead-process/0"))


PREEMPT_TAMPERINGS: dict[str, tuple[Tamper, str]] = {
    "final-snapshot-lost": (
        _final_snapshot_lost,
        "each preemption published a final snapshot the restart used",
    ),
    "restart-used-another": (
        _restart_used_another_snapshot,
        "each preemption published a final snapshot the restart used",
    ),
    "turn-redone": (_a_turn_redone, "no turn was redone after a preemption"),
}


@pytest.mark.parametrize("tampering", sorted(PREEMPT_TAMPERINGS))
def test_every_preemption_check_fails_on_its_tampering(
    preempted_run: tuple[DemoSettings, RunRecord], tampering: str
) -> None:
    """The final snapshot must exist and be the one restored; no turn may be recomputed."""
    tamper, check = PREEMPT_TAMPERINGS[tampering]
    assert failed_once(preempted_run, tamper) == [check]


def test_verdict_json_has_exactly_the_documented_fields(
    killed_run: tuple[DemoSettings, RunRecord],
) -> None:
    """passed, the eight numbers, and one entry per check with its detail."""
    settings, _ = killed_run
    document = json.loads((settings.directory / "verdict.json").read_text())
    assert set(document) == {"passed", "checks", *NUMBERS}
    assert document["passed"] is True
    assert all(set(c) == {"check", "passed", "detail"} and c["detail"] for c in document["checks"])
    assert document == judge(settings, read_run(settings.directory)).to_json()


# ---- counting, on hand-made records ---------------------------------------------------


class Builder:
    """Results and audit entries for hand-made records, consistent with the simulated Gym."""

    def __init__(self, directory: Path, rollouts: int) -> None:
        self.settings = DemoSettings(instances=1, rollouts=rollouts, directory=directory)
        self.tasks = {task.rollout_id: task for task in make_tasks(self.settings)}
        self.results: dict[str, dict[str, Any]] = {}
        self.audit: list[dict[str, Any]] = []

    def result(self, index: int, attempts: list[int], *, resumed: int) -> None:
        """A final result whose turn t was done by attempt ``attempts[t]``."""
        task = self.tasks[f"rollout-{index:03d}"]
        turns = task.task["turns"]
        attempts = (attempts + [attempts[-1]] * turns)[:turns]
        entries = []
        for turn, attempt in enumerate(attempts):
            application = f"p{attempt}/{task.rollout_id}/{turn}"
            entries.append(
                {"turn": turn, "attempt": attempt, "value": turn, "application": application}
            )
            self.audit.append(
                {
                    "rollout_id": task.rollout_id,
                    "turn": turn,
                    "value": turn,
                    "application": application,
                }
            )
        self.results[task.rollout_id] = {
            "episode": {"rollout_id": task.rollout_id, "attempt": attempts[-1]},
            "resumed_from_turn": resumed,
            "transcript": expected_transcript(task.rollout_id, task.task, seed=self.settings.seed),
            "turns": entries,
        }

    def record(self, restores: list[RestoreRecord], exits: dict[int, int | None]) -> RunRecord:
        return RunRecord(
            results=self.results,
            audit=self.audit,
            exits=exits,
            restores=restores,
            done=True,
        )


def test_continuations_are_counted_across_several_restores(tmp_path: Path) -> None:
    """Continued rollouts of every restore count (one continued twice, once); turns per restore."""
    b = Builder(tmp_path, rollouts=4)
    b.result(0, [0], resumed=0)
    b.result(1, [0, 0, 1], resumed=2)  # continued by restore 2, finished before crash 2
    b.result(2, [0, 0, 0, 1], resumed=3)  # continued by restore 3
    b.result(3, [0, 1, 2], resumed=2)  # continued by both: turn 0 saved twice, turn 1 once
    restores = [
        RestoreRecord(1, None),
        RestoreRecord(2, "s1", frozenset({("rollout-001", 1), ("rollout-003", 1)})),
        RestoreRecord(3, "s2", frozenset({("rollout-002", 1), ("rollout-003", 2)})),
    ]
    verdict = judge(b.settings, b.record(restores, {1: KILLED, 2: KILLED, 3: 0}))
    assert verdict.passed, verdict.render()
    assert verdict.numbers["continued_from_saved_turn"] == 3
    assert verdict.numbers["restores"] == 2
    assert verdict.numbers["turns_saved"] == 2 + 3 + (2 + 1)
    assert verdict.numbers["turns_recomputed"] == 0
    # Judged by the last restore alone, rollout-001 would look like an unexplained resume.
    only_last = [restores[0], restores[2]]
    assert (
        "every continued rollout matches a restore"
        in judge(b.settings, b.record(only_last, {1: KILLED, 2: 0})).failed()
    )


def test_rollouts_saved_at_turn_zero_are_continued_but_save_no_turn(tmp_path: Path) -> None:
    """A restore that continued a rollout at turn 0 is consistent, and counts as no saved turn."""
    b = Builder(tmp_path, rollouts=2)
    b.result(0, [1], resumed=0)  # saved before its first turn: continued at turn 0
    b.result(1, [0, 0, 1], resumed=2)
    restores = [
        RestoreRecord(1, None),
        RestoreRecord(2, "s1", frozenset({("rollout-000", 1), ("rollout-001", 1)})),
    ]
    verdict = judge(b.settings, b.record(restores, {1: KILLED, 2: 0}))
    assert verdict.passed, verdict.render()
    assert verdict.numbers["continued_from_saved_turn"] == 1
    assert verdict.numbers["turns_saved"] == 2
    detail = dict((name, d) for name, _, d in verdict.checks)[
        "rollouts continued from a saved turn"
    ]
    assert "1 saved at turn 0" in detail
    # Only turn-0 saves: nothing was continued from a saved turn, and the verdict says so.
    b = Builder(tmp_path, rollouts=2)
    b.result(0, [1], resumed=0)
    b.result(1, [1], resumed=0)
    verdict = judge(b.settings, b.record(restores, {1: KILLED, 2: 0}))
    assert verdict.failed() == ["rollouts continued from a saved turn"]


def test_recomputed_turns_are_the_effects_no_result_kept(tmp_path: Path) -> None:
    """An effect applied by a process that died unsaved counts as a recomputed turn."""
    b = Builder(tmp_path, rollouts=1)
    b.result(0, [0, 0, 1], resumed=2)
    b.audit.append({"rollout_id": "rollout-000", "turn": 2, "value": 2, "application": "dead/1"})
    restores = [RestoreRecord(1, None), RestoreRecord(2, "s1", frozenset({("rollout-000", 1)}))]
    verdict = judge(b.settings, b.record(restores, {1: KILLED, 2: 0}))
    assert verdict.passed and verdict.numbers["turns_recomputed"] == 1
    planned = b.record(restores, {1: KILLED, 2: 0})
    planned.planned = [Interruption(KILL)]
    planned.strikes = [Strike(1, KILL, snapshots=1)]
    assert judge(b.settings, planned).numbers["kills"] == 1


# ---- planned and struck, requeues, the demo's own interruption ------------------------


def a_third_kill_planned(
    run: tuple[DemoSettings, RunRecord],
) -> tuple[DemoSettings, RunRecord]:
    """``run`` with a copy of its record that planned a third kill (as --kills 3)."""
    settings, record = run
    record = copy.deepcopy(record)
    record.planned = [*record.planned, Interruption(KILL, after_snapshots=1, seed=5)]
    return settings, record


def test_a_planned_kill_the_job_finished_before_is_no_failure(
    killed_run: tuple[DemoSettings, RunRecord],
) -> None:
    """--kills 3 on a job that finished before the third: PASS, planned vs struck stated."""
    settings, record = a_third_kill_planned(killed_run)
    verdict = judge(settings, record)
    assert verdict.passed, verdict.render()
    assert (verdict.numbers["kills"], verdict.numbers["kills_planned"]) == (2, 3)
    detail = next(d for name, _, d in verdict.checks if name.startswith("every planned"))
    assert "2 struck of 3 planned" in detail and "the job finished first" in detail


def test_a_planned_kill_missing_from_a_job_that_did_not_finish_still_fails(
    killed_run: tuple[DemoSettings, RunRecord],
) -> None:
    """Tampered: the same, but the job never finished: the missing strike is a failure."""
    settings, record = a_third_kill_planned(killed_run)
    record.done = False
    assert "every planned interruption struck after a published snapshot" in failed(
        settings, record
    )


def test_a_requeue_after_the_finish_must_change_nothing(
    killed_run: tuple[DemoSettings, RunRecord],
) -> None:
    """A run that found the job finished passes when its exit is 0 and results unchanged;
    tampered (results changed, or a failing exit) it fails."""
    settings, record = killed_run
    requeue = max(record.exits) + 1
    good = copy.deepcopy(record)
    good.exits[requeue], good.requeues[requeue] = 0, True
    verdict = judge(settings, good)
    assert verdict.passed and verdict.numbers["requeues_after_finish"] == 1
    changed = copy.deepcopy(good)
    changed.requeues[requeue] = False
    assert failed(settings, changed) == ["every run after the job finished was a no-op"]
    crashed = copy.deepcopy(good)
    crashed.exits[requeue] = 1
    assert "every run after the job finished was a no-op" in failed(settings, crashed)


def test_a_run_cut_short_by_the_demo_is_not_held_to_its_plan(
    killed_run: tuple[DemoSettings, RunRecord],
) -> None:
    """The demo itself was killed during run 1 (no strike, no exit code): not a failure."""
    settings, record = killed_run
    record = copy.deepcopy(record)
    record.strikes = [s for s in record.strikes if s.incarnation != 1]
    record.exits[1] = None
    record.cut_short.add(1)
    verdict = judge(settings, record)
    assert verdict.passed, verdict.render()
    assert verdict.numbers["kills"] == 1 and verdict.numbers["kills_planned"] == 2


def test_the_longest_pause_is_the_largest_snapshot_pause(
    killed_run: tuple[DemoSettings, RunRecord],
) -> None:
    """max_pause_seconds: the largest pause any published snapshot held the environment."""
    settings, record = killed_run
    verdict = judge(settings, record)
    assert record.pauses and verdict.numbers["max_pause_seconds"] == round(max(record.pauses), 3)
