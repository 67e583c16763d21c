"""Tests for envckpt.demo.nemo_gym_verdict: every check fails on a tampered copy of a real run.

The record is the one ``envckpt demo --nemo-gym`` left (``conftest.nemo_gym_run``);
each tampering changes a copy of it the way a broken restore would.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from envckpt.demo.nemo_gym_verdict import NemoGymRecord, judge_nemo_gym, read_nemo_gym_run
from envckpt.nemo_gym import evidence

Tamper = Callable[[NemoGymRecord], None]


@pytest.fixture(scope="module")
def record(nemo_gym_run: Any) -> NemoGymRecord:
    assert nemo_gym_run.code == 0, nemo_gym_run.out + nemo_gym_run.err
    return read_nemo_gym_run(nemo_gym_run.directory)


def _first(record: NemoGymRecord) -> dict[str, Any]:
    return record.run.results[sorted(record.run.results)[0]]


def _continued(record: NemoGymRecord) -> dict[str, Any]:
    rid = evidence.continued_from_turn(record.run.results)[0]
    return record.run.results[rid]


def _counter(record: NemoGymRecord) -> tuple[str, dict[str, Any]]:
    rid = next(r for r in sorted(record.run.results) if "initial_count" in record.tasks[r])
    return rid, record.run.results[rid]


def _kept_increment(record: NemoGymRecord) -> dict[str, Any]:
    _, result = _counter(record)
    kept = set(result["envckpt"]["applications"])
    return next(
        e
        for e in record.run.audit
        if e["application"] in kept and e["route"] == evidence.INCREMENT_ROUTE
    )


def _drop_result(record: NemoGymRecord) -> None:
    del record.run.results[sorted(record.run.results)[0]]


def _reward_differs(record: NemoGymRecord) -> None:
    _first(record)["reward"] = 0.0


def _answer_differs(record: NemoGymRecord) -> None:
    _first(record)["final_text"] += " (edited)"


def _both_runs_unrewarded(record: NemoGymRecord) -> None:
    rid = sorted(record.run.results)[0]
    record.run.results[rid]["reward"] = record.control[rid]["reward"] = 0.0


def _increment_logged_twice(record: NemoGymRecord) -> None:
    record.run.audit.append(copy.deepcopy(_kept_increment(record)))


def _increment_not_logged(record: NemoGymRecord) -> None:
    kept = _kept_increment(record)["application"]
    record.run.audit[:] = [e for e in record.run.audit if e["application"] != kept]


def _increment_kept_twice(record: NemoGymRecord) -> None:
    # A restored session applied a saved increment again under a new application.
    entry = copy.deepcopy(_kept_increment(record))
    entry["application"] = "replayed/1"
    record.run.audit.append(entry)
    _, result = _counter(record)
    result["envckpt"]["applications"].append("replayed/1")


def _counter_moved_wrongly(record: NemoGymRecord) -> None:
    _kept_increment(record)["state"]["counter"] += 100


def _row_missing(record: NemoGymRecord) -> None:
    del record.rows[_first(record)["staging_keys"][0]]


def _stray_row(record: NemoGymRecord) -> None:
    key = _first(record)["staging_keys"][0]
    capture_key, payload = record.rows[key]
    record.rows[f"{capture_key}/stray-call"] = (capture_key, payload)


def _chain_broken(record: NemoGymRecord) -> None:
    key = _continued(record)["staging_keys"][-1]
    capture_key, payload = record.rows[key]
    entry = json.loads(payload)
    entry["prompt_token_ids"] = [7] * len(entry["prompt_token_ids"])
    record.rows[key] = (capture_key, json.dumps(entry))


def _nothing_continued_from_a_turn(record: NemoGymRecord) -> None:
    for result in record.run.results.values():
        for marker in result["envckpt"]["continued"]:
            marker["step"] = 0


def _continuation_no_restore_made(record: NemoGymRecord) -> None:
    _first(record)["envckpt"]["continued"].append({"attempt": 9, "phase": "loop", "step": 2})


def _restore_continuation_unrecorded(record: NemoGymRecord) -> None:
    _continued(record)["envckpt"]["continued"].clear()


def _no_strike(record: NemoGymRecord) -> None:
    record.run.strikes = [s for s in record.run.strikes if s.incarnation != 1]


def _struck_before_a_snapshot(record: NemoGymRecord) -> None:
    record.run.strikes = [
        replace(s, snapshots=0) if s.incarnation == 1 else s for s in record.run.strikes
    ]


def _survived_its_kill(record: NemoGymRecord) -> None:
    record.run.exits[1] = 0


def _restart_started_fresh(record: NemoGymRecord) -> None:
    record.run.restores = [
        replace(r, snapshot=None, continued=frozenset()) if r.incarnation > 1 else r
        for r in record.run.restores
    ]


def _last_run_failed(record: NemoGymRecord) -> None:
    record.run.exits[max(record.run.exits)] = 1


def _no_done_event(record: NemoGymRecord) -> None:
    record.run.done = False


FINISHED = "every rollout finished exactly once"
REWARDS = "every reward equals an uninterrupted run's"
COUNTER = "every counter increment applied exactly once (resources server's audit)"
ROWS = "token rows consistent with staging keys"
CONTINUED = "rollouts continued from a saved turn"
MATCHED = "every continued rollout matches a restore"
STRUCK = "every planned interruption struck after a published snapshot"
RESTORED = "every restart restored a snapshot"
FINISHED_CLEANLY = "the job finished cleanly"

TAMPERINGS: dict[str, tuple[Tamper, str]] = {
    "missing-result": (_drop_result, FINISHED),
    "reward-differs": (_reward_differs, REWARDS),
    "answer-differs": (_answer_differs, REWARDS),
    "both-runs-unrewarded": (_both_runs_unrewarded, REWARDS),
    "increment-logged-twice": (_increment_logged_twice, COUNTER),
    "increment-not-logged": (_increment_not_logged, COUNTER),
    "increment-kept-twice": (_increment_kept_twice, COUNTER),
    "counter-moved-wrongly": (_counter_moved_wrongly, COUNTER),
    "row-missing": (_row_missing, ROWS),
    "stray-row": (_stray_row, ROWS),
    "chain-broken": (_chain_broken, ROWS),
    "nothing-continued-from-a-turn": (_nothing_continued_from_a_turn, CONTINUED),
    "continuation-no-restore-made": (_continuation_no_restore_made, MATCHED),
    "restore-continuation-unrecorded": (_restore_continuation_unrecorded, MATCHED),
    "planned-kill-missing": (_no_strike, STRUCK),
    "kill-before-any-snapshot": (_struck_before_a_snapshot, STRUCK),
    "kill-not-fatal": (_survived_its_kill, STRUCK),
    "restart-started-fresh": (_restart_started_fresh, RESTORED),
    "last-run-failed": (_last_run_failed, FINISHED_CLEANLY),
    "no-done-event": (_no_done_event, FINISHED_CLEANLY),
}


# Every check of the verdict, in the order it reports them.
ALL_CHECKS = (
    FINISHED,
    REWARDS,
    COUNTER,
    ROWS,
    CONTINUED,
    MATCHED,
    STRUCK,
    RESTORED,
    FINISHED_CLEANLY,
)


def test_the_untampered_run_passes_every_check_with_its_numbers(record: NemoGymRecord) -> None:
    """Nine checks pass; the numbers are the evidence's counts."""
    verdict = judge_nemo_gym(record)
    assert verdict.passed, verdict.render()
    assert [name for name, _, _ in verdict.checks] == list(ALL_CHECKS)
    results = record.run.results
    assert verdict.numbers["continued_from_saved_turn"] == len(
        evidence.continued_from_turn(results)
    )
    assert verdict.numbers["turns_saved"] == evidence.turns_saved(results) > 0
    assert verdict.numbers["turns_recomputed"] == len(
        evidence.lost_tool_calls(results, record.run.audit)
    )


def test_every_check_is_tampered_at_least_once() -> None:
    """No check of the verdict goes untested."""
    assert {check for _, check in TAMPERINGS.values()} == set(ALL_CHECKS)


@pytest.mark.parametrize("tampering", sorted(TAMPERINGS))
def test_every_check_fails_on_its_tampering(record: NemoGymRecord, tampering: str) -> None:
    """Each tampering fails the check it targets (and so the verdict)."""
    record = copy.deepcopy(record)
    tamper, check = TAMPERINGS[tampering]
    tamper(record)
    verdict = judge_nemo_gym(record)
    assert check in verdict.failed(), verdict.render()
    assert not verdict.passed
