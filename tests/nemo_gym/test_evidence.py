"""Tests that each fact the end-to-end test relies on is seen failing on a tampered input."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

pytest.importorskip("nemo_gym.token_id_capture")

from nemo_gym.token_id_capture import TokenEntry, stamp_lineage
from nemo_gym.token_id_capture.records import ParentResolutionStatus

from envckpt.nemo_gym import evidence, examples

TASK = examples.counter_task([2, 3], initial=1)


def result(**envckpt: Any) -> dict[str, Any]:
    record = {"capture_key": "c-a1", "attempt": 1, "continued": [], "applications": [], "steps": 3}
    record.update(envckpt)
    return {"reward": 1.0, "final_text": "The count is 6.", "staging_keys": [], "envckpt": record}


def audit_line(
    app: str, route: str, rid: str = "c", count: int | None = None, counter: int = 0
) -> dict[str, Any]:
    return {
        "application": app,
        "rollout_id": rid,
        "route": route,
        "request": None if count is None else {"count": count},
        "state": {"counter": counter},
    }


def good_audit() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    results = {"c": result(applications=["p/1", "q/2", "q/3", "q/4"])}
    audit = [
        audit_line("p/1", "/seed_session", counter=1),
        audit_line("p/2", "/increment_counter", count=2, counter=3),  # lost with its process
        audit_line("q/2", "/increment_counter", count=2, counter=3),
        audit_line("q/3", "/increment_counter", count=3, counter=6),
        audit_line("q/4", "/verify", counter=6),
    ]
    return results, audit


def test_rewards_must_match_the_uninterrupted_run() -> None:
    """A different reward, a different answer or a missing rollout is reported."""
    ours = {"c": result()}
    assert evidence.reward_mismatches(ours, copy.deepcopy(ours)) == []
    worse = {"c": {**result(), "reward": 0.0}}
    assert evidence.reward_mismatches(ours, worse) == ["c: reward 1.0 != 0.0"]
    other = {"c": {**result(), "final_text": "The count is 9."}}
    assert "final answer" in evidence.reward_mismatches(ours, other)[0]
    assert evidence.reward_mismatches({}, ours) == ["c: no result"]


def test_continued_means_from_a_saved_turn() -> None:
    """A continuation from step 0 (before any turn) does not count."""
    results = {
        "a": result(continued=[{"attempt": 1, "phase": "loop", "step": 2}]),
        "b": result(continued=[{"attempt": 1, "phase": "seed", "step": 0}]),
        "c": result(),
    }
    assert evidence.continued_from_turn(results) == ["a"]


def test_the_audit_accepts_kept_applications_once() -> None:
    """The untouched audit passes, and the lost application is listed as lost."""
    results, audit = good_audit()
    assert evidence.audit_problems(results, audit, {"c": TASK}) == []
    assert [e["application"] for e in evidence.lost_applications(results, audit)] == ["p/2"]


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (lambda r, a: a.append(copy.deepcopy(a[2])), "logged 2 times"),
        (lambda r, a: a[2].update(rollout_id="other"), "belongs to another rollout"),
        (
            lambda r, a: r["c"]["envckpt"]["applications"].insert(1, "p/2"),
            "increments kept [2, 2, 3]",
        ),
        (lambda r, a: a[3].update(state={"counter": 8}), "the counter was 8"),
        (lambda r, a: r["c"]["envckpt"]["applications"].append("z/9"), "logged 0 times"),
    ],
)
def test_the_audit_catches_a_tampered_run(tamper: Any, expected: str) -> None:
    """A repeated, foreign, doubled or inconsistent application is reported."""
    results, audit = good_audit()
    tamper(results, audit)
    problems = evidence.audit_problems(results, audit, {"c": TASK})
    assert any(expected in p for p in problems), problems


def entry(
    capture_key: str, call: str, prompt: list[int], generated: list[int], parent: Any = None
) -> TokenEntry:
    made = TokenEntry(
        rollout_id=capture_key,
        model_call_id=call,
        prompt_token_ids=prompt,
        generation_token_ids=generated,
        generation_log_probs=[-0.5] * len(generated),
    )
    status = ParentResolutionStatus.ROOT if parent is None else ParentResolutionStatus.RESOLVED
    return stamp_lineage(made, parent, parent_resolution=status)


def good_rows() -> tuple[dict[str, Any], dict[str, tuple[str, str]]]:
    first = entry("c", "a", [1, 2], [3])
    second = entry("c-a1", "b", [1, 2, 3, 4], [5], parent="a")
    rows = {
        "c/a": ("c", first.model_dump_json()),
        "c-a1/b": ("c-a1", second.model_dump_json()),
    }
    return {"c": {**result(), "staging_keys": ["c/a", "c-a1/b"]}}, rows


def test_token_rows_of_a_continued_rollout_form_one_chain() -> None:
    """Rows of two attempts, the second continuing the first's tokens, pass."""
    results, rows = good_rows()
    assert evidence.token_row_problems(results, rows) == []


def _break_prefix(rows: dict[str, tuple[str, str]]) -> None:
    payload = json.loads(rows["c-a1/b"][1])
    payload["prompt_token_ids"] = [9, 9, 9, 4]
    rows["c-a1/b"] = ("c-a1", json.dumps(payload))


def _second_child(rows: dict[str, tuple[str, str]], results: dict[str, Any]) -> None:
    again = entry("c-a1", "b2", [1, 2, 3, 4], [5], parent="a")
    rows["c-a1/b2"] = ("c-a1", again.model_dump_json())
    results["c"]["staging_keys"].append("c-a1/b2")


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (lambda r, rows: rows.pop("c/a"), "without a row"),
        (lambda r, rows: rows.update({"c/zz": ("c", rows["c/a"][1])}), "rows no result names"),
        (lambda r, rows: rows.update({"c/a": ("d", rows["c/a"][1])}), "filed under d"),
        (lambda r, rows: _break_prefix(rows), "does not continue its parent's tokens"),
        (lambda r, rows: _second_child(rows, r), "a turn ran twice"),
        (
            lambda r, rows: rows.update(
                {"c-a1/b": ("c-a1", entry("c-a1", "b", [1], [2]).model_dump_json())}
            ),
            "2 root calls",
        ),
    ],
)
def test_token_rows_catch_a_tampered_run(tamper: Any, expected: str) -> None:
    """A missing or stray row, a misfiled row, a broken chain or a repeated turn is reported."""
    results, rows = good_rows()
    tamper(results, rows)
    problems = evidence.token_row_problems(results, rows)
    assert any(expected in p for p in problems), problems


def continued_results() -> dict[str, Any]:
    return {
        "a": result(attempt=2, continued=[{"attempt": 1, "step": 2}, {"attempt": 2, "step": 3}]),
        "b": result(attempt=1, continued=[{"attempt": 1, "phase": "seed", "step": 0}]),
        "c": result(attempt=0),
    }


RESTORED = {("a", 1), ("a", 2), ("b", 1), ("x", 1)}


def test_continuations_match_restores_and_count_the_steps_they_kept() -> None:
    """Each continuation was a restore's; the steps they carried over add up."""
    results = continued_results()
    assert evidence.continuation_problems(results, RESTORED) == []
    assert evidence.turns_saved(results) == 2 + 3 + 0


@pytest.mark.parametrize(
    ("tamper", "expected"),
    [
        (lambda r: r["c"]["envckpt"]["continued"].append({"attempt": 0}), "no restore did that"),
        (lambda r: r["a"]["envckpt"]["continued"].pop(), "the result says not"),
        (lambda r: r["a"]["envckpt"].update(attempt=1), "no restore did that"),
        (lambda r: r["a"]["envckpt"]["continued"].reverse(), "out of order"),
    ],
)
def test_continuations_catch_a_tampered_run(tamper: Any, expected: str) -> None:
    """A continuation no restore made, or a restore's continuation the result lacks, is reported."""
    results = continued_results()
    tamper(results)
    problems = evidence.continuation_problems(results, RESTORED)
    assert any(expected in p for p in problems), problems


def test_lost_tool_calls_leave_out_session_setup_end_and_the_control_run() -> None:
    """Only tool calls of the job's own rollouts that no result kept count as redone."""
    results, audit = good_audit()
    audit += [
        audit_line("p/0", "/seed_session"),  # a session the killed process seeded
        audit_line("p/9", "/verify"),
        audit_line("k/1", "/increment_counter", rid="c.control", count=2),
    ]
    assert [e["application"] for e in evidence.lost_tool_calls(results, audit)] == ["p/2"]
