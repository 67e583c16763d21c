"""Machine rows the rest of the suite reaches rarely, only in process or never, over real HTTP.

Every test drives ``Deployment(http=True)`` (``helpers.dict_deployment``): each
control call crosses uvicorn, the FastAPI routes and the HTTP client to
participant cores these tests also read. ``make verify``'s transition
coverage counts each row fired here as exercised over HTTP:

* instance lifecycle: ``discovered`` --retire / forget / fail /
  fail_restore--> (``preparing``, ``prepared``, ``committed`` and
  ``restored`` rows are ``test_rows_in_each_transport.py``'s, run over HTTP
  too);
* participant phases: ``restored`` --expire--> (a restored lease runs out);
* instance lifecycle: ``prepared`` --fail--> (one instance's commit fails);
* snapshot session: ``committed`` --resume--> (a snapshot left without
  checking the cut), ``prepared`` --abort--> (a commit failed).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import CorruptCheckpoint, GymCheckpointUnavailable
from envckpt.facade.manifest import MANIFEST_NAME

from helpers.dict_deployment import (
    E1,
    Deployment,
    all_idle_and_open,
    discovered,
    far,
    pass_every_lease,
    restore_r1,
    saved_then_restored,
)
from helpers.facade_world import A, B, FacadeWorld
from helpers.fired_rows import fired

STALE = EnvironmentEpisode("old", 0)
pytestmark = pytest.mark.usefixtures("close_loopback_servers")


async def test_cleanup_calls_and_a_failed_prepare_between_checkpoints() -> None:
    """discovered: retire raises the mark everywhere, forget clears it, a failed prepare fails."""
    deployment = Deployment(http=True)
    adapter = await discovered(deployment)
    with capture_logs() as logs:
        await adapter.retire("c0", [STALE], deadline_ts=far(deployment))
        assert all(core.fence.mark("old") == 0 for core in deployment.cores.values())
        await adapter.forget("c0", ["old"], deadline_ts=far(deployment))
        assert all(core.fence.mark("old") is None for core in deployment.cores.values())
        deployment.faults.add("unreachable", server="policy", route="prepare")
        with pytest.raises(GymCheckpointUnavailable):
            await adapter.prepare("c1", deadline_ts=far(deployment))
    assert fired(logs, "instance_lifecycle") == [
        ("discovered", "retire", "discovered"),
        ("discovered", "forget", "discovered"),
        ("discovered", "fail", "failed"),
    ]
    # agent and tools opened c1 before policy's failure: resume closes it everywhere.
    await adapter.resume("c1", deadline_ts=far(deployment))
    assert adapter.state == "resumed" and all_idle_and_open(deployment)


async def test_a_restore_refused_by_every_participant_is_abandoned(tmp_path: Path) -> None:
    """Nothing saved there: restore_failed, then the abandon retires and resumes."""
    deployment = Deployment(http=True)
    adapter = await discovered(deployment)
    with capture_logs() as logs, pytest.raises(CorruptCheckpoint):
        await restore_r1(adapter, deployment, tmp_path, ("agent",))
    assert fired(logs, "instance_lifecycle") == [("discovered", "fail_restore", "restore_failed")]
    await adapter.abandon_restore("r1", [E1], deadline_ts=far(deployment))
    assert adapter.state == "resumed" and all_idle_and_open(deployment)
    assert all(core.fence.mark("r1") == 1 for core in deployment.cores.values())


async def test_a_restored_participant_whose_lease_ran_out_resumes_itself(tmp_path: Path) -> None:
    """Past a restore's lease the next call finds every participant idle, state kept."""
    fresh, adapter = await saved_then_restored(Deployment(http=True), tmp_path, E1)
    assert adapter.state == "restored"
    pass_every_lease(fresh)
    with capture_logs() as logs:
        for name in fresh.cores:
            reply = await fresh.transport.request(name, "GET", "status", None, timeout=30)
            assert reply.status == 200 and reply.body["phase"] == "idle"
    expired = [
        (e["server"], e["source"], e["dest"])
        for e in logs
        if e.get("machine") == "participant_phases" and e["trigger"] == "expire"
    ]
    assert sorted(expired) == [(name, "restored", "idle") for name in sorted(fresh.cores)]
    assert all_idle_and_open(fresh)
    assert fresh.hooks["agent"].state == {E1.next_attempt(): {"turn": 2}}
    await adapter.resume("r1", deadline_ts=far(fresh))  # the id has finished: idempotent
    assert adapter.state == "resumed"


async def two_instances_over_http() -> FacadeWorld:
    """Instances A and B, each a deployment over real HTTP on one fake clock; E1 runs on A."""
    clock = FakeClock()
    world = FacadeWorld(
        clock=clock,
        deployments={A: Deployment(clock=clock, http=True), B: Deployment(clock=clock, http=True)},
    )
    await world.start(A, E1)
    return world


async def test_a_snapshot_left_without_checking_the_cut_resumes_from_committed(
    tmp_path: Path,
) -> None:
    """The snapshot session resumes from committed when the cut is never checked."""
    world = await two_instances_over_http()
    with capture_logs() as logs:
        async with world.facade.snapshot(tmp_path / "snap") as snap:
            assert snap is not None
    assert fired(logs, "snapshot_session") == [
        ("opened", "prepare", "prepared"),
        ("prepared", "commit", "committed"),
        ("committed", "resume", "resumed"),
    ]
    assert world.all_idle()
    assert (tmp_path / "snap" / MANIFEST_NAME).is_file()


async def test_a_commit_failing_on_one_instance_aborts_the_prepared_snapshot(
    tmp_path: Path,
) -> None:
    """prepared --fail (one instance's commit fails) and the snapshot aborts from prepared."""
    world = await two_instances_over_http()
    world.deployments[B].faults.add("error", server="tools", route="commit")
    with capture_logs() as logs, pytest.raises(GymCheckpointUnavailable) as failed:
        async with world.facade.snapshot(tmp_path / "snap"):
            pass
    assert "tools" in str(failed.value)
    # The two instances commit concurrently: their rows interleave in either order.
    assert sorted(fired(logs, "instance_lifecycle")) == sorted(
        [
            *[("undiscovered", "discover", "discovered")] * 2,
            *[("discovered", "prepare", "prepared")] * 2,
            ("prepared", "commit", "committed"),
            ("committed", "resume", "resumed"),
            ("prepared", "fail", "failed"),
            ("failed", "resume", "resumed"),
        ]
    )
    assert fired(logs, "snapshot_session") == [
        ("opened", "prepare", "prepared"),
        ("prepared", "abort", "aborted"),
    ]
    assert world.all_idle()
    assert not (tmp_path / "snap" / MANIFEST_NAME).exists()
