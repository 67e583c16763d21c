"""Tests for envckpt.http.workers.merge: every worker's answer merged into one reply."""

from __future__ import annotations

from typing import Any

import pytest

from envckpt.errors import ParticipantError
from envckpt.http.workers.merge import (
    LOST,
    SILENT,
    UNREGISTERED,
    Share,
    first_refusal,
    merged_commit_fields,
    merged_counters,
    merged_phase,
    merged_prepare,
    merged_report,
    merged_restore,
    merged_status,
    missing_workers,
    unanswered,
    worker_blockers,
)


def report(*blockers: str, live: int = 0, restarts: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "ready": not blockers,
        "blockers": list(blockers),
        "blocker_count": len(blockers),
        "counts": {"live": live, "in_flight": len(blockers)},
        "restarts": list(restarts),
    }


def status(phase: str = "idle", **fields: Any) -> dict[str, Any]:
    return {
        "kind": "model",
        "phase": phase,
        "checkpoint_id": None,
        "lease_expires_at": None,
        "retired_rollouts": 0,
        "served_traffic": False,
        "report": report(),
        **fields,
    }


def test_a_share_is_a_reply_or_a_problem_never_both() -> None:
    """A share without either, or with both, is refused."""
    with pytest.raises(ValueError):
        Share(0)
    with pytest.raises(ValueError):
        Share(0, 200, {}, problem=LOST)
    assert Share(0, 200, {}).ok and not Share(1, problem=LOST).ok


def test_worker_blockers_name_each_missing_or_restarted_worker() -> None:
    """Each worker without an answer is named with its reason and pid; a restart only for
    the checkpoint that was open when it started."""
    shares = [
        Share(0, 200, {}),
        Share(1, problem=LOST, pid=41),
        Share(2, problem=UNREGISTERED),
        Share(3, 200, {}, pid=77, joined_open=("c1",)),
        Share(4, problem=SILENT, pid=9),
    ]
    assert worker_blockers(shares, "c1") == [
        "worker-1:lost:pid-41",
        "worker-2:unregistered",
        "worker-3:restarted:pid-77",
        "worker-4:silent:pid-9",
    ]
    assert "worker-3:restarted:pid-77" not in worker_blockers(shares, "c2")


def test_merged_report_sums_counts_and_puts_worker_blockers_first() -> None:
    """Counts add up, episode blockers and restarts are unions, and any worker blocker makes
    the report not ready even when every worker was."""
    merged = merged_report(
        [report(live=2, restarts=("b",)), report("r2", live=3), report(live=1)], []
    )
    assert merged["counts"] == {"live": 6, "in_flight": 1}
    assert (merged["blockers"], merged["restarts"], merged["ready"]) == (["r2"], ["b"], False)
    calm = merged_report([report(live=1), report(live=1)], ["worker-1:lost"])
    assert calm["ready"] is False and calm["blockers"] == ["worker-1:lost"]
    assert merged_report([report(), report()], [])["ready"] is True


def test_merged_report_keeps_counting_blockers_past_the_cap() -> None:
    """Blockers a worker counted beyond the ones it listed still count."""
    capped = report("a")
    capped["blocker_count"] = 250
    merged = merged_report([capped, report("b")], ["worker-0:lost"])
    assert merged["blocker_count"] == 252


def test_phases_merge_to_the_common_one_or_preparing() -> None:
    """Workers that agree give their phase; workers that differ read as preparing."""
    assert merged_phase(["prepared", "prepared"]) == "prepared"
    assert merged_phase(["prepared", "preparing"]) == "preparing"
    assert merged_phase(["idle", "committed"]) == "preparing"


def test_prepare_is_prepared_only_when_every_worker_answered_prepared() -> None:
    """A prepared reply needs every worker prepared; a lost one leaves it preparing."""
    prepared = {"phase": "prepared", "report": report()}
    assert merged_prepare([Share(0, 200, prepared), Share(1, 200, prepared)], "c1") == {
        "phase": "prepared",
        "report": merged_report([report(), report()], []),
    }
    lost = merged_prepare([Share(0, 200, prepared), Share(1, problem=LOST, pid=5)], "c1")
    assert lost["phase"] == "preparing" and lost["report"]["blockers"] == ["worker-1:lost:pid-5"]
    restarted = Share(1, 200, prepared, pid=6, joined_open=("c1",))
    assert merged_prepare([Share(0, 200, prepared), restarted], "c1")["phase"] == "preparing"


def test_the_first_refusal_prefers_the_answering_worker_then_the_lowest_slot() -> None:
    """Errors win over replies; among them this worker's own, then by slot."""
    error = {"error": {"code": "stale_checkpoint", "detail": "x"}}
    other = {"error": {"code": "invalid_phase", "detail": "y"}}
    shares = [Share(0, 409, other), Share(1, 200, {}), Share(2, 409, error)]
    assert first_refusal(shares, own_slot=2) == (409, error)
    assert first_refusal(shares, own_slot=1) == (409, other)
    assert first_refusal([Share(0, 200, {})], own_slot=0) is None


def test_gone_workers_are_tolerated_only_where_asked_and_silent_ones_never() -> None:
    """Lost and unregistered workers may be skipped (resume, retire); a silent one may not."""
    shares = [Share(0, 200, {}), Share(1, problem=LOST), Share(2, problem=SILENT)]
    assert [s.slot for s in unanswered(shares, tolerate_gone=True)] == [2]
    assert [s.slot for s in unanswered(shares, tolerate_gone=False)] == [1, 2]
    code, body = missing_workers(unanswered(shares, tolerate_gone=False))
    assert code == 409 and body["error"]["code"] == "invalid_phase"
    assert "worker-1:lost" in body["error"]["detail"]


def test_status_merges_phases_leases_and_counts_workers() -> None:
    """Status counts the answering workers and the expected ones, takes the earliest lease
    and names a missing worker in its report."""
    shares = [
        Share(0, 200, status("prepared", checkpoint_id="c1", lease_expires_at=20.0)),
        Share(1, 200, status("prepared", checkpoint_id="c1", lease_expires_at=10.0)),
        Share(2, problem=LOST, pid=3),
    ]
    merged = merged_status(shares, expected=3, own_slot=0)
    assert (merged["workers"], merged["expected_workers"]) == (2, 3)
    assert (merged["checkpoint_id"], merged["lease_expires_at"]) == ("c1", 10.0)
    assert merged["phase"] == "prepared"
    assert merged["report"]["blockers"] == ["worker-2:lost:pid-3"]
    assert merged["report"]["ready"] is False
    idle = merged_status([Share(0, 200, status()), Share(1, 200, status())], expected=2, own_slot=1)
    assert (idle["phase"], idle["workers"], idle["report"]["ready"]) == ("idle", 2, True)


def test_status_counters_and_model_calls_are_the_sum_of_the_workers() -> None:
    """counters and model_calls add up over the workers; a setting stays, a last_* is the max."""
    counters = [
        {"admitted": 3, "refused": {"stale_attempt": 1}, "commits": 1, "last_commit_seconds": 0.5,
         "commit_seconds_total": 0.5},
        {"admitted": 4, "refused": {"stale_attempt": 2, "admission_closed": 1}, "commits": 1,
         "last_commit_seconds": 0.25, "commit_seconds_total": 0.25},
    ]  # fmt: skip
    calls = [
        {"policy": "refuse", "wait_share": 0.5, "in_flight": 1, "refused": 2},
        {"policy": "refuse", "wait_share": 0.5, "in_flight": 0, "refused": 3},
    ]
    shares = [
        Share(slot, 200, {**status(), "counters": c, "model_calls": m})
        for slot, (c, m) in enumerate(zip(counters, calls, strict=True))
    ]
    merged = merged_status(shares, expected=2, own_slot=1)
    assert merged["counters"] == {
        "admitted": 7,
        "refused": {"stale_attempt": 3, "admission_closed": 1},
        "commits": 2,
        "last_commit_seconds": 0.5,
        "commit_seconds_total": 0.75,
    }
    assert merged["model_calls"] == {
        "policy": "refuse",
        "wait_share": 0.5,
        "in_flight": 1,
        "refused": 5,
    }
    assert merged_counters([]) == {}


def test_restore_replies_merge_and_refuse_two_sources() -> None:
    """One restored list; workers that read different checkpoints are refused."""
    a = {"phase": "restored", "source_checkpoint_id": "s", "restored": ["b-a1"]}
    b = {"phase": "restored", "source_checkpoint_id": "s", "restored": ["a-a1"]}
    assert merged_restore([Share(0, 200, a), Share(1, 200, b)])["restored"] == ["a-a1", "b-a1"]
    with pytest.raises(ParticipantError):
        merged_restore([Share(0, 200, a), Share(1, 200, {**b, "source_checkpoint_id": "t"})])


def test_commit_fields_are_unions_and_a_clash_is_refused() -> None:
    """Episode lists and staging keys are sorted unions; an episode in two workers' staging
    map, or disagreeing scalars, is refused."""
    a = {"phase": "committed", "episode_ids": ["b"], "staging_keys_by_episode": {"b": ["k2"]},
         "staging_keys": ["k2"], "records": [["b", "{}"]]}  # fmt: skip
    b = {"phase": "committed", "episode_ids": ["a"], "staging_keys_by_episode": {"a": ["k1"]},
         "staging_keys": ["k1"], "records": [["a", "{}"]]}  # fmt: skip
    merged = merged_commit_fields([a, b])
    assert merged == {
        "phase": "committed",
        "episode_ids": ["a", "b"],
        "staging_keys_by_episode": {"a": ["k1"], "b": ["k2"]},
        "staging_keys": ["k1", "k2"],
    }
    with pytest.raises(ParticipantError):
        merged_commit_fields([a, {**b, "staging_keys_by_episode": {"b": ["k9"]}}])
    with pytest.raises(ParticipantError):
        merged_commit_fields([a, {**b, "phase": "prepared"}])
