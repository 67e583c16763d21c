"""Tests for envckpt.participant.core: every participant rule of protocol.md section 4."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant import store
from envckpt.participant.core import DEFAULT_LEASE_GRACE_SECONDS, ParticipantCore
from envckpt.participant.hooks import NoState
from envckpt.participant.open_checkpoint import FINISHED_IDS_KEPT
from envckpt.participant.readiness import MAX_BLOCKERS_REPORTED

from helpers.participant_doubles import START, JsonStateHooks, Turn, drain_tasks, ep, run_turn

GRACE = DEFAULT_LEASE_GRACE_SECONDS


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def hooks() -> JsonStateHooks:
    return JsonStateHooks("agent")


@pytest.fixture
def core(clock: FakeClock, hooks: JsonStateHooks) -> ParticipantCore:
    return ParticipantCore(server_name="agent", kind="agent", hooks=hooks, clock=clock)


def make_core(
    clock: FakeClock,
    hooks: Any = None,
    *,
    kind: str = "agent",
    mode: str = "export_restore",
    name: str = "agent",
) -> ParticipantCore:
    return ParticipantCore(
        server_name=name,
        kind=kind,
        mode=mode,
        hooks=hooks if hooks is not None else JsonStateHooks(kind),
        clock=clock,
    )


async def refused(code: str, call: Any) -> ParticipantError:
    """Await ``call`` and require it to fail with protocol error ``code``."""
    with pytest.raises(ParticipantError) as caught:
        await call
    assert caught.value.code == code, caught.value
    return caught.value


async def prepared_core(
    core: ParticipantCore, hooks: JsonStateHooks, cid: str = "c1", *episodes: EnvironmentEpisode
) -> dict[str, Any]:
    for episode in episodes or (ep("r1"), ep("r2")):
        await run_turn(core, hooks, episode, turn=3)
    reply = await core.prepare(cid, deadline_ts=core.clock.now() + 30)
    assert reply["phase"] == "prepared"
    return reply


def snapshot(core: ParticipantCore) -> tuple[Any, ...]:
    return (
        core.phase,
        core.checkpoint_id,
        core.lease_expires_at,
        {r: core.fence.mark(r) for r in ("r1", "r2", "r3")},
    )


def blocking_hook() -> tuple[threading.Event, threading.Event, Any]:
    """A before_publish hook that blocks its first call until released."""
    entered, release = threading.Event(), threading.Event()
    calls = [0]

    def hook() -> None:
        calls[0] += 1
        if calls[0] == 1:
            entered.set()
            assert release.wait(10), "test never released the write"

    return entered, release, hook


async def prepared_with_a_blocked_write(
    core: ParticipantCore, hooks: JsonStateHooks
) -> tuple[threading.Event, threading.Event]:
    """A prepared core whose next write stops before publishing until ``release`` is set."""
    await prepared_core(core, hooks)
    entered, release, hook = blocking_hook()
    core.before_publish.append(hook)
    return entered, release


def manifest_in(directory: Path) -> Path:
    """Where the agent's manifest stands once a commit to ``directory`` is published."""
    return store.participant_dir(directory, "agent", "agent") / store.MANIFEST_NAME


async def until(flag: threading.Event) -> None:
    for _ in range(1000):
        if flag.is_set():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("event never set")


# ------------------------------------------------------------------ construction


def test_unknown_kind_or_mode_is_refused(clock: FakeClock) -> None:
    """A core refuses a kind or mode the protocol does not define."""
    with pytest.raises(ValueError):
        make_core(clock, kind="judge")
    with pytest.raises(ValueError):
        make_core(clock, mode="sometimes")


async def test_status_reports_the_protocol_fields(core: ParticipantCore) -> None:
    """status names kind, mode, instance, phase, id, lease, marks and the report."""
    status = await core.status()
    assert status["kind"] == "agent"
    assert status["mode"] == "export_restore"
    assert status["instance"] == "agent"
    assert status["phase"] == "idle"
    assert status["checkpoint_id"] is None
    assert status["lease_expires_at"] is None
    assert status["retired_rollouts"] == 0
    assert status["report"]["ready"] is True


# --------------------------------------------------------------------- admission


async def test_admission_without_rollout_identity_is_refused(core: ParticipantCore) -> None:
    """Episode work without a rollout identity fails rollout_id_required."""
    with pytest.raises(ParticipantError) as caught:
        async with core.admit(None):
            pass
    assert caught.value.code == "rollout_id_required"
    assert caught.value.status == 400
    assert core.counters.refused == {"rollout_id_required": 1}


async def test_admission_is_closed_while_a_checkpoint_is_open(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """A new episode arriving while a checkpoint is open fails admission_closed."""
    await prepared_core(core, hooks)
    with pytest.raises(ParticipantError) as caught:
        async with core.admit(ep("new")):
            pass
    assert caught.value.code == "admission_closed"
    assert not core.served_traffic or core.fence.in_flight() == frozenset()


async def test_superseded_attempt_is_refused(core: ParticipantCore) -> None:
    """Once attempt 2 ran, attempt 1 of the same rollout fails stale_attempt."""
    async with core.admit(ep("r1", 2)):
        pass
    with pytest.raises(ParticipantError) as caught:
        async with core.admit(ep("r1", 1)):
            pass
    assert caught.value.code == "stale_attempt"
    async with core.admit(ep("r1", 2)):
        pass
    assert core.fence.is_current(ep("r1", 2)) and not core.fence.is_current(ep("r1", 1))


async def test_admit_tracks_in_flight_until_exit(core: ParticipantCore) -> None:
    """An admitted call is in flight until its context exits, even on an error."""
    with pytest.raises(RuntimeError):
        async with core.admit(ep("r1")):
            assert core.fence.in_flight() == {ep("r1")}
            raise RuntimeError("turn failed")
    assert core.fence.in_flight() == frozenset()
    assert core.served_traffic
    assert core.counters.admitted == 1


# ----------------------------------------------------------------------- prepare


async def test_prepare_from_idle_closes_admission_and_arms_the_lease(
    core: ParticipantCore, hooks: JsonStateHooks, clock: FakeClock
) -> None:
    """prepare from idle takes the id, closes admission and arms deadline + grace."""
    await run_turn(core, hooks, ep("r1"))
    deadline = clock.now() + 30
    reply = await core.prepare("c1", deadline_ts=deadline)
    assert reply == {
        "phase": "prepared",
        "report": {
            "ready": True,
            "blockers": [],
            "blocker_count": 0,
            "counts": {"live": 1, "in_flight": 0, "parked": 1, "restarts": 0},
            "restarts": [],
        },
    }
    assert core.phase == "prepared"
    assert core.checkpoint_id == "c1"
    assert core.lease_expires_at == deadline + GRACE
    assert hooks.admission_open is False
    assert clock.now() == START  # nothing was in flight, so nothing waited


async def test_lease_only_ever_moves_forward(core: ParticipantCore, clock: FakeClock) -> None:
    """lease_expires_at = max(previous, deadline_ts + grace) on every arming call."""
    late = clock.now() + 100
    await core.prepare("c1", deadline_ts=late)
    await core.prepare("c1", deadline_ts=clock.now() + 10)  # ready replay re-arms
    assert core.lease_expires_at == late + GRACE
    reply = await core.renew("c1", deadline_ts=clock.now() + 5)
    assert reply == {"lease_expires_at": late + GRACE}
    reply = await core.renew("c1", deadline_ts=late + 50)
    assert reply == {"lease_expires_at": late + 50 + GRACE}
    assert core.lease_expires_at == late + 50 + GRACE


async def test_prepare_waits_for_in_flight_calls(core: ParticipantCore, clock: FakeClock) -> None:
    """prepare returns ready once the in-flight call reaches its boundary."""
    turn = await Turn.start(core, ep("r1"))
    deadline = clock.now() + 30
    pending = asyncio.create_task(core.prepare("c1", deadline_ts=deadline))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not pending.done()
    assert core.phase == "preparing"
    await turn.finish()
    reply = await pending
    assert reply["phase"] == "prepared"
    assert reply["report"]["ready"] is True
    assert clock.now() < deadline


async def test_prepare_reports_capped_blockers_when_the_deadline_passes(
    core: ParticipantCore, hooks: JsonStateHooks, clock: FakeClock
) -> None:
    """Past the deadline prepare reports 100 sorted blockers, the full count, admission closed."""
    turns = [await Turn.start(core, ep(f"r{i:03d}")) for i in range(150)]
    deadline = clock.now() + 30
    reply = await core.prepare("c1", deadline_ts=deadline)
    report = reply["report"]
    assert reply["phase"] == "preparing"
    assert report["ready"] is False
    assert report["blocker_count"] == 150
    assert len(report["blockers"]) == MAX_BLOCKERS_REPORTED
    assert report["blockers"] == sorted(f"r{i:03d}" for i in range(100))
    assert report["counts"]["in_flight"] == 150
    assert clock.now() == deadline
    assert core.phase == "preparing"
    assert hooks.admission_open is False
    with pytest.raises(ParticipantError) as caught:
        async with core.admit(ep("late")):
            pass
    assert caught.value.code == "admission_closed"
    for turn in turns:
        await turn.finish()


async def test_repeated_prepare_on_preparing_waits_again(
    core: ParticipantCore, clock: FakeClock
) -> None:
    """A repeated prepare on preparing waits again and can then become ready."""
    turn = await Turn.start(core, ep("r1"))
    first = await core.prepare("c1", deadline_ts=clock.now() + 10)
    assert first["phase"] == "preparing"
    assert first["report"]["blockers"] == ["r1"]
    second_deadline = clock.now() + 10
    pending = asyncio.create_task(core.prepare("c1", deadline_ts=second_deadline))
    await asyncio.sleep(0)
    await turn.finish()
    second = await pending
    assert second["phase"] == "prepared"
    assert core.lease_expires_at == second_deadline + GRACE


async def test_ready_reply_is_replayed_verbatim(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """A repeat of a ready prepare returns the recorded reply, not a new report."""
    first = await prepared_core(core, hooks)
    hooks.put(ep("appeared-later"))
    second = await core.prepare("c1", deadline_ts=core.clock.now() + 30)
    assert second == first
    assert second["report"]["counts"]["live"] == 2


async def test_concurrent_repeat_prepare_replays_the_ready_reply(
    clock: FakeClock, hooks: JsonStateHooks
) -> None:
    """Two waiting prepares of one id both get the ready reply when the wait ends."""
    core = make_core(FakeClock(START, settle_rounds=500), hooks)
    turn = await Turn.start(core, ep("r1"))
    deadline = core.clock.now() + 30
    first = asyncio.create_task(core.prepare("c1", deadline_ts=deadline))
    await asyncio.sleep(0)
    second = asyncio.create_task(core.prepare("c1", deadline_ts=deadline))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    await turn.finish()
    replies = await asyncio.gather(first, second)
    assert [reply["phase"] for reply in replies] == ["prepared", "prepared"]
    assert replies[0] == replies[1]


async def test_failed_close_admission_reopens_and_stays_idle(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """If closing admission fails the participant reopens and stays idle, nothing armed."""
    hooks.fail_close = True
    error = await refused("checkpoint_error", core.prepare("c1", deadline_ts=START + 30))
    assert "closing admission failed" in error.detail
    assert hooks.calls == ["close", "open"]
    assert core.phase == "idle"
    assert core.checkpoint_id is None
    assert core.lease_expires_at is None
    async with core.admit(ep("r1")):
        pass
    hooks.fail_close = False
    assert (await core.prepare("c1", deadline_ts=START + 30))["phase"] == "prepared"


async def test_restart_only_reports_live_episodes_as_restarts_and_never_waits(
    clock: FakeClock,
) -> None:
    """A restart_only participant is ready at once and reports every live episode."""
    hooks = NoState()
    core = make_core(clock, hooks, mode="restart_only")
    hooks.live.update({ep("b"), ep("a", 2)})
    turn = await Turn.start(core, ep("c"))
    reply = await core.prepare("c1", deadline_ts=clock.now() + 30)
    assert reply["phase"] == "prepared"
    assert reply["report"]["blockers"] == []
    assert reply["report"]["restarts"] == ["a-a2", "b", "c"]
    assert reply["report"]["counts"]["restarts"] == 3
    assert clock.now() == START
    await turn.finish()


async def test_restart_only_commits_while_its_restarts_are_in_flight(
    clock: FakeClock, tmp_path: Path
) -> None:
    """In-flight work of a restart_only participant does not make commit 'no longer ready'."""
    core = make_core(clock, NoState(), mode="restart_only")
    turn = await Turn.start(core, ep("c"))
    await core.prepare("c1", deadline_ts=clock.now() + 30)
    reply = await core.commit(
        "c1", deadline_ts=clock.now() + 30, checkpoint_dir=str(tmp_path), episode_ids=[ep("d")]
    )
    assert reply["phase"] == "committed"
    assert reply["episode_ids"] == []
    await turn.finish()


@pytest.mark.parametrize("mode", ["export_restore", "restart_only", "stateless"])
async def test_ready_says_what_the_report_says(clock: FakeClock, mode: str) -> None:
    """ready() agrees with report()["ready"], with and without a call in flight."""
    core = make_core(clock, NoState(), mode=mode)
    assert core.ready() is core.report()["ready"] is True
    turn = await Turn.start(core, ep("c"))
    assert core.ready() is core.report()["ready"] is (mode == "restart_only")
    await turn.finish()
    assert core.ready() is core.report()["ready"] is True


async def test_stateless_waits_only_for_in_flight(clock: FakeClock) -> None:
    """A stateless participant ignores parked live episodes and waits for in-flight ones."""
    hooks = NoState()
    core = make_core(clock, hooks, mode="stateless")
    hooks.live.add(ep("parked"))
    reply = await core.prepare("c1", deadline_ts=clock.now() + 30)
    assert reply["phase"] == "prepared"
    assert reply["report"]["restarts"] == []
    await core.resume("c1", deadline_ts=clock.now() + 30)
    turn = await Turn.start(core, ep("busy"))
    reply = await core.prepare("c2", deadline_ts=clock.now() + 30)
    assert reply["phase"] == "preparing"
    assert reply["report"]["blockers"] == ["busy"]
    await turn.finish()


async def test_prepare_of_a_finished_id_is_stale(core: ParticipantCore) -> None:
    """A prepare for an id this participant already finished fails stale_checkpoint."""
    await core.prepare("c1", deadline_ts=START + 30)
    await core.resume("c1", deadline_ts=START + 30)
    await refused("stale_checkpoint", core.prepare("c1", deadline_ts=START + 30))
    assert core.phase == "idle"


async def test_prepare_of_another_id_while_open_conflicts(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """prepare for another open id conflicts, also once committed."""
    await prepared_core(core, hooks)
    await refused("checkpoint_conflict", core.prepare("c2", deadline_ts=START + 30))
    await core.commit("c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None)
    await refused("checkpoint_conflict", core.prepare("c2", deadline_ts=START + 30))
    assert core.phase == "committed"


async def test_prepare_replayed_after_commit_returns_the_recorded_reply(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """A prepare repeated after the commit, same id, gets the recorded prepared reply."""
    first = await prepared_core(core, hooks)
    await core.commit("c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None)
    hooks.put(ep("appeared-later"))
    again = await core.prepare("c1", deadline_ts=START + 90)
    assert again == first and again["phase"] == "prepared"
    assert core.phase == "committed"
    assert core.lease_expires_at == START + 90 + GRACE
    await core.resume("c1", deadline_ts=START + 30)
    await refused("stale_checkpoint", core.prepare("c1", deadline_ts=START + 30))


# ------------------------------------------------------------------------- renew


async def test_renew_needs_the_open_id(core: ParticipantCore, hooks: JsonStateHooks) -> None:
    """renew is invalid_phase in idle, checkpoint_conflict for another id, stale once finished."""
    await refused("invalid_phase", core.renew("c1", deadline_ts=START + 30))
    await prepared_core(core, hooks)
    await refused("checkpoint_conflict", core.renew("c2", deadline_ts=START + 30))
    await core.resume("c1", deadline_ts=START + 30)
    await refused("stale_checkpoint", core.renew("c1", deadline_ts=START + 30))


# ------------------------------------------------------------------------ commit


async def test_commit_is_only_legal_from_prepared(
    core: ParticipantCore, tmp_path: Path, clock: FakeClock
) -> None:
    """commit in idle or preparing is invalid_phase and writes nothing."""
    args: dict[str, Any] = {"checkpoint_dir": str(tmp_path / "x"), "episode_ids": None}
    await refused("invalid_phase", core.commit("c1", deadline_ts=START + 30, **args))
    turn = await Turn.start(core, ep("r1"))
    await core.prepare("c1", deadline_ts=clock.now() + 5)
    await refused("invalid_phase", core.commit("c1", deadline_ts=clock.now() + 30, **args))
    await refused("checkpoint_conflict", core.commit("c2", deadline_ts=clock.now() + 30, **args))
    assert not (tmp_path / "x").exists()
    assert core.phase == "preparing"
    await turn.finish()


async def test_commit_writes_records_and_manifest(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """commit exports the scope once and publishes records, then the manifest."""
    await prepared_core(core, hooks, "c1", ep("r1"), ep("r2", 1), ep("r3"))
    hooks.states[ep("r1")] = {"zeta": 1, "turn": 3, "alpha": [1, {"b": 2, "a": 1}]}
    reply = await core.commit(
        "c1",
        deadline_ts=START + 30,
        checkpoint_dir=str(tmp_path),
        episode_ids=[ep("r2", 1), ep("r1"), ep("missing")],
    )
    assert reply["phase"] == "committed"
    assert reply["episode_ids"] == ["r1", "r2-a1"]
    assert reply["run_episode_ids"] == ["r1", "r2-a1"]
    assert hooks.exports == 1
    assert core.phase == "committed"
    manifest = store.read_manifest(tmp_path, kind="agent", instance="agent", checkpoint_id="c1")
    assert reply["manifest"] == manifest.to_json()
    assert manifest.record_count == 2
    assert set(reply["manifest"]) == set(store.STANDARD_FIELDS)  # Gym's fields, no extras
    lines = store.records_path(tmp_path, manifest).read_text().splitlines()
    first = json.loads(lines[0])
    assert first == {
        "episode_id": {"rollout_id": "r1", "attempt": 0},
        "zeta": 1,
        "turn": 3,
        "alpha": [1, {"b": 2, "a": 1}],
    }
    assert list(first) == ["episode_id", "zeta", "turn", "alpha"]
    assert list(first["alpha"][1]) == ["b", "a"]
    assert json.loads(lines[1])["episode_id"] == {"rollout_id": "r2", "attempt": 1}


async def test_a_state_with_its_own_episode_id_field_fails_the_commit(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """A state field named episode_id would break the envelope: checkpoint_error, nothing out."""
    await prepared_core(core, hooks, "c1", ep("r1"))
    hooks.states[ep("r1")] = {"turn": 3, "episode_id": "mine"}
    error = await refused(
        "checkpoint_error",
        core.commit("c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None),
    )
    assert "episode_id" in error.detail
    assert not (tmp_path / "gym" / "agent" / "agent" / "manifest.json").exists()
    assert core.phase == "prepared"


async def test_commit_without_scope_exports_everything(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """An absent scope commits every live episode."""
    await prepared_core(core, hooks, "c1", ep("r1"), ep("r2"))
    reply = await core.commit(
        "c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None
    )
    assert reply["episode_ids"] == ["r1", "r2"]


async def test_commit_replay_returns_the_same_reply_and_conflicts_on_new_arguments(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """A commit replay with the same arguments returns the same reply; others conflict."""
    await prepared_core(core, hooks)
    args: dict[str, Any] = {"checkpoint_dir": str(tmp_path / "a"), "episode_ids": [ep("r1")]}
    first = await core.commit("c1", deadline_ts=START + 30, **args)
    again = await core.commit("c1", deadline_ts=START + 40, **args)
    assert again == first
    assert hooks.exports == 1
    assert core.lease_expires_at == START + 40 + GRACE
    other_dir = {**args, "checkpoint_dir": str(tmp_path / "b")}
    await refused("checkpoint_conflict", core.commit("c1", deadline_ts=START + 30, **other_dir))
    other_scope = {**args, "episode_ids": [ep("r2")]}
    await refused("checkpoint_conflict", core.commit("c1", deadline_ts=START + 30, **other_scope))
    await refused(
        "checkpoint_conflict", core.commit("c1", deadline_ts=START + 30, **args, stop=True)
    )
    assert not (tmp_path / "b").exists()


async def test_commit_rechecks_readiness(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """commit refuses with invalid_phase 'no longer ready' if work left its boundary."""
    await prepared_core(core, hooks)
    # Admission is closed, so only a misbehaving server could get here; simulate it.
    core.fence.admitted(ep("r1"))
    error = await refused(
        "invalid_phase",
        core.commit("c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None),
    )
    assert "no longer ready" in error.detail
    assert not (tmp_path / "gym").exists()
    assert core.phase == "prepared"


async def test_model_commit_without_a_scope_exports_everything(
    clock: FakeClock, tmp_path: Path
) -> None:
    """The policy model, like every kind, reads a null scope as everything it holds."""
    hooks = JsonStateHooks("model")
    core = make_core(clock, hooks, kind="model", name="policy")
    await prepared_core(core, hooks)
    reply = await core.commit(
        "c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None
    )
    assert reply["episode_ids"] == ["r1", "r2"]
    assert reply["staging_keys"] == ["r1/stage", "r2/stage"]
    assert reply["staging_keys_by_episode"] == {"r1": ["r1/stage"], "r2": ["r2/stage"]}


async def test_commit_refuses_a_scope_naming_a_restart(clock: FakeClock, tmp_path: Path) -> None:
    """A scope naming an episode the prepare reported as a restart fails restart_in_scope."""
    hooks = NoState()
    hooks.live.add(ep("r1"))
    core = make_core(clock, hooks, mode="restart_only")
    await core.prepare("c1", deadline_ts=START + 30)
    await refused(
        "restart_in_scope",
        core.commit(
            "c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=[ep("r1")]
        ),
    )
    assert core.phase == "prepared"
    assert not (tmp_path / "gym").exists()


async def test_commit_past_its_deadline_keeps_writing_and_a_retry_collects_it(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """A commit past its deadline fails deadline_exceeded; the retry returns that write."""
    entered, release = await prepared_with_a_blocked_write(core, hooks)
    args: dict[str, Any] = {"checkpoint_dir": str(tmp_path), "episode_ids": None}
    await refused("deadline_exceeded", core.commit("c1", deadline_ts=START, **args))
    await until(entered)
    manifest = manifest_in(tmp_path)
    assert not manifest.exists()
    assert core.phase == "prepared"
    release.set()
    reply = await core.commit("c1", deadline_ts=START + 30, **args)
    assert reply["phase"] == "committed"
    assert manifest.exists()
    assert hooks.exports == 1
    assert core.phase == "committed"


async def test_commit_with_stop_releases_exported_state(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """commit with stop=True frees what the export holds outside the process."""
    await prepared_core(core, hooks)
    await core.commit(
        "c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None, stop=True
    )
    assert hooks.released == 1


async def test_commit_hook_failure_keeps_prepared(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """An export that raises leaves the phase prepared and nothing published."""
    await prepared_core(core, hooks)
    hooks.export_error = RuntimeError("export broke")
    with pytest.raises(RuntimeError):
        await core.commit(
            "c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None
        )
    assert core.phase == "prepared"
    assert not (tmp_path / "gym").exists()


# ----------------------------------------------------------------------- restore


async def committed_dir(tmp_path: Path, clock: FakeClock, cid: str = "src-1") -> Path:
    """A published agent checkpoint of r1 (attempt 0, turn 3) and r2 (attempt 1, turn 5)."""
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    await run_turn(core, hooks, ep("r1"), turn=3)
    await run_turn(core, hooks, ep("r2", 1), turn=5)
    await core.prepare(cid, deadline_ts=clock.now() + 30)
    await core.commit(
        cid, deadline_ts=clock.now() + 30, checkpoint_dir=str(tmp_path), episode_ids=None
    )
    await core.resume(cid, deadline_ts=clock.now() + 30)
    return tmp_path


async def published_and_fresh(
    tmp_path: Path, clock: FakeClock
) -> tuple[str, JsonStateHooks, ParticipantCore]:
    """``committed_dir``'s checkpoint, and a fresh agent core (with its hooks) to restore into."""
    source = str(await committed_dir(tmp_path, clock))
    hooks = JsonStateHooks("agent")
    return source, hooks, make_core(clock, hooks)


def restore_into(
    core: ParticipantCore,
    source: str | Path,
    scope: list[EnvironmentEpisode],
    *,
    deadline_ts: float = START + 30,
) -> Coroutine[Any, Any, dict[str, Any]]:
    """``core``'s restore of ``scope`` from ``source`` as ``rst-1`` (due 30 s after START)."""
    return core.restore(
        "rst-1", deadline_ts=deadline_ts, checkpoint_dir=str(source), episode_ids=scope
    )


async def test_restore_installs_next_attempts_and_keeps_admission_closed(
    tmp_path: Path, clock: FakeClock
) -> None:
    """restore installs attempt N+1, names the source id and stays closed until resume."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    scope = [ep("r1"), ep("r2", 1)]
    reply = await restore_into(core, source, scope, deadline_ts=clock.now() + 30)
    assert reply["phase"] == "restored"
    assert reply["source_checkpoint_id"] == "src-1"
    assert reply["restored"] == ["r1-a1", "r2-a2"]
    assert hooks.states == {ep("r1", 1): {"turn": 3}, ep("r2", 2): {"turn": 5}}
    assert core.phase == "restored"
    assert core.lease_expires_at == clock.now() + 30 + GRACE
    with pytest.raises(ParticipantError) as caught:
        async with core.admit(ep("r1", 1)):
            pass
    assert caught.value.code == "admission_closed"
    await core.resume("rst-1", deadline_ts=clock.now() + 30)
    async with core.admit(ep("r1", 1)):
        pass
    for stale in (ep("r1"), ep("r2", 1)):
        with pytest.raises(ParticipantError) as caught:
            async with core.admit(stale):
                pass
        assert caught.value.code == "stale_attempt"


async def test_restore_only_installs_the_scope(tmp_path: Path, clock: FakeClock) -> None:
    """Records outside the scope are validated but not installed."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    reply = await restore_into(core, source, [ep("r1")], deadline_ts=clock.now() + 30)
    assert reply["restored"] == ["r1-a1"]
    assert set(hooks.states) == {ep("r1", 1)}


async def test_restore_is_refused_outside_idle(tmp_path: Path, clock: FakeClock) -> None:
    """restore needs idle: invalid_phase for the open id, checkpoint_conflict for another."""
    source = str(await committed_dir(tmp_path, clock))
    core = make_core(clock)
    await core.prepare("c1", deadline_ts=START + 30)
    await refused(
        "invalid_phase",
        core.restore("c1", deadline_ts=START + 30, checkpoint_dir=source, episode_ids=[]),
    )
    await refused(
        "checkpoint_conflict",
        core.restore("rst-2", deadline_ts=START + 30, checkpoint_dir=source, episode_ids=[]),
    )


async def test_restore_into_a_process_that_served_other_rollouts(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Traffic of other rollouts does not stop a restore, and their state stays."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    await run_turn(core, hooks, ep("r9"), turn=7)
    reply = await restore_into(core, source, [ep("r1")])
    assert reply["restored"] == ["r1-a1"]
    assert hooks.states == {ep("r9"): {"turn": 7}, ep("r1", 1): {"turn": 3}}
    assert core.fence.mark("r9") is None and core.fence.mark("r1") is None


async def test_restore_retires_older_attempts_it_supersedes_before_installing(
    tmp_path: Path, clock: FakeClock
) -> None:
    """In a process that served the restored rollouts, their older attempts are
    marked, stopped and freed first; a parked one's state and an in-flight call alike."""
    source = str(await committed_dir(tmp_path, clock))
    hooks = JsonStateHooks("agent")
    core = make_core(FakeClock(START, settle_rounds=200), hooks)
    await run_turn(core, hooks, ep("r1"), turn=1)
    busy = await Turn.start(core, ep("r2"))
    hooks.on_retire.append(lambda episodes: busy.release.set())
    reply = await restore_into(core, source, [ep("r1"), ep("r2", 1)])
    assert reply["restored"] == ["r1-a1", "r2-a2"]
    assert hooks.retired == [(ep("r1"), ep("r2", 1))]
    assert busy.task is not None and busy.task.done()
    assert hooks.states == {ep("r1", 1): {"turn": 3}, ep("r2", 2): {"turn": 5}}
    assert (core.fence.mark("r1"), core.fence.mark("r2")) == (0, 1)
    assert core.fence.in_flight() == frozenset()
    await core.resume("rst-1", deadline_ts=START + 30)
    await refused("stale_attempt", _enter(core, ep("r1")))
    async with core.admit(ep("r1", 1)):
        pass


async def test_restore_that_cannot_stop_older_work_installs_nothing(
    tmp_path: Path, clock: FakeClock
) -> None:
    """If stopping a superseded attempt fails, nothing is installed; its mark stays."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    await run_turn(core, hooks, ep("r1"), turn=1)
    hooks.fail_retire = True
    await refused(
        "checkpoint_error",
        restore_into(core, source, [ep("r1")]),
    )
    assert ep("r1", 1) not in hooks.states
    assert (core.phase, core.checkpoint_id, core.fence.mark("r1")) == ("idle", None, 0)
    assert hooks.admission_open and hooks.calls == ["close", "open"]


async def test_restore_refuses_to_install_over_live_attempts(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A restored rollout holding the installed attempt, or a newer one (state or a call),
    fails stale_attempt and nothing changes."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    await run_turn(core, hooks, ep("r1", 1), turn=9)
    busy = await Turn.start(core, ep("r2", 3))
    before = snapshot(core)
    for scope in ([ep("r1")], [ep("r2", 1)], [ep("r1", 5), ep("r2", 1)]):
        error = await refused(
            "stale_attempt",
            restore_into(core, source, scope),
        )
        assert error.status == 409
    assert snapshot(core) == before and hooks.states == {ep("r1", 1): {"turn": 9}}
    assert hooks.retired == [] and hooks.calls == []
    await busy.finish()


async def test_restore_of_attempts_retired_here_installs_them_inert(
    tmp_path: Path, clock: FakeClock
) -> None:
    """As Gym: a next attempt retired here (holding nothing) is installed, stays refused,
    and is never exported."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r2", 2)])
    reply = await restore_into(core, source, [ep("r1"), ep("r2", 1)])
    assert reply["restored"] == ["r1-a1", "r2-a2"] and ep("r2", 2) in hooks.states
    await core.resume("rst-1", deadline_ts=START + 30)
    await refused("stale_attempt", _enter(core, ep("r2", 2)))
    assert (await core.prepare("c2", deadline_ts=START + 30))["phase"] == "prepared"
    committed = await core.commit(
        "c2", deadline_ts=START + 30, checkpoint_dir=str(tmp_path / "next"), episode_ids=None
    )
    assert committed["episode_ids"] == ["r1-a1"]


def write_agent_checkpoint(root: Path, records: list[dict[str, Any]]) -> str:
    store.write_checkpoint(
        root, kind="agent", instance="agent", checkpoint_id="src-1", records=records
    )
    return str(root)


async def test_a_checkpoint_in_the_earlier_record_shape_still_restores(
    tmp_path: Path, clock: FakeClock
) -> None:
    """Records written as {capture_key, state} before the switch to Gym's envelope restore."""
    source = write_agent_checkpoint(
        tmp_path,
        [
            {"capture_key": "r1", "state": {"turn": 1, "note": "a"}},
            {"episode_id": {"rollout_id": "r2", "attempt": 1}, "turn": 2},
        ],
    )
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    reply = await restore_into(core, source, [ep("r1"), ep("r2", 1)])
    assert reply["restored"] == ["r1-a1", "r2-a2"]
    assert hooks.states == {ep("r1", 1): {"turn": 1, "note": "a"}, ep("r2", 2): {"turn": 2}}


@pytest.mark.parametrize(
    "bad",
    [
        {"capture_key": "r3", "state": {"turn": "three"}},
        {"capture_key": "r3", "state": [1]},
        {"capture_key": "r3"},
        {"capture_key": "r3", "state": {"turn": 1}, "extra": 1},
        {"capture_key": "../r3", "state": {"turn": 1}},
        {"capture_key": "r1", "state": {"turn": 1}},
    ],
    ids=["invalid-state", "not-an-object", "no-state", "extra-key", "bad-key", "duplicate"],
)
async def test_a_corrupt_record_anywhere_installs_nothing(
    tmp_path: Path, clock: FakeClock, bad: dict[str, Any]
) -> None:
    """One bad record, even the last, fails invalid_checkpoint_state before any install."""
    source = write_agent_checkpoint(
        tmp_path,
        [
            {"capture_key": "r1", "state": {"turn": 1}},
            {"capture_key": "r2", "state": {"turn": 2}},
            bad,
        ],
    )
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    error = await refused(
        "invalid_checkpoint_state",
        restore_into(core, source, [ep("r1"), ep("r2"), ep("r3")]),
    )
    assert error.status == 422
    assert hooks.states == {}
    assert core.phase == "idle"


async def test_restore_refuses_damaged_unpublished_or_foreign_state(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A flipped byte, a missing manifest or another instance's directory install nothing."""
    source = await committed_dir(tmp_path / "ok", clock)
    manifest = store.read_manifest(source, kind="agent", instance="agent")
    path = store.records_path(source, manifest)
    data = bytearray(path.read_bytes())
    data[5] ^= 0x01
    path.write_bytes(bytes(data))
    scope = [ep("r1")]
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    for directory in (source, tmp_path / "empty"):
        await refused(
            "invalid_checkpoint_state",
            restore_into(core, directory, scope),
        )
    other = await committed_dir(tmp_path / "other", clock, cid="src-2")
    foreign = ParticipantCore(server_name="agent-2", kind="agent", hooks=hooks, clock=clock)
    await refused(
        "invalid_checkpoint_state",
        foreign.restore(
            "rst-1", deadline_ts=START + 30, checkpoint_dir=str(other), episode_ids=scope
        ),
    )
    assert hooks.states == {}


async def test_restore_replay_and_conflict(tmp_path: Path, clock: FakeClock) -> None:
    """A restore replay returns the recorded reply; other arguments conflict."""
    source, _, core = await published_and_fresh(tmp_path, clock)
    first = await restore_into(core, source, [ep("r1")])
    again = await restore_into(core, source, [ep("r1")])
    assert again == first
    await refused(
        "checkpoint_conflict",
        restore_into(core, source, []),
    )


async def test_restore_past_its_deadline_installs_nothing(tmp_path: Path, clock: FakeClock) -> None:
    """A restore whose deadline passed fails deadline_exceeded and stays idle."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    await refused(
        "deadline_exceeded",
        core.restore(
            "rst-1", deadline_ts=clock.now() - 1, checkpoint_dir=source, episode_ids=[ep("r1")]
        ),
    )
    assert hooks.states == {}
    assert core.phase == "idle"


# ------------------------------------------------------------------------ resume


async def open_in(phase: str, clock: FakeClock, tmp_path: Path) -> ParticipantCore:
    """A core left in ``phase`` with checkpoint id ``c1``."""
    if phase == "restored":
        source = await committed_dir(tmp_path / "src", clock)
        core = make_core(clock)
        await core.restore(
            "c1", deadline_ts=clock.now() + 30, checkpoint_dir=str(source), episode_ids=[ep("r1")]
        )
        return core
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    if phase == "preparing":
        await Turn.start(core, ep("stuck"))
        await core.prepare("c1", deadline_ts=clock.now() + 5)
        return core
    await prepared_core(core, hooks)
    if phase == "committed":
        await core.commit(
            "c1", deadline_ts=clock.now() + 30, checkpoint_dir=str(tmp_path), episode_ids=None
        )
    return core


@pytest.mark.parametrize("phase", ["preparing", "prepared", "committed", "restored"])
async def test_resume_from_every_open_phase(phase: str, clock: FakeClock, tmp_path: Path) -> None:
    """resume from any non-idle phase reopens, clears the lease and fences the id."""
    core = await open_in(phase, clock, tmp_path)
    assert core.phase == phase
    await refused("checkpoint_conflict", core.resume("other", deadline_ts=clock.now() + 30))
    reply = await core.resume("c1", deadline_ts=clock.now() + 30)
    assert reply == {"phase": "idle", "idempotent": False}
    assert core.phase == "idle"
    assert core.checkpoint_id is None
    assert core.lease_expires_at is None
    assert await core.resume("c1", deadline_ts=clock.now() + 30) == {
        "phase": "idle",
        "idempotent": True,
    }
    await refused("stale_checkpoint", core.prepare("c1", deadline_ts=clock.now() + 30))
    await refused("stale_checkpoint", core.renew("c1", deadline_ts=clock.now() + 30))


async def test_resume_reopens_admission(core: ParticipantCore, hooks: JsonStateHooks) -> None:
    """After resume the hooks reopen admission and new episodes are admitted."""
    await prepared_core(core, hooks)
    await core.resume("c1", deadline_ts=START + 30)
    assert hooks.admission_open is True
    async with core.admit(ep("new")):
        pass


async def test_resume_of_a_never_seen_id_fences_it(core: ParticipantCore) -> None:
    """resume for an id never opened answers idempotent and refuses a later prepare."""
    assert await core.resume("ghost", deadline_ts=START + 30) == {
        "phase": "idle",
        "idempotent": True,
    }
    await refused("stale_checkpoint", core.prepare("ghost", deadline_ts=START + 30))


async def test_only_the_last_64_finished_ids_are_fenced(core: ParticipantCore) -> None:
    """The 64 most recent finished ids are stale; the 65th oldest is forgotten."""
    ids = [f"c{i:03d}" for i in range(FINISHED_IDS_KEPT + 1)]
    for cid in ids:
        await core.resume(cid, deadline_ts=START + 30)
    for cid in ids[1:]:
        await refused("stale_checkpoint", core.prepare(cid, deadline_ts=START + 30))
    assert (await core.prepare(ids[0], deadline_ts=START + 30))["phase"] == "prepared"


async def test_resume_interrupts_a_waiting_prepare() -> None:
    """A resume ends a prepare that is still waiting for boundaries before its deadline."""
    clock = FakeClock(START, settle_rounds=500)
    core = make_core(clock)
    turn = await Turn.start(core, ep("r1"))
    deadline = clock.now() + 30
    pending = asyncio.create_task(core.prepare("c1", deadline_ts=deadline))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert core.phase == "preparing"
    await core.resume("c1", deadline_ts=deadline)
    await refused("stale_checkpoint", pending)
    assert clock.now() < deadline
    assert core.phase == "idle"
    await turn.finish()


async def test_resume_stops_an_unpublished_write(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """A write still before its manifest when resume arrives never publishes."""
    entered, release = await prepared_with_a_blocked_write(core, hooks)
    args: dict[str, Any] = {"checkpoint_dir": str(tmp_path), "episode_ids": None}
    pending = asyncio.create_task(core.commit("c1", deadline_ts=START + 30, **args))
    await until(entered)
    await core.resume("c1", deadline_ts=START + 30)
    release.set()
    await refused("stale_checkpoint", pending)
    await drain_tasks()
    assert not manifest_in(tmp_path).exists()
    assert core.phase == "idle"


async def test_an_aborted_write_stays_unpublished_after_a_newer_commit(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """A stopped write checks its own abort, not the newer checkpoint's write."""
    entered, release = await prepared_with_a_blocked_write(core, hooks)
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    await refused(
        "deadline_exceeded",
        core.commit("c1", deadline_ts=START, checkpoint_dir=str(old_dir), episode_ids=None),
    )
    await until(entered)
    await core.resume("c1", deadline_ts=START + 30)
    await core.prepare("c2", deadline_ts=START + 30)
    reply = await core.commit(
        "c2", deadline_ts=START + 30, checkpoint_dir=str(new_dir), episode_ids=None
    )
    assert reply["phase"] == "committed"
    release.set()
    await drain_tasks()
    assert not manifest_in(old_dir).exists()
    assert core.phase == "committed"
    assert core.checkpoint_id == "c2"


# ------------------------------------------------------------------------- lease


async def test_lease_expiry_resumes_and_fences_the_id(
    core: ParticipantCore, hooks: JsonStateHooks, clock: FakeClock
) -> None:
    """Past lease_expires_at any call first resumes the participant and fences the id."""
    await prepared_core(core, hooks)
    assert core.lease_expires_at is not None
    clock.advance(core.lease_expires_at - clock.now() + 1)
    async with core.admit(ep("after-expiry")):
        pass
    assert core.phase == "idle"
    assert core.lease_expires_at is None
    assert hooks.admission_open is True
    await refused("stale_checkpoint", core.renew("c1", deadline_ts=clock.now() + 30))
    assert await core.resume("c1", deadline_ts=clock.now()) == {"phase": "idle", "idempotent": True}


async def test_lease_watchdog_check_expires_an_open_checkpoint(
    core: ParticipantCore, clock: FakeClock
) -> None:
    """expire_if_due resumes a participant past its lease, and status shows idle."""
    await core.prepare("c1", deadline_ts=clock.now() + 10)
    await core.expire_if_due()
    assert core.phase == "prepared"
    clock.advance(10 + GRACE + 1)
    await core.expire_if_due()
    assert (await core.status())["phase"] == "idle"


async def test_lease_grace_is_configurable(clock: FakeClock) -> None:
    """lease_grace replaces the 600 s default."""
    core = ParticipantCore(
        server_name="agent", kind="agent", hooks=JsonStateHooks(), clock=clock, lease_grace=5
    )
    await core.prepare("c1", deadline_ts=clock.now() + 10)
    assert core.lease_expires_at == clock.now() + 15


# ------------------------------------------------------------------------ retire


async def test_retire_is_refused_while_a_checkpoint_is_open(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """retire during preparing/prepared/committed is invalid_phase and changes nothing."""
    await prepared_core(core, hooks)
    before = snapshot(core)
    await refused(
        "invalid_phase", core.retire("c1", deadline_ts=START + 30, episode_ids=[ep("r1")])
    )
    await core.commit("c1", deadline_ts=START + 30, checkpoint_dir=str(tmp_path), episode_ids=None)
    await refused(
        "invalid_phase", core.retire("c1", deadline_ts=START + 30, episode_ids=[ep("r1")])
    )
    assert snapshot(core)[1:] == before[1:]
    assert core.fence.mark("r1") is None


async def test_retire_raises_the_mark_before_stopping(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """The mark is up when hooks.retire runs; that attempt and earlier ones are refused."""
    await run_turn(core, hooks, ep("r1", 1))
    seen: list[int | None] = []
    hooks.on_retire.append(lambda episodes: seen.append(core.fence.mark("r1")))
    reply = await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r1", 1)])
    assert reply == {"retired": ["r1-a1"]}
    assert seen == [1]
    assert hooks.states == {}
    for attempt in (0, 1):
        with pytest.raises(ParticipantError) as caught:
            async with core.admit(ep("r1", attempt)):
                pass
        assert caught.value.code == "stale_attempt"
    async with core.admit(ep("r1", 2)):
        pass
    assert (await core.status())["retired_rollouts"] == 1


async def test_retire_never_lowers_a_mark(core: ParticipantCore) -> None:
    """Retiring an earlier attempt keeps the higher mark."""
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r1", 3)])
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r1", 1)])
    assert core.fence.mark("r1") == 3


async def test_the_mark_survives_a_failed_retire(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """A failing hooks.retire answers checkpoint_error and the mark stays."""
    hooks.fail_retire = True
    await refused(
        "checkpoint_error", core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r1")])
    )
    assert core.fence.mark("r1") == 0
    with pytest.raises(ParticipantError) as caught:
        async with core.admit(ep("r1")):
            pass
    assert caught.value.code == "stale_attempt"


async def test_retire_waits_for_retired_work_to_stop(
    core: ParticipantCore, clock: FakeClock
) -> None:
    """retire replies once the retired in-flight call has stopped."""
    turn = await Turn.start(core, ep("r1"))
    core.hooks.on_retire.append(lambda episodes: turn.release.set())  # type: ignore[attr-defined]
    reply = await core.retire("any", deadline_ts=clock.now() + 30, episode_ids=[ep("r1")])
    assert reply == {"retired": ["r1"]}
    assert core.fence.in_flight() == frozenset()
    assert clock.now() < START + 30


async def test_a_retire_cut_short_leaves_the_work_tracked(
    core: ParticipantCore, clock: FakeClock
) -> None:
    """Retired work still running at the deadline fails deadline_exceeded and blocks prepare."""
    turn = await Turn.start(core, ep("r1"))
    await refused(
        "deadline_exceeded", core.retire("any", deadline_ts=clock.now() + 5, episode_ids=[ep("r1")])
    )
    assert core.fence.in_flight() == {ep("r1")}
    assert core.fence.mark("r1") == 0
    reply = await core.prepare("c1", deadline_ts=clock.now() + 5)
    assert reply["phase"] == "preparing"
    assert reply["report"]["blockers"] == ["r1"]
    await turn.finish()


async def test_retire_while_restored_needs_the_restore_id_and_renews(
    tmp_path: Path, clock: FakeClock
) -> None:
    """In restored, retire must carry the restore id and re-arms the lease."""
    core = await open_in("restored", clock, tmp_path)
    await refused(
        "checkpoint_conflict", core.retire("c2", deadline_ts=START + 30, episode_ids=[ep("r1", 1)])
    )
    await core.retire("c1", deadline_ts=START + 900, episode_ids=[ep("r1", 1)])
    assert core.lease_expires_at == START + 900 + GRACE
    assert core.fence.mark("r1") == 1
    assert core.phase == "restored"


async def test_retire_and_forget_accept_a_finished_id(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """Cleanup calls: "resume to abort, then retire the stragglers" reuses the id."""
    await prepared_core(core, hooks)
    await core.resume("c1", deadline_ts=START + 30)
    reply = await core.retire("c1", deadline_ts=START + 30, episode_ids=[ep("r1")])
    assert reply == {"retired": ["r1"]}
    assert core.fence.mark("r1") == 0 and ep("r1") not in hooks.states
    assert await core.forget("c1", deadline_ts=START + 30, rollout_ids=["r1"]) == {
        "forgotten": ["r1"]
    }
    assert core.fence.mark("r1") is None
    await refused("stale_checkpoint", core.prepare("c1", deadline_ts=START + 30))


async def test_retire_and_forget_past_their_deadline_change_nothing(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """A retire or forget whose deadline passed fails deadline_exceeded before any mark moves."""
    await run_turn(core, hooks, ep("r1"))
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r2")])
    await refused(
        "deadline_exceeded", core.retire("c1", deadline_ts=START - 1, episode_ids=[ep("r1")])
    )
    await refused("deadline_exceeded", core.forget("c1", deadline_ts=START - 1, rollout_ids=["r2"]))
    assert (core.fence.mark("r1"), core.fence.mark("r2")) == (None, 0)
    assert ep("r1") in hooks.states


# ------------------------------------------------------------------------ forget


async def test_forget_clears_marks(core: ParticipantCore, hooks: JsonStateHooks) -> None:
    """forget drops the marks of rollouts that will never run again."""
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("r1", 2), ep("r2")])
    reply = await core.forget("any", deadline_ts=START + 30, rollout_ids=["r2", "r1", "r1"])
    assert reply == {"forgotten": ["r1", "r2"]}
    assert core.fence.mark("r1") is None and core.fence.mark("r2") is None
    assert hooks.forgotten == ["r1", "r2"]
    async with core.admit(ep("r1")):
        pass


async def test_forget_of_a_rollout_that_holds_state_drops_only_the_marks(
    core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """Gym's meaning: the marks go, live state is left to retire, and its attempt stays
    current (earlier attempts stay superseded)."""
    await run_turn(core, hooks, ep("parked", 2))
    turn = await Turn.start(core, ep("busy", 1))
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("parked", 1), ep("busy")])
    reply = await core.forget("any", deadline_ts=START + 30, rollout_ids=["parked", "busy"])
    assert reply == {"forgotten": ["busy", "parked"]}
    assert core.fence.mark("parked") is None and core.fence.mark("busy") is None
    assert ep("parked", 2) in hooks.states and core.fence.in_flight() == {ep("busy", 1)}
    await refused("stale_attempt", _enter(core, ep("parked", 1)))
    await refused("stale_attempt", _enter(core, ep("busy")))
    await turn.finish()
    await core.retire("any", deadline_ts=START + 30, episode_ids=[ep("parked", 2)])
    assert hooks.states == {}


async def test_forget_is_refused_while_open_and_renews_while_restored(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path, clock: FakeClock
) -> None:
    """forget is invalid_phase while open and re-arms from deadline_ts when restored."""
    await prepared_core(core, hooks)
    await refused("invalid_phase", core.forget("c1", deadline_ts=START + 30, rollout_ids=["x"]))
    restored = await open_in("restored", clock, tmp_path)
    before = restored.lease_expires_at
    assert before is not None
    await restored.forget("c1", deadline_ts=START + 5000, rollout_ids=["x"])
    assert restored.lease_expires_at == START + 5000 + GRACE


async def test_a_process_that_only_restored_before_restores_again(
    tmp_path: Path, clock: FakeClock
) -> None:
    """After an all-or-nothing restore failed elsewhere (next attempts retired, resumed),
    the same process restores a complete checkpoint under a new id."""
    source = str(await committed_dir(tmp_path, clock))
    other = str(await committed_dir(tmp_path / "other", clock, cid="src-2"))
    hooks = JsonStateHooks("agent")
    core = make_core(clock, hooks)
    await restore_into(core, source, [ep("r1")])
    await core.retire("rst-1", deadline_ts=START + 30, episode_ids=[ep("r1", 1)])
    await core.resume("rst-1", deadline_ts=START + 30)
    await core.retire("rst-1", deadline_ts=START + 30, episode_ids=[ep("r1", 1)])
    assert hooks.states == {}
    reply = await core.restore(
        "rst-2", deadline_ts=START + 30, checkpoint_dir=other, episode_ids=[ep("r2", 1)]
    )
    assert reply["source_checkpoint_id"] == "src-2"
    assert reply["restored"] == ["r2-a2"] and core.phase == "restored"
    assert set(hooks.states) == {ep("r2", 2)}
    # The same checkpoint again: r1-a1 is retired here, so it is installed and refused.
    await core.resume("rst-2", deadline_ts=START + 30)
    again = await core.restore(
        "rst-3", deadline_ts=START + 30, checkpoint_dir=source, episode_ids=[ep("r1")]
    )
    assert again["restored"] == ["r1-a1"] and core.fence.mark("r1") == 1


async def test_a_commit_retried_after_a_failed_write_writes_again(
    tmp_path: Path, core: ParticipantCore, hooks: JsonStateHooks
) -> None:
    """A write that failed before publishing is redone by the retry, which then succeeds."""
    await prepared_core(core, hooks)

    def crash() -> None:
        core.before_publish.remove(crash)
        raise OSError("disk full")

    core.before_publish.append(crash)
    arguments = {
        "deadline_ts": core.clock.now() + 30,
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "episode_ids": [ep("r1"), ep("r2")],
    }
    await refused("checkpoint_error", core.commit("c1", **arguments))
    assert core.phase == "prepared"
    reply = await core.commit("c1", **arguments)
    assert reply["phase"] == "committed" and core.phase == "committed"
    assert reply["episode_ids"] == ["r1", "r2"]


async def test_restored_attempts_left_out_of_a_commit_scope_are_deleted_unfenced(
    tmp_path: Path, clock: FakeClock
) -> None:
    """A restored attempt that never ran, left out of the next commit's scope, is freed unfenced."""
    source, hooks, core = await published_and_fresh(tmp_path, clock)
    await restore_into(core, source, [ep("r1"), ep("r2", 1)], deadline_ts=clock.now() + 30)
    await core.resume("rst-1", deadline_ts=clock.now() + 30)
    assert (await core.prepare("c2", deadline_ts=clock.now() + 30))["phase"] == "prepared"
    reply = await core.commit(
        "c2",
        deadline_ts=clock.now() + 30,
        checkpoint_dir=str(tmp_path / "next"),
        episode_ids=[ep("r1", 1)],
    )
    assert reply["episode_ids"] == ["r1-a1"]
    assert set(hooks.states) == {ep("r1", 1)}
    assert core.fence.mark("r2") is None
    await core.resume("c2", deadline_ts=clock.now() + 30)
    # Gym's rule: the controller may restart the rollout as that same attempt.
    await _enter(core, ep("r2", 2))
    await refused("stale_attempt", _enter(core, ep("r2", 1)))


async def _enter(core: ParticipantCore, episode: EnvironmentEpisode) -> None:
    async with core.admit(episode):
        pass


async def test_every_event_names_the_server_and_the_gym_instance(clock: FakeClock) -> None:
    """Transitions and the lease-expiry warning carry server and gym_instance_id."""
    from structlog.testing import capture_logs

    core = ParticipantCore(
        server_name="agent",
        kind="agent",
        hooks=JsonStateHooks("agent"),
        clock=clock,
        gym_instance_id="shard/replica-2",
    )
    with capture_logs() as logs:
        await core.prepare("c1", deadline_ts=clock.now() + 1)
        clock.advance(1 + GRACE + 1)
        await core.expire_if_due()
    named = [(e["event"], e["server"], e["gym_instance_id"]) for e in logs]
    assert ("lease expired; resuming", "agent", "shard/replica-2") in named
    transitions = [e for e in logs if e["event"] == "transition"]
    assert [e["trigger"] for e in transitions] == ["prepare", "ready", "expire"]
    assert {(e["instance_id"], e["server"], e["gym_instance_id"]) for e in transitions} == {
        ("agent", "agent", "shard/replica-2")
    }
    core.set_gym_instance("shard/replica-5")
    assert core.log_fields == {"server": "agent", "gym_instance_id": "shard/replica-5"}


async def test_a_past_deadline_on_prepare_renew_or_commit_is_always_deadline_exceeded(
    core: ParticipantCore, hooks: JsonStateHooks, tmp_path: Path
) -> None:
    """Before any effect: admission stays open, no lease, no write, the id not fenced."""
    turn = await Turn.start(core, ep("r1"))  # in flight: a waiting prepare could race it
    for past in (START - 0.001, START - 1e6, -1e300):
        await refused("deadline_exceeded", core.prepare("c1", deadline_ts=past))
        assert (core.phase, core.checkpoint_id, core.lease_expires_at) == ("idle", None, None)
        assert hooks.admission_open
    await refused("deadline_exceeded", core.renew("c1", deadline_ts=START - 1))
    await turn.finish()
    await prepared_core(core, hooks)
    lease = core.lease_expires_at
    await refused("deadline_exceeded", core.prepare("c1", deadline_ts=START - 1))  # a replay
    await refused("deadline_exceeded", core.renew("c1", deadline_ts=START - 1))
    args: dict[str, Any] = {"checkpoint_dir": str(tmp_path), "episode_ids": None}
    await refused("deadline_exceeded", core.commit("c1", deadline_ts=START - 1, **args))
    await drain_tasks()
    assert (core.phase, core.lease_expires_at, hooks.exports) == ("prepared", lease, 0)
    assert not (tmp_path / "gym").exists()
    assert (await core.commit("c1", deadline_ts=START + 30, **args))["phase"] == "committed"


async def test_a_finished_id_is_stale_before_its_deadline_is_looked_at(
    core: ParticipantCore,
) -> None:
    """stale_checkpoint is checked first, so a late call for a finished id still says so."""
    await core.resume("done", deadline_ts=START)
    await refused("stale_checkpoint", core.prepare("done", deadline_ts=START - 1))
    await refused("stale_checkpoint", core.renew("done", deadline_ts=START - 1))
