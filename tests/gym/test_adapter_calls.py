"""What each adapter call sends, names and remembers: operations, checkpoint ids, retries.

These pin the adapter's contract beyond legality (``test_adapter.py``): a
failure names the operation that failed, every fired transition names the
checkpoint it was fired for, renew reaches every participant with its
deadline, a commit exports exactly its scope, and ``abandon_restore`` tries
its retire a bounded number of times, always resumes, and tells the host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import structlog
from structlog.testing import capture_logs

from envckpt.coordination.coordinator import CLEANUP_SECONDS
from envckpt.errors import (
    GymCheckpointUnavailable,
    IncompatibleCheckpoint,
    ProtocolViolation,
    UnsupportedDeployment,
)
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.participant.core import DEFAULT_LEASE_GRACE_SECONDS

from helpers.dict_deployment import (
    E1,
    E2,
    INSTANCE,
    Deployment,
    discovered,
    far,
    prepared_with,
    restore_r1,
)
from helpers.sim_server_client import server_client_for

# Nothing listens on the discard port: a client-built adapter's calls fail fast.
NOWHERE = {"policy_model": "http://127.0.0.1:9"}


def fired(logs: list[dict[str, Any]]) -> list[tuple[str, str, str | None]]:
    """(trigger, dest, checkpoint id) of every instance lifecycle transition logged."""
    return [
        (e["trigger"], e["dest"], e["checkpoint_id"])
        for e in logs
        if e.get("machine") == "instance_lifecycle"
    ]


async def saved(tmp_path: Path) -> tuple[Deployment, tuple[str, ...]]:
    """E1 committed at turn 2 under c1 in ``tmp_path``; a fresh process of that deployment."""
    deployment = Deployment()
    await deployment.start(E1, turn=2)
    adapter = await discovered(deployment)
    await adapter.prepare("c1", deadline_ts=far(deployment))
    summary = await adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment))
    await adapter.resume("c1", deadline_ts=far(deployment))
    return deployment.fresh(), summary.participants


# ---------------------------------------------------------------- failures


Operation = Callable[[GymCheckpointAdapter, Deployment, Path], Awaitable[Any]]


async def _prepare(adapter: GymCheckpointAdapter, d: Deployment, _: Path) -> Any:
    return await adapter.prepare("c1", deadline_ts=far(d))


async def _renew(adapter: GymCheckpointAdapter, d: Deployment, _: Path) -> Any:
    await adapter.prepare("c1", deadline_ts=far(d))
    return await adapter.renew("c1", deadline_ts=far(d))


async def _commit(adapter: GymCheckpointAdapter, d: Deployment, root: Path) -> Any:
    await adapter.prepare("c1", deadline_ts=far(d))
    return await adapter.commit("c1", root, [], deadline_ts=far(d))


async def _resume(adapter: GymCheckpointAdapter, d: Deployment, _: Path) -> Any:
    await adapter.prepare("c1", deadline_ts=far(d))
    return await adapter.resume("c1", deadline_ts=far(d))


async def _retire(adapter: GymCheckpointAdapter, d: Deployment, _: Path) -> Any:
    return await adapter.retire("c0", [E1], deadline_ts=far(d))


async def _forget(adapter: GymCheckpointAdapter, d: Deployment, _: Path) -> Any:
    return await adapter.forget("c0", ["r1"], deadline_ts=far(d))


OPERATIONS: dict[str, Operation] = {
    "prepare": _prepare,
    "renew": _renew,
    "commit": _commit,
    "resume": _resume,
    "retire": _retire,
    "forget": _forget,
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_a_failed_call_names_its_operation(operation: str, tmp_path: Path) -> None:
    """An unreachable participant fails the call as unavailable, naming the operation."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    deployment.faults.add("unreachable", server="policy", route=operation)
    with pytest.raises(GymCheckpointUnavailable) as info:
        await OPERATIONS[operation](adapter, deployment, tmp_path)
    assert info.value.operation == operation
    assert "policy" in info.value.failures


async def test_a_failed_discovery_and_restore_name_their_operations(tmp_path: Path) -> None:
    """discover and restore failures are unavailable, naming discover and restore."""
    fresh, participants = await saved(tmp_path)
    adapter = GymCheckpointAdapter(instance=INSTANCE, coordination=fresh.coordinator)
    fresh.faults.add("unreachable", server="agent", route="status")
    with pytest.raises(GymCheckpointUnavailable) as info:
        await adapter.discover()
    assert info.value.operation == "discover"
    await adapter.discover()
    fresh.faults.add("unreachable", server="agent", route="restore")
    with pytest.raises(GymCheckpointUnavailable) as info:
        await restore_r1(adapter, fresh, tmp_path, participants)
    assert info.value.operation == "restore"
    assert adapter.state == "restore_failed"


async def test_an_undiscovered_adapter_has_no_participants() -> None:
    """Before discovery, participants is unavailable under the discover operation."""
    adapter = GymCheckpointAdapter(instance=INSTANCE, coordination=Deployment().coordinator)
    with pytest.raises(GymCheckpointUnavailable) as info:
        _ = adapter.participants
    assert info.value.operation == "discover"
    assert str(info.value) == ("Gym instance 'shard/replica-0' has not discovered its deployment")


async def test_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    """Environment participants and missing participants are refused by name."""
    environment = Deployment(
        kinds=(("policy", "model", "export_restore"), ("env", "environment", "export_restore"))
    )
    with pytest.raises(UnsupportedDeployment) as refused:
        await discovered(environment)
    assert str(refused.value) == (
        "turn-level recovery does not support environment-server participants: ['env']; "
        "route them through a legacy agent relay"
    )
    adapter = await discovered(Deployment())
    with pytest.raises(IncompatibleCheckpoint) as incompatible:
        await restore_r1(adapter, Deployment(), tmp_path, ("agent", "ghost"))
    assert str(incompatible.value) == (
        "Gym instance 'shard/replica-0' lacks participants the checkpoint saved state for: "
        "['ghost']"
    )


# ------------------------------------------------------ checkpoint ids, scope


async def test_every_transition_names_the_checkpoint_it_was_fired_for(tmp_path: Path) -> None:
    """prepare_blocked, prepare, renew, commit, resume, retire, forget and fail name their id."""
    deployment = Deployment()
    await deployment.start(E1)
    adapter = await discovered(deployment)
    with capture_logs() as logs:
        async with deployment.cores["tools"].admit(E1):
            await adapter.prepare("c1", deadline_ts=far(deployment))
        await adapter.prepare("c1", deadline_ts=far(deployment))
        await adapter.renew("c1", deadline_ts=far(deployment))
        await adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment))
        await adapter.resume("c1", deadline_ts=far(deployment))
        await adapter.retire("c2", [E2], deadline_ts=far(deployment))
        await adapter.forget("c3", ["r2"], deadline_ts=far(deployment))
        deployment.faults.add("unreachable", server="policy", route="prepare")
        with pytest.raises(GymCheckpointUnavailable):
            await adapter.prepare("c4", deadline_ts=far(deployment))
        deployment.faults.add("error", server="tools", route="resume")
        with pytest.raises(GymCheckpointUnavailable):
            await adapter.resume("c4", deadline_ts=far(deployment))
        await adapter.resume("c4", deadline_ts=far(deployment))
    assert fired(logs) == [
        ("prepare_blocked", "preparing", "c1"),
        ("prepare", "prepared", "c1"),
        ("renew", "prepared", "c1"),
        ("commit", "committed", "c1"),
        ("resume", "resumed", "c1"),
        ("retire", "resumed", "c2"),
        ("forget", "resumed", "c3"),
        ("fail", "failed", "c4"),
        ("resume", "resumed", "c4"),
    ]


async def test_a_failed_commit_and_a_restore_name_their_checkpoints(tmp_path: Path) -> None:
    """fail (in commit), restore, abandon_restore and fail_restore carry the call's id."""
    deployment = Deployment()
    adapter = await prepared_with(deployment, E1)
    deployment.faults.add("error", server="tools", route="commit")
    with capture_logs() as logs, pytest.raises(GymCheckpointUnavailable):
        await adapter.commit("c1", tmp_path / "failed", [E1], deadline_ts=far(deployment))
    assert fired(logs) == [("fail", "failed", "c1")]
    await adapter.resume("c1", deadline_ts=far(deployment))

    fresh, participants = await saved(tmp_path / "good")
    restored = await discovered(fresh)
    other = await discovered(fresh.fresh())
    with capture_logs() as logs:
        await restore_r1(restored, fresh, tmp_path / "good", participants)
        await restored.abandon_restore("r1", [E1], deadline_ts=far(fresh))
        with pytest.raises(ProtocolViolation):
            await other.restore(
                "r2",
                tmp_path / "good",
                [E1],
                participants=participants,
                source_checkpoint_id="not-c1",
                deadline_ts=far(fresh),
            )
    assert fired(logs) == [
        ("restore", "restored", "r1"),
        ("abandon_restore", "restore_failed", "r1"),
        ("retire", "restore_failed", "r1"),
        ("resume", "resumed", "r1"),
        ("fail_restore", "restore_failed", "r2"),
    ]


async def test_renew_reaches_every_participant_with_its_deadline() -> None:
    """A renew arms every participant's lease from its deadline and keeps the state."""
    deployment = Deployment()
    adapter = await discovered(deployment)
    await adapter.prepare("c1", deadline_ts=far(deployment))
    deadline = far(deployment) + 500
    before = deployment.transport.requests
    await adapter.renew("c1", deadline_ts=deadline)
    assert adapter.state == "prepared"
    assert deployment.transport.requests - before == len(deployment.cores)
    for core in deployment.cores.values():
        assert core.checkpoint_id == "c1"
        assert core.lease_expires_at == deadline + DEFAULT_LEASE_GRACE_SECONDS


async def test_a_commit_exports_exactly_its_scope(tmp_path: Path) -> None:
    """With r1 and r2 held, a commit of r1 saves r1 only."""
    deployment = Deployment()
    await deployment.start(E1, turn=2)
    await deployment.start(E2, turn=1)
    adapter = await discovered(deployment)
    await adapter.prepare("c1", deadline_ts=far(deployment))
    summary = await adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment))
    assert summary.exported_episodes == (E1,)
    assert set(summary.staging_keys) == {"r1/t0", "r1/t1"}
    await adapter.resume("c1", deadline_ts=far(deployment))


async def test_restart_only_servers_are_listed_by_name() -> None:
    """Only participants in restart_only mode are listed, sorted."""
    deployment = Deployment(
        kinds=(
            ("policy", "model", "export_restore"),
            ("agent", "agent", "restart_only"),
            ("tools", "resources", "restart_only"),
        )
    )
    adapter = await discovered(deployment)
    assert await adapter.restart_only_servers() == ["agent", "tools"]
    assert await (await discovered(Deployment())).restart_only_servers() == []


# ------------------------------------------------------------ abandon_restore


async def test_abandoning_a_kept_restore_retires_the_restored_attempts(tmp_path: Path) -> None:
    """From restored: the restore is void first, then retired everywhere, then resumed."""
    fresh, participants = await saved(tmp_path)
    adapter = await discovered(fresh)
    await restore_r1(adapter, fresh, tmp_path, participants)
    assert fresh.hooks["agent"].state == {E1.next_attempt(): {"turn": 2}}
    await adapter.abandon_restore("r1", [E1], deadline_ts=far(fresh))
    assert adapter.state == "resumed"
    for name, core in fresh.cores.items():
        assert core.fence.mark("r1") == 1
        assert core.phase == "idle"
        assert fresh.hooks[name].state == {}


async def restore_failed(tmp_path: Path) -> tuple[Deployment, GymCheckpointAdapter]:
    """A fresh deployment whose restore of c1 failed (a participant was unreachable)."""
    fresh, participants = await saved(tmp_path)
    adapter = await discovered(fresh)
    fresh.faults.add("unreachable", server="policy", route="restore")
    with pytest.raises(GymCheckpointUnavailable):
        await restore_r1(adapter, fresh, tmp_path, participants)
    assert adapter.state == "restore_failed"
    return fresh, adapter


def _retires(deployment: Deployment) -> int:
    return sum(
        1
        for kind, _, route in deployment.faults.fired
        if (kind, route) == ("unreachable", "retire")
    )


@pytest.mark.parametrize(("attempts", "tried"), [(None, 3), (0, 1), (2, 2)])
async def test_a_retire_that_keeps_failing_is_tried_then_raised_after_resume(
    attempts: int | None,
    tried: int,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Three tries by default (at least one), resume still runs, the host hears of it."""
    fresh, adapter = await restore_failed(tmp_path)
    fresh.faults.add("unreachable", server="agent", route="retire", times=-1)
    kwargs = {} if attempts is None else {"retire_attempts": attempts}
    caplog.set_level(logging.WARNING, logger="envckpt")
    with _stdlib_logging(), pytest.raises(GymCheckpointUnavailable) as info:
        await adapter.abandon_restore("r1", [E1], deadline_ts=far(fresh), **kwargs)
    assert info.value.operation == "retire" and "agent" in info.value.failures
    assert _retires(fresh) == tried
    assert adapter.state == "resumed"
    assert all(core.phase == "idle" for core in fresh.cores.values())
    warnings = [r for r in caplog.records if r.name.startswith("envckpt")]
    assert [(r.name, r.levelno) for r in warnings] == [("envckpt.adapter", logging.WARNING)]
    assert warnings[0].envckpt == {  # type: ignore[attr-defined]
        "event": "abandon restore: retire failed",
        "instance_id": "shard/replica-0",
        "failures": info.value.failures,
    }


async def test_a_retire_that_fails_once_is_retried_and_nothing_is_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """One failed retire, then a good one: no error, no warning, the attempts retired."""
    fresh, adapter = await restore_failed(tmp_path)
    fresh.faults.add("unreachable", server="agent", route="retire", times=1)
    caplog.set_level(logging.WARNING, logger="envckpt")
    with _stdlib_logging():
        await adapter.abandon_restore("r1", [E1], deadline_ts=far(fresh))
    assert _retires(fresh) == 1
    assert adapter.state == "resumed"
    assert all(core.fence.mark("r1") == 1 for core in fresh.cores.values())
    assert not [r for r in caplog.records if r.name.startswith("envckpt")]


async def test_a_cleanup_past_the_callers_deadline_gets_room_on_the_coordination_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's deadline has passed: each retire and the resume get CLEANUP_SECONDS of
    their own on the participants' clock, so the cleanup still lands."""
    fresh, adapter = await restore_failed(tmp_path)
    assert fresh.clock.now() > time.time() + 60  # the fake clock is ahead of the system's
    resumes: list[float] = []
    resume = GymCheckpointAdapter.resume

    async def recording_resume(
        self: GymCheckpointAdapter, checkpoint_id: str, *, deadline_ts: float
    ) -> None:
        resumes.append(deadline_ts)  # participants never refuse a late resume: look at it
        await resume(self, checkpoint_id, deadline_ts=deadline_ts)

    monkeypatch.setattr(GymCheckpointAdapter, "resume", recording_resume)
    await adapter.abandon_restore("r1", [E1], deadline_ts=fresh.clock.now() - 1)
    assert resumes == [fresh.clock.now() + CLEANUP_SECONDS]
    assert adapter.state == "resumed"
    assert all(core.fence.mark("r1") == 1 for core in fresh.cores.values())
    assert all(core.phase == "idle" for core in fresh.cores.values())


class _NoClock:
    """A coordination that keeps no clock of its own (it forwards everything else)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "clock":
            raise AttributeError(name)
        return getattr(self._inner, name)


async def test_a_coordination_without_a_clock_cleans_up_on_the_system_clock(
    tmp_path: Path,
) -> None:
    """No clock on the coordination: cleanup deadlines come from the system clock."""
    fresh, participants = await saved(tmp_path)
    adapter = GymCheckpointAdapter(instance=INSTANCE, coordination=_NoClock(fresh.coordinator))
    await adapter.discover()
    fresh.faults.add("unreachable", server="policy", route="restore")
    with pytest.raises(GymCheckpointUnavailable):
        await restore_r1(adapter, fresh, tmp_path, participants)
    # Ahead of the system clock, so the caller's deadline is what the cleanup uses.
    await adapter.abandon_restore("r1", [E1], deadline_ts=far(fresh))
    assert adapter.state == "resumed"
    assert all(core.fence.mark("r1") == 1 for core in fresh.cores.values())


class _stdlib_logging:
    """structlog unconfigured for a while: envckpt's events go to stdlib logging."""

    def __enter__(self) -> None:
        self.configured = structlog.is_configured()
        self.previous = structlog.get_config()
        structlog.reset_defaults()

    def __exit__(self, *_: object) -> None:
        if self.configured:
            structlog.configure(**self.previous)


# ------------------------------------------------------------- construction


def test_each_wrong_construction_says_how_to_build_one() -> None:
    """No way to reach Gym, or two ways: TypeError saying which arguments go together."""
    deployment = Deployment()
    client = SimpleNamespace(global_config_dict={})
    needs = (
        "GymCheckpointAdapter needs coordination=, or client= (a nemo-gym ServerClient) "
        "with auth_token="
    )
    both = "give coordination= or client= with auth_token=, not both"
    for kwargs, message in (
        ({}, needs),
        ({"client": client}, needs),
        ({"coordination": deployment.coordinator, "client": client}, both),
        ({"coordination": deployment.coordinator, "auth_token": "t"}, both),
        ({"coordination": deployment.coordinator, "client": client, "auth_token": "t"}, both),
    ):
        with pytest.raises(TypeError) as caught:
            GymCheckpointAdapter(instance=INSTANCE, **kwargs)  # type: ignore[arg-type]
        assert str(caught.value) == message


async def test_closing_an_adapter_given_coordination_closes_nothing() -> None:
    """aclose on an adapter built over coordination= leaves it usable."""
    deployment = Deployment()
    adapter = GymCheckpointAdapter(instance=INSTANCE, coordination=deployment.coordinator)
    await adapter.aclose()
    await adapter.discover()
    assert adapter.state == "discovered"


@pytest.mark.parametrize("how", ["client", "from_server_client"])
async def test_a_client_built_adapter_owns_its_transport(how: str) -> None:
    """Its coordinator names the Gym instance, and aclose closes the HTTP transport."""
    client = server_client_for(NOWHERE)
    if how == "client":
        adapter = GymCheckpointAdapter(instance=INSTANCE, client=client, auth_token="t" * 16)
    else:
        adapter = GymCheckpointAdapter.from_server_client(
            instance=INSTANCE, client=client, auth_token="t" * 16
        )
    assert adapter._coordination.instance_id == "shard/replica-0"  # type: ignore[attr-defined]
    await adapter.aclose()
    with pytest.raises(GymCheckpointUnavailable) as info:
        await adapter.discover()
    assert set(info.value.failures.values()) == {"the transport is closed"}


def test_transport_options_reach_the_http_transport() -> None:
    """from_server_client passes its options on: a bad max_connections is refused."""
    with pytest.raises(ValueError, match="max_connections must be at least 1"):
        GymCheckpointAdapter.from_server_client(
            instance=INSTANCE,
            client=server_client_for(NOWHERE),
            auth_token="t" * 16,
            max_connections=0,
        )
