"""The conformance suite's own verdicts, seen failing on tampered replies and directories.

No server is needed: ``judge`` and the named checks are fed replies and
status snapshots directly, the records check a directory written here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.participant import store
from envckpt.protocol import Kind

from conformance.cases import CASES, Case
from conformance.checks import CHECKS, Run, judge, records_problem
from conformance.runner import skip_reason
from conformance.starts import Ctx
from conformance.target import ControlClient, Participant, Reply, SimDriver, parse_base_urls

BY_ID = {case.id: case for case in CASES}
IDLE = {"kind": "model", "instance": "policy", "phase": "idle", "checkpoint_id": None,
        "lease_expires_at": None, "retired_rollouts": 0}  # fmt: skip


def participant(profile: str = "envckpt", driver: SimDriver | None = None) -> Participant:
    client = ControlClient("http://127.0.0.1:9", "t", httpx.Client())
    return Participant("model", Kind.MODEL, "export_restore", client, profile, driver)


def run_of(
    case: Case, reply: Reply, *, after: dict[str, Any] | None = None, profile: str = "envckpt"
) -> Run:
    ctx = Ctx(participant(profile), Path("/nonexistent"), case.start, finished_id="fin-1")
    body = {"checkpoint_id": "fin-1", "deadline_ts": 1.0, "episode_ids": [ctx.ep.to_wire()]}
    return Run(case, ctx, ctx.participant, body, reply, dict(IDLE), dict(after or IDLE))


def test_a_retire_under_a_finished_id_must_be_accepted() -> None:
    """The old stale_checkpoint answer to a cleanup call fails the row; the 200 passes."""
    case = BY_ID["retire-idle-200-finished_id"]
    stale = Reply(409, {"error": {"code": "stale_checkpoint", "detail": "x"}}, "")
    assert judge(run_of(case, stale))
    good = run_of(case, Reply(200, {}, ""))
    good.reply = Reply(200, {"retired": [good.ctx.ep.capture_key]}, "")
    assert judge(good) == [] and CHECKS["retired"](good) is None
    good.reply = Reply(200, {"retired": []}, "")
    assert CHECKS["retired"](good) is not None


def test_a_refusal_that_changed_the_phase_fails() -> None:
    """A refused call must leave the phase and the open id as they were."""
    case = BY_ID["renew-idle-invalid_phase"]
    reply = Reply(409, {"error": {"code": "invalid_phase", "detail": "x"}}, "")
    assert judge(run_of(case, reply)) == []
    opened = {**IDLE, "phase": "prepared", "checkpoint_id": "c"}
    assert any("changed" in p or "after" in p for p in judge(run_of(case, reply, after=opened)))
    wrong_code = Reply(409, {"error": {"code": "checkpoint_conflict", "detail": "x"}}, "")
    assert any("code" in p for p in judge(run_of(case, wrong_code)))


def test_missing_reply_keys_fail() -> None:
    """A 200 without the route's reply keys fails."""
    case = BY_ID["resume-idle-200-finished"]
    assert any("lacks" in p for p in judge(run_of(case, Reply(200, {"phase": "idle"}, ""))))
    assert CHECKS["idempotent"](
        run_of(case, Reply(200, {"phase": "idle", "idempotent": False}, ""))
    )


def test_a_bare_fastapi_422_passes_only_the_protocol_profile() -> None:
    """Gym answers a malformed body without the envelope; envckpt must send it."""
    case = BY_ID["prepare-idle-invalid_request-unknown_field"]
    bare = Reply(422, {"detail": [{"msg": "extra"}]}, "")
    assert judge(run_of(case, bare, profile="protocol")) == []
    assert judge(run_of(case, bare, profile="envckpt"))


def test_the_records_check_refuses_the_earlier_envckpt_shape(tmp_path: Path) -> None:
    """Records without Gym's episode_id envelope, or a wrong digest, fail the check."""
    episode = EnvironmentEpisode("r1", 2)
    for name, record in (
        ("gym-shape", store.to_record(episode, {"turn": 1})),
        ("old-shape", {"capture_key": "r1-a2", "state": {}}),
    ):
        store.write_checkpoint(
            tmp_path / name, kind="model", instance="policy", checkpoint_id="c1", records=[record]
        )
    assert records_problem(tmp_path / "gym-shape", "model", "policy") is None
    assert "episode_id" in (records_problem(tmp_path / "old-shape", "model", "policy") or "")
    directory = store.participant_dir(tmp_path / "gym-shape", "model", "policy")
    manifest = store.read_manifest(tmp_path / "gym-shape", kind="model", instance="policy")
    (directory / manifest.records_file).write_bytes(b'{"episode_id": 1}\n')
    assert "digest" in (records_problem(tmp_path / "gym-shape", "model", "policy") or "")


def test_a_replay_must_equal_the_recorded_reply() -> None:
    """replay checks compare the whole reply with the one the start recorded."""
    case = BY_ID["prepare-committed-200-replayed_after_commit"]
    run = run_of(case, Reply(200, {"phase": "prepared", "report": {"ready": True}}, ""))
    run.ctx.recorded["prepare"] = {"phase": "prepared", "report": {"ready": True}}
    assert CHECKS["replay:prepare"](run) is None
    run.ctx.recorded["prepare"] = {"phase": "prepared", "report": {"ready": True, "x": 1}}
    assert CHECKS["replay:prepare"](run) is not None


def test_rows_skip_what_the_target_cannot_show() -> None:
    """envckpt-only rows skip on the protocol profile; traffic rows without data routes."""
    strict = BY_ID["forget-idle-invalid_request-rollout_id_grammar"]
    assert skip_reason(participant("protocol"), strict) is not None
    assert skip_reason(participant("envckpt"), strict) is None
    traffic = BY_ID["forget-idle+held-200-held"]
    assert "data routes" in (skip_reason(participant("envckpt"), traffic) or "")


def test_base_urls_are_named_by_kind_or_position() -> None:
    """KIND=URL names a participant; a bare URL is urlN; a repeated name is refused."""
    assert parse_base_urls(["model=http://h:1", "http://h:2"]) == [
        ("model", "http://h:1"),
        ("url1", "http://h:2"),
    ]
    with pytest.raises(ValueError):
        parse_base_urls(["model=http://h:1", "model=http://h:2"])


MANIFEST = {
    "schema_version": 1,
    "kind": "model",
    "instance": "policy",
    "checkpoint_id": "c",
    "records_file": "records-x.jsonl",
    "records_sha256": "x",
    "record_count": 0,
}
REPORT = {"blockers": [], "blocker_count": 0, "counts": {}, "restarts": []}


def _ready(ready: bool) -> dict[str, Any]:
    return {"phase": "prepared", "report": {**REPORT, "ready": ready}}


def _blocked(ctx: Ctx, blockers: list[str]) -> dict[str, Any]:
    report = {**REPORT, "ready": False, "blockers": blockers, "blocker_count": len(blockers)}
    return {"phase": "preparing", "report": report}


# check -> (good reply body or status change, tampered one); a callable gets the Ctx.
TAMPERED: dict[str, tuple[Any, Any]] = {
    "ready": (_ready(True), _ready(False)),
    "blocked": (lambda c: _blocked(c, [c.ep.capture_key]), lambda c: _blocked(c, [])),
    "lease_extended": ({"lease_expires_at": 1300.0}, {"lease_expires_at": 1000.0}),
    "lease_kept": ({"lease_expires_at": 1000.0}, {"lease_expires_at": 1300.0}),
    "lease_null": ({"lease_expires_at": None}, {"lease_expires_at": 1000.0}),
    "source": ({"source_checkpoint_id": "pub-1"}, {"source_checkpoint_id": "other"}),
    "restored_next": (lambda c: {"restored": [c.ep.next_attempt().capture_key]}, {"restored": []}),
    "exported_ep": (lambda c: {"episode_ids": [c.ep.capture_key]}, {"episode_ids": []}),
    "exported_none": ({"episode_ids": []}, {"episode_ids": ["x"]}),
    "manifest": ({"manifest": MANIFEST}, {"manifest": {**MANIFEST, "episode_ids": []}}),
    "kind_extras": ({"staging_keys": [], "staging_keys_by_episode": {}}, {"staging_keys": []}),
    "forgotten": ({"forgotten": ["a", "b"]}, {"forgotten": ["b", "a"]}),
}
STATUS_CHECKS = {"lease_extended", "lease_kept", "lease_null"}


@pytest.mark.parametrize("name", sorted(TAMPERED))
def test_each_check_passes_the_right_answer_and_fails_a_tampered_one(name: str) -> None:
    """Every named check accepts what the protocol says and reports a tampered answer."""
    case = BY_ID["forget-idle-200-sorted"]
    verdicts = []
    for answer in TAMPERED[name]:
        run = run_of(case, Reply(200, {}, ""))
        run.ctx.published_id = "pub-1"
        run.body = {"rollout_ids": ["b", "a", "b"]}
        run.before = {**run.before, "lease_expires_at": 1000.0}
        value = answer(run.ctx) if callable(answer) else answer
        if name in STATUS_CHECKS:
            run.after = {**run.after, **value}
        else:
            run.reply = Reply(200, value, "")
        verdicts.append(CHECKS[name](run))
    assert verdicts[0] is None and verdicts[1] is not None, verdicts


def test_a_long_past_prepare_may_be_refused_only_as_deadline_exceeded() -> None:
    """lapsed_or_refused accepts deadline_exceeded and fails any other refusal."""
    case = next(c for c in CASES if c.note == "lease lapsed")
    refused = Reply(409, {"error": {"code": "deadline_exceeded", "detail": "x"}}, "")
    assert CHECKS["lapsed_or_refused"](run_of(case, refused)) is None
    stale = Reply(409, {"error": {"code": "stale_checkpoint", "detail": "x"}}, "")
    assert CHECKS["lapsed_or_refused"](run_of(case, stale)) is not None
