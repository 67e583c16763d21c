"""Tests for envckpt.facade.instances: the InstanceClient interface and LocalInstance."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path

import pytest

from envckpt.errors import GymCheckpointUnavailable, IllegalTransition
from envckpt.facade.instances import InstanceClient, LocalInstance
from envckpt.facade.ray_instance import RayInstance
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.summaries import GymCheckpointCommitSummary, GymCheckpointPrepareSummary

from helpers.dict_deployment import Deployment
from helpers.facade_world import E1, E2, E3, A

RESTART_ONLY_TOOLS = (
    ("policy", "model", "export_restore"),
    ("agent", "agent", "export_restore"),
    ("tools", "resources", "restart_only"),
)


def local(deployment: Deployment) -> LocalInstance:
    return LocalInstance(GymCheckpointAdapter(instance=A, coordination=deployment.coordinator))


def deadline(deployment: Deployment) -> float:
    return deployment.clock.now() + 10


def operations(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in inspect.getmembers(cls)
        if not name.startswith("_") and inspect.iscoroutinefunction(member)
    }


@pytest.mark.parametrize("implementation", [LocalInstance, RayInstance])
def test_every_implementation_spells_the_interface_the_same_way(implementation: type) -> None:
    """LocalInstance and RayInstance have each InstanceClient operation (their own or the
    interface's), with its parameters."""
    wanted = operations(InstanceClient)
    assert len(wanted) == 12
    have = operations(implementation)
    assert set(wanted) <= set(have)
    for name, signature in wanted.items():
        assert list(have[name].parameters.values()) == list(signature.parameters.values()), name
    assert isinstance(inspect.getattr_static(implementation, "instance_id"), property)


def test_a_local_instance_and_its_adapter_carry_no_per_object_dict() -> None:
    """A trainer holds 100k of each: both are slotted, and so is the adapter's coordinator."""
    instance = local(Deployment())
    for held in (instance, instance.adapter, instance.adapter._coordination):
        assert not hasattr(held, "__dict__"), type(held).__name__
    with pytest.raises(AttributeError):
        instance.extra = 1  # type: ignore[attr-defined]


async def test_identity_and_state_are_the_adapters() -> None:
    """instance_id and state come from the adapter (its lifecycle machine)."""
    instance = local(Deployment())
    assert instance.instance_id == A.instance_id
    assert await instance.state() == "undiscovered"
    await instance.discover()
    assert await instance.state() == instance.adapter.state == "discovered"


async def test_before_discovery_the_participants_are_unavailable() -> None:
    """Participant names and restart-only servers need a discovered deployment."""
    deployment = Deployment()
    instance = local(deployment)
    with pytest.raises(GymCheckpointUnavailable) as info:
        await instance.participant_names()
    assert info.value.operation == "discover"
    with pytest.raises(GymCheckpointUnavailable):
        await instance.restart_only_servers()
    assert deployment.transport.requests == 0


async def test_participants_come_back_sorted_and_restart_only_ones_named() -> None:
    """participant_names is a sorted tuple; restart_only_servers lists the restart_only ones."""
    instance = local(Deployment(kinds=RESTART_ONLY_TOOLS))
    await instance.discover()
    assert await instance.participant_names() == ("agent", "policy", "tools")
    assert await instance.restart_only_servers() == ["tools"]


async def test_prepare_returns_a_picklable_summary_with_sorted_restarts() -> None:
    """The adapter's PrepareResult becomes a GymCheckpointPrepareSummary that pickles."""
    deployment = Deployment(kinds=RESTART_ONLY_TOOLS)
    for episode in (E3, E1):
        await deployment.start(episode)
    instance = local(deployment)
    await instance.discover()
    summary = await instance.prepare("ck-1", deadline_ts=deadline(deployment))
    assert type(summary) is GymCheckpointPrepareSummary
    assert summary.prepared and summary.blockers == {}
    assert summary.restarts == (E1, E3)
    assert pickle.loads(pickle.dumps(summary)) == summary


async def test_a_blocked_prepare_names_its_blockers() -> None:
    """An episode in flight on the agent comes back as a blocker, not prepared."""
    deployment = Deployment()
    await deployment.start(E1)
    instance = local(deployment)
    await instance.discover()
    async with deployment.cores["agent"].admit(E1):
        summary = await instance.prepare("ck-1", deadline_ts=deadline(deployment))
    assert not summary.prepared
    assert summary.blockers == {"agent": ("r1",)}
    assert await instance.state() == "preparing"


async def test_commit_returns_the_summary_and_resume_reopens(tmp_path: Path) -> None:
    """commit passes the adapter's summary through; resume brings every participant back."""
    deployment = Deployment()
    await deployment.start(E1)
    await deployment.start(E2)
    instance = local(deployment)
    await instance.discover()
    await instance.prepare("ck-1", deadline_ts=deadline(deployment))
    summary = await instance.commit("ck-1", str(tmp_path), (E1,), deadline_ts=deadline(deployment))
    assert type(summary) is GymCheckpointCommitSummary
    assert summary.exported_episodes == (E1,)
    assert set(summary.participants) == {"agent", "policy", "tools"}
    assert pickle.loads(pickle.dumps(summary)) == summary
    await instance.resume("ck-1", deadline_ts=deadline(deployment))
    assert await instance.state() == "resumed"
    assert {str(core.phase) for core in deployment.cores.values()} == {"idle"}


async def test_an_illegal_call_is_refused_typed_and_sends_nothing(tmp_path: Path) -> None:
    """A commit without a prepare raises the adapter's IllegalTransition; no request is sent."""
    deployment = Deployment()
    instance = local(deployment)
    await instance.discover()
    before = deployment.transport.requests
    with pytest.raises(IllegalTransition) as info:
        await instance.commit("ck-1", str(tmp_path), (), deadline_ts=deadline(deployment))
    assert (info.value.state, info.value.trigger) == ("discovered", "commit")
    assert deployment.transport.requests == before
    assert await instance.state() == "discovered"
