"""Tests for envckpt.gym.adapter: legality first, then the call, then the transition."""

from __future__ import annotations

import contextlib
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from structlog.testing import capture_logs

from envckpt.errors import (
    CorruptCheckpoint,
    GymCheckpointUnavailable,
    IllegalTransition,
    IncompatibleCheckpoint,
    UnsupportedDeployment,
)
from envckpt.extras import MissingExtra
from envckpt.gym.adapter import GymCheckpointAdapter

from helpers.dict_deployment import (
    E1,
    E2,
    INSTANCE,
    Deployment,
    discovered,
    far,
    prepared_with,
    restore_r1,
    saved_then_restored,
)


async def test_discover_moves_to_discovered_and_skips_non_participants() -> None:
    """Discovery finds the three participants, not the judge, and fires discover."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    assert adapter.state == "discovered"
    assert adapter.participants.names == {"policy", "agent", "tools"}


async def test_second_discover_is_a_no_op() -> None:
    """A repeated discover sends nothing."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    before = deployment.transport.requests
    await adapter.discover()
    assert deployment.transport.requests == before


async def test_environment_participants_are_refused() -> None:
    """Turn recovery refuses environment-server participants at discovery."""
    deployment = Deployment(
        kinds=(
            ("policy", "model", "export_restore"),
            ("env", "environment", "export_restore"),
        )
    )
    adapter = GymCheckpointAdapter(instance=INSTANCE, coordination=deployment.coordinator)
    with pytest.raises(UnsupportedDeployment):
        await adapter.discover()
    assert adapter.state == "undiscovered"


async def test_discovery_failure_is_unavailable_and_keeps_state() -> None:
    """An unreachable server fails discovery with a typed, retryable error."""
    deployment = Deployment()
    deployment.faults.add("unreachable", server="agent")
    adapter = GymCheckpointAdapter(instance=INSTANCE, coordination=deployment.coordinator)
    with pytest.raises(GymCheckpointUnavailable) as info:
        await adapter.discover()
    assert "agent" in info.value.failures
    assert adapter.state == "undiscovered"
    await adapter.discover()
    assert adapter.state == "discovered"


@pytest.mark.parametrize("operation", ["commit", "renew", "resume", "restore_then_commit"])
async def test_illegal_operations_send_nothing(operation: str, tmp_path: Path) -> None:
    """An illegal trigger raises IllegalTransition before any request is made."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    before = deployment.transport.requests
    with pytest.raises(IllegalTransition) as info:
        if operation == "commit":
            await adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment))
        elif operation == "renew":
            await adapter.renew("c1", deadline_ts=far(deployment))
        elif operation == "resume":
            await adapter.resume("c1", deadline_ts=far(deployment))
        else:
            adapter._machine.state = "resumed"  # a deployment that already ran
            await adapter.restore(
                "c1",
                tmp_path,
                [E1],
                participants=(),
                source_checkpoint_id="s",
                deadline_ts=far(deployment),
            )
    assert deployment.transport.requests == before
    assert info.value.instance == INSTANCE.instance_id


async def test_full_cycle_fires_the_spine(tmp_path: Path) -> None:
    """discover -> prepare -> commit -> resume, with one logged event per transition."""
    deployment = Deployment()
    await deployment.start(E1, turn=3)
    await deployment.start(E2, turn=1)
    adapter = await discovered(deployment)
    with capture_logs() as logs:
        result = await adapter.prepare("c1", deadline_ts=far(deployment))
        assert result.prepared
        summary = await adapter.commit(
            "c1", tmp_path, result.continued([E1, E2]), deadline_ts=far(deployment)
        )
        await adapter.resume("c1", deadline_ts=far(deployment))
    assert adapter.state == "resumed"
    fired = [(e["trigger"], e["dest"]) for e in logs if e.get("machine") == "instance_lifecycle"]
    assert fired == [("prepare", "prepared"), ("commit", "committed"), ("resume", "resumed")]
    assert summary.exported_episodes == (E1, E2)
    assert summary.participants == ("agent", "policy", "tools")
    assert set(summary.staging_keys) == {"r1/t0", "r1/t1", "r1/t2", "r2-a2/t0"}
    assert (tmp_path / "gym-instances" / "shard" / "replica-0" / "gym").is_dir()


async def test_blocked_prepare_moves_to_preparing(tmp_path: Path) -> None:
    """A prepare that is not ready fires prepare_blocked; a later prepare can succeed."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    agent = deployment.cores["agent"]
    async with agent.admit(E1):
        result = await adapter.prepare("c1", deadline_ts=far(deployment))
        assert not result.prepared
        assert result.blockers()["agent"] == ("r1",)
        assert adapter.state == "preparing"
    result = await adapter.prepare("c1", deadline_ts=far(deployment))
    assert result.prepared and adapter.state == "prepared"


async def test_failed_commit_moves_to_failed_and_only_resume_leaves(tmp_path: Path) -> None:
    """A commit failure is remembered as the failed state; resume is the way out."""
    deployment = Deployment()
    adapter = await prepared_with(deployment, E1)
    deployment.faults.add("error", server="tools", route="commit")
    with pytest.raises(GymCheckpointUnavailable) as info:
        await adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment))
    assert "HTTP 500" in info.value.failures["tools"]
    assert adapter.state == "failed"
    with pytest.raises(IllegalTransition):
        await adapter.prepare("c2", deadline_ts=far(deployment))
    await adapter.resume("c1", deadline_ts=far(deployment))
    assert adapter.state == "resumed"


async def test_restore_continues_as_next_attempt(tmp_path: Path) -> None:
    """A fresh deployment restores the committed episodes as attempt N+1."""
    fresh, restored = await saved_then_restored(Deployment(), tmp_path, E1)
    assert restored.state == "restored"
    assert fresh.hooks["agent"].state == {E1.next_attempt(): {"turn": 2}}
    await restored.resume("r1", deadline_ts=far(fresh))
    assert restored.state == "resumed"


async def test_restore_refuses_missing_participants(tmp_path: Path) -> None:
    """A checkpoint that saved state for a server this deployment lacks is refused."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    with pytest.raises(IncompatibleCheckpoint):
        await restore_r1(adapter, deployment, tmp_path, ("agent", "ghost"))
    assert adapter.state == "discovered"


async def test_restore_of_missing_state_is_corrupt_and_cleaned_up(tmp_path: Path) -> None:
    """Restoring from an empty directory is typed as corrupt and lands in restore_failed."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    with pytest.raises(CorruptCheckpoint):
        await restore_r1(adapter, deployment, tmp_path, ("agent",))
    assert adapter.state == "restore_failed"
    before = deployment.transport.requests
    with capture_logs() as logs:
        await adapter.abandon_restore("r1", [E1], deadline_ts=far(deployment))
    assert adapter.state == "resumed"
    assert deployment.cores["agent"].fence.mark("r1") == 1
    # The retire under the id the coordinator already resumed is accepted at once:
    # one retire per participant, then one resume each.
    assert deployment.transport.requests - before == 2 * len(deployment.cores)
    assert not [log for log in logs if log["event"].startswith("abandon restore")]


async def test_restore_from_wrong_source_is_a_protocol_violation(tmp_path: Path) -> None:
    """Replies naming another source checkpoint are refused and the restore is dropped."""
    from envckpt.errors import ProtocolViolation

    deployment = Deployment()
    adapter = await prepared_with(deployment, E1)
    await adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment))
    await adapter.resume("c1", deadline_ts=far(deployment))
    fresh = deployment.fresh()
    restored = await discovered(fresh)
    with pytest.raises(ProtocolViolation):
        await restored.restore(
            "r1",
            tmp_path,
            [E1],
            participants=("agent",),
            source_checkpoint_id="some-other-checkpoint",
            deadline_ts=far(fresh),
        )
    assert restored.state == "restore_failed"


async def test_retire_and_forget_are_legal_between_checkpoints() -> None:
    """retire and forget keep the state and reach every participant."""
    deployment = Deployment()
    await deployment.start(E1)
    adapter = await discovered(deployment)
    await adapter.retire("c0", [E1], deadline_ts=far(deployment))
    assert adapter.state == "discovered"
    assert all(core.fence.mark("r1") == 0 for core in deployment.cores.values())
    await adapter.forget("c0", ["r1"], deadline_ts=far(deployment))
    assert all(core.fence.mark("r1") is None for core in deployment.cores.values())


async def test_cancelled_prepare_leaves_the_instance_resumable() -> None:
    """A prepare cancelled mid-way moves to failed, so the abort path resumes it."""
    import asyncio

    from envckpt.clock import FakeClock

    # A clock that waits long enough for the cancellation to land mid-prepare.
    deployment = Deployment(clock=FakeClock(settle_rounds=100_000))
    adapter = await discovered(deployment)
    agent = deployment.cores["agent"]
    async with agent.admit(E1):
        task = asyncio.create_task(adapter.prepare("c1", deadline_ts=far(deployment) + 3000))
        for _ in range(50):
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert adapter.state == "failed"
    await adapter.resume("c1", deadline_ts=far(deployment))
    assert all(core.phase == "idle" for core in deployment.cores.values())


# ---- built the seeds' way: nemo-gym's ServerClient and the control token ----------


async def test_an_adapter_built_from_a_server_client_runs_the_same_cycle(tmp_path: Path) -> None:
    """client= and auth_token= reach every server over HTTP; the spine fires as ever."""
    from envckpt.sim.server import GymServers

    from helpers.sim_server_client import server_client_for

    token = "drop-in-token-0123456789"
    async with GymServers(token=token, seed=1, checkpoint_root=tmp_path) as servers:
        client = server_client_for(servers.urls)
        adapter = GymCheckpointAdapter(instance=INSTANCE, client=client, auth_token=token)
        try:
            await adapter.discover()
            assert adapter.participants.names == {"policy_model", "simple_agent", "tool_resources"}
            deadline = time.time() + 30
            result = await adapter.prepare("ck-drop-in", deadline_ts=deadline)
            assert result.prepared and adapter.state == "prepared"
            summary = await adapter.commit("ck-drop-in", tmp_path, (), deadline_ts=deadline)
            assert summary.participants == ("policy_model", "simple_agent", "tool_resources")
            await adapter.resume("ck-drop-in", deadline_ts=deadline)
            assert adapter.state == "resumed"
        finally:
            await adapter.aclose()
        classmethod_built = GymCheckpointAdapter.from_server_client(
            instance=INSTANCE, client=client, auth_token=token, max_connections=2
        )
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(classmethod_built.aclose)
            await classmethod_built.discover()
            assert classmethod_built.participants.names == adapter.participants.names
    await adapter.aclose()  # a second close does nothing


async def test_a_wrong_token_fails_discovery_as_unavailable(tmp_path: Path) -> None:
    """The token given to the adapter is the one sent: a wrong one is refused by every server."""
    from envckpt.sim.server import GymServers

    from helpers.sim_server_client import server_client_for

    async with GymServers(token="right-token-0123456789", checkpoint_root=tmp_path) as servers:
        adapter = GymCheckpointAdapter(
            instance=INSTANCE,
            client=server_client_for(servers.urls),
            auth_token="wrong-token-0123456789",
        )
        try:
            with pytest.raises(GymCheckpointUnavailable):
                await adapter.discover()
        finally:
            await adapter.aclose()


def test_the_adapter_needs_one_way_to_reach_gym() -> None:
    """Neither coordination nor a client, a client without a token, or both: TypeError."""
    deployment = Deployment()
    client = SimpleNamespace(global_config_dict={})
    for kwargs in (
        {},
        {"client": client},
        {"client": client, "auth_token": ""},
        {"coordination": deployment.coordinator, "client": client, "auth_token": "t"},
    ):
        with pytest.raises(TypeError):
            GymCheckpointAdapter(instance=INSTANCE, **kwargs)  # type: ignore[arg-type]


async def test_without_the_http_extra_a_client_adapter_still_builds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """aiohttp, fastapi, uvicorn and httpx missing: the control client needs none of them."""
    for name in [*sys.modules]:
        if name.startswith("envckpt.http"):
            monkeypatch.delitem(sys.modules, name)
    for extra in ("aiohttp", "fastapi", "uvicorn", "httpx"):
        monkeypatch.setitem(sys.modules, extra, None)
    adapter = GymCheckpointAdapter(
        instance=INSTANCE, client=SimpleNamespace(global_config_dict={}), auth_token="t"
    )
    await adapter.aclose()


def test_a_client_adapter_names_a_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tampered: were a module of the http extra missing, the adapter names envckpt[http]."""
    monkeypatch.delitem(sys.modules, "envckpt.http.client", raising=False)
    monkeypatch.setitem(sys.modules, "orjson", None)
    with pytest.raises(MissingExtra) as caught:
        GymCheckpointAdapter(
            instance=INSTANCE, client=SimpleNamespace(global_config_dict={}), auth_token="t"
        )
    assert caught.value.extra == "http"


async def test_gyms_episode_objects_are_accepted_wherever_episodes_go(tmp_path: Path) -> None:
    """retire and commit take anything with rollout_id and attempt, as the seeds pass them."""
    deployment = Deployment()
    await deployment.start(E1, turn=2)
    adapter = await discovered(deployment)
    old = SimpleNamespace(rollout_id="old", attempt=0)
    await adapter.retire("ck-0", [old], deadline_ts=far(deployment))
    assert deployment.cores["agent"].fence.retired_rollouts
    result = await adapter.prepare("ck-1", deadline_ts=far(deployment))
    gym_e1 = SimpleNamespace(rollout_id=E1.rollout_id, attempt=E1.attempt)
    summary = await adapter.commit("ck-1", tmp_path, [gym_e1], deadline_ts=far(deployment))
    assert result.prepared and summary.exported_episodes == (E1,)
    await adapter.resume("ck-1", deadline_ts=far(deployment))
