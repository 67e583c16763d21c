"""Lifecycle rows the rest of the suite reaches in one transport only (or at random), in both.

Each test runs twice: on ``Deployment()`` (the participant cores called in
process) and on ``Deployment(http=True)`` (every control call crossing
uvicorn, the FastAPI routes and the HTTP client). ``make verify`` judges
transition coverage per machine and per transport, so each row below is
fired here once by each run, each time with the state and replies checked:

* ``preparing`` --prepare_blocked / renew / prepare / fail-->, ``prepared``
  --renew-->, ``resumed`` --prepare_blocked / fail-->;
* ``committed`` --fail--> (a second commit cancelled after the first), after
  which only resume is allowed;
* ``restored`` --renew / retire / forget / abandon_restore-->.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.clock import SystemClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import GymCheckpointUnavailable, IllegalTransition
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.participant.core import DEFAULT_LEASE_GRACE_SECONDS

from helpers.dict_deployment import (
    E1,
    Deployment,
    LoopbackHttp,
    all_idle_and_open,
    discovered,
    far,
    saved_then_restored,
)
from helpers.fired_rows import fired

STALE = EnvironmentEpisode("old", 0)
TRANSPORTS = [pytest.param(False, id="in-process"), pytest.param(True, id="http")]
pytestmark = pytest.mark.usefixtures("close_loopback_servers")


def crossed(deployment: Deployment, before: int) -> bool:
    """Whether control calls crossed HTTP since ``before`` (always, for an HTTP deployment)."""
    return (LoopbackHttp.delivered > before) == deployment.http


@contextlib.asynccontextmanager
async def blocked_twice(
    deployment: Deployment, adapter: GymCheckpointAdapter
) -> AsyncIterator[None]:
    """c1's prepare and its retry, both blocked by r1 running on tools: preparing. r1 runs
    until the block ends."""
    async with deployment.cores["tools"].admit(E1):
        first = await adapter.prepare("c1", deadline_ts=far(deployment))
        again = await adapter.prepare("c1", deadline_ts=far(deployment))
        assert first.blockers() == again.blockers() == {"tools": ("r1",)}
        assert adapter.state == "preparing"
        yield


@pytest.mark.parametrize("http", TRANSPORTS)
async def test_a_blocked_prepare_is_renewed_and_then_ready(http: bool) -> None:
    """preparing: a renew extends every lease, then ready (and renewed again while prepared)."""
    delivered = LoopbackHttp.delivered
    deployment = Deployment(http=http)
    adapter = await discovered(deployment)
    with capture_logs() as logs:
        async with blocked_twice(deployment, adapter):
            renewed_to = far(deployment) + 1000
            await adapter.renew("c1", deadline_ts=renewed_to)
            assert adapter.state == "preparing"
            for core in deployment.cores.values():
                assert core.lease_expires_at == renewed_to + DEFAULT_LEASE_GRACE_SECONDS
        ready = await adapter.prepare("c1", deadline_ts=far(deployment))
        assert ready.prepared and adapter.state == "prepared"
        await adapter.renew("c1", deadline_ts=renewed_to + 10)
        assert all(
            core.lease_expires_at == renewed_to + 10 + DEFAULT_LEASE_GRACE_SECONDS
            for core in deployment.cores.values()
        )
        await adapter.resume("c1", deadline_ts=far(deployment))
    assert fired(logs, "instance_lifecycle") == [
        ("discovered", "prepare_blocked", "preparing"),
        ("preparing", "prepare_blocked", "preparing"),
        ("preparing", "renew", "preparing"),
        ("preparing", "prepare", "prepared"),
        ("prepared", "renew", "prepared"),
        ("prepared", "resume", "resumed"),
    ]
    assert all_idle_and_open(deployment)
    assert crossed(deployment, delivered)


@pytest.mark.parametrize("http", TRANSPORTS)
async def test_blocked_prepares_that_fail(http: bool) -> None:
    """From discovered and from resumed a blocked prepare stays preparing; a failure fails,
    and leaves only resume (a prepare is refused without a request)."""
    delivered = LoopbackHttp.delivered
    deployment = Deployment(http=http)
    adapter = await discovered(deployment)
    with capture_logs() as logs:
        async with blocked_twice(deployment, adapter):
            deployment.faults.add("error", server="tools", route="prepare")
            with pytest.raises(GymCheckpointUnavailable) as failed:
                await adapter.prepare("c1", deadline_ts=far(deployment))
            assert "tools" in failed.value.failures and adapter.state == "failed"
            before = deployment.transport.requests
            with pytest.raises(IllegalTransition):
                await adapter.prepare("c2", deadline_ts=far(deployment))
            assert deployment.transport.requests == before
            await adapter.resume("c1", deadline_ts=far(deployment))
            blocked = await adapter.prepare("c2", deadline_ts=far(deployment))
            assert blocked.blockers() == {"tools": ("r1",)} and adapter.state == "preparing"
            await adapter.resume("c2", deadline_ts=far(deployment))
        deployment.faults.add("unreachable", server="agent", route="prepare")
        with pytest.raises(GymCheckpointUnavailable) as unreachable:
            await adapter.prepare("c3", deadline_ts=far(deployment))
        assert "agent" in unreachable.value.failures and adapter.state == "failed"
        await adapter.resume("c3", deadline_ts=far(deployment))
    assert fired(logs, "instance_lifecycle") == [
        ("discovered", "prepare_blocked", "preparing"),
        ("preparing", "prepare_blocked", "preparing"),
        ("preparing", "fail", "failed"),
        ("failed", "resume", "resumed"),
        ("resumed", "prepare_blocked", "preparing"),
        ("preparing", "resume", "resumed"),
        ("resumed", "fail", "failed"),
        ("failed", "resume", "resumed"),
    ]
    assert adapter.state == "resumed" and all_idle_and_open(deployment)
    assert crossed(deployment, delivered)


@pytest.mark.parametrize("http", TRANSPORTS)
async def test_a_commit_failing_after_another_commit_committed(http: bool, tmp_path: Path) -> None:
    """committed --fail: a second commit of the same checkpoint, cancelled after the first."""
    delivered = LoopbackHttp.delivered
    deployment = Deployment(http=http, clock=SystemClock())
    await deployment.start(E1, turn=2)
    adapter = await discovered(deployment)
    await adapter.prepare("c1", deadline_ts=far(deployment))
    # The second commit's request to tools waits (slow) until its deadline.
    deployment.faults.add("slow", server="tools", route="commit")
    second = asyncio.create_task(adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment)))
    for _ in range(10_000):
        if deployment.faults.fired:
            break
        await asyncio.sleep(0)
    assert deployment.faults.fired == [("slow", "tools", "commit")]
    with capture_logs() as logs:
        summary = await adapter.commit("c1", tmp_path, [E1], deadline_ts=far(deployment))
        assert adapter.state == "committed" and summary.exported_episodes == (E1,)
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
    assert fired(logs, "instance_lifecycle") == [
        ("prepared", "commit", "committed"),
        ("committed", "fail", "failed"),
    ]
    with pytest.raises(IllegalTransition):
        await adapter.prepare("c2", deadline_ts=far(deployment))
    await adapter.resume("c1", deadline_ts=far(deployment))
    assert adapter.state == "resumed" and all_idle_and_open(deployment)
    assert crossed(deployment, delivered)


@pytest.mark.parametrize("http", TRANSPORTS)
async def test_a_restore_renewed_cleaned_up_then_abandoned(http: bool, tmp_path: Path) -> None:
    """restored: renew, retire and forget keep the state; abandoning drops what it installed."""
    delivered = LoopbackHttp.delivered
    fresh, adapter = await saved_then_restored(Deployment(http=http), tmp_path, E1)
    assert adapter.state == "restored"
    assert fresh.hooks["agent"].state == {E1.next_attempt(): {"turn": 2}}
    with capture_logs() as logs:
        renewed_to = far(fresh) + 1000
        await adapter.renew("r1", deadline_ts=renewed_to)
        assert all(
            core.phase == "restored"
            and core.lease_expires_at == renewed_to + DEFAULT_LEASE_GRACE_SECONDS
            for core in fresh.cores.values()
        )
        await adapter.retire("r1", [STALE], deadline_ts=far(fresh))
        assert all(core.fence.mark("old") == 0 for core in fresh.cores.values())
        await adapter.forget("r1", ["old"], deadline_ts=far(fresh))
        assert all(core.fence.mark("old") is None for core in fresh.cores.values())
        assert fresh.hooks["agent"].state == {E1.next_attempt(): {"turn": 2}}
        await adapter.abandon_restore("r1", [E1], deadline_ts=far(fresh))
    assert fired(logs, "instance_lifecycle") == [
        ("restored", "renew", "restored"),
        ("restored", "retire", "restored"),
        ("restored", "forget", "restored"),
        ("restored", "abandon_restore", "restore_failed"),
        ("restore_failed", "retire", "restore_failed"),
        ("restore_failed", "resume", "resumed"),
    ]
    # The restored attempt is retired everywhere: its state gone, the attempt fenced.
    assert all(hooks.state == {} for hooks in fresh.hooks.values())
    assert all(core.fence.mark("r1") == 1 for core in fresh.cores.values())
    assert adapter.state == "resumed" and all_idle_and_open(fresh)
    assert crossed(fresh, delivered)
