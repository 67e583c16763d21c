"""Tests for envckpt.sim.multiworker: participant servers under uvicorn's multi-worker mode,
as real processes (``python -m envckpt.sim.server --workers N``) on 127.0.0.1.

Every test runs with 2 workers, and with 4 (marked slow: each deployment is
three uvicorn supervisors and 3 x N workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.http.workers import owner_slot
from envckpt.participant.store import read_manifest
from envckpt.sim.gym import AGENT_SERVER, MODEL_SERVER, RESOURCES_SERVER, expected_transcript
from envckpt.sim.http_gym import HttpGym

from helpers.worker_deployment import TOKEN, WorkerDeployment, rollouts_per_slot

PARTICIPANTS = (MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER)
TASK = {"prompt": "plan", "turns": 24}


@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)])
def workers(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory, workers: int) -> Path:
    return tmp_path_factory.mktemp(f"workers{workers}")


@pytest.fixture(scope="module")
def deployment(root: Path, workers: int) -> Iterator[WorkerDeployment]:
    with WorkerDeployment.start(root, workers=workers, tool_latency=0.05) as running:
        yield running


@pytest.fixture(autouse=True)
def no_checkpoint_left_open(deployment: WorkerDeployment) -> Iterator[None]:
    """The deployment is shared by the module: a test that fails mid-checkpoint does not
    leave it open for the next (resume also aborts), so one failure is reported once."""
    yield
    for server in PARTICIPANTS:
        with contextlib.suppress(httpx.HTTPError, AssertionError, KeyError):
            status = deployment.control(server).status()
            if status["phase"] != "idle" and status.get("checkpoint_id"):
                deployment.control(server).post("resume", checkpoint_id=status["checkpoint_id"])


def test_status_reports_workers_and_expected_workers(
    deployment: WorkerDeployment, workers: int
) -> None:
    """Each participant's status counts its live workers and the workers it runs, as Gym's do."""
    for server in PARTICIPANTS:
        status = deployment.control(server).status()
        assert (status["workers"], status["expected_workers"]) == (workers, workers)
        assert status["phase"] == "idle" and status["report"]["ready"] is True
        assert sorted(deployment.registrations(server)) == list(range(workers))


def test_a_snapshot_covers_every_worker_and_restores_into_fresh_workers(
    deployment: WorkerDeployment, root: Path, workers: int
) -> None:
    """prepare closes admission in every worker, commit writes every worker's episodes into
    one records file per participant, and a fresh N-worker deployment continues them all."""
    rollout_ids = rollouts_per_slot(workers=workers, each=2, prefix="cycle")
    episodes = [EnvironmentEpisode(rollout_id, 0) for rollout_id in rollout_ids]
    checkpoint = root / "cycle-checkpoint"
    finished = asyncio.run(_snapshot_mid_rollout(deployment, episodes, checkpoint, workers))
    assert all(result["status"] == "completed" for result in finished)

    for server, kind in ((MODEL_SERVER, "model"), (AGENT_SERVER, "agent")):
        files = sorted(p.name for p in (checkpoint / "gym" / kind / server).iterdir())
        assert len(files) == 2 and files[0] == "manifest.json", files
        manifest = read_manifest(checkpoint, kind=kind, instance=server)
        assert manifest.record_count == len(episodes)

    with WorkerDeployment.start(root, workers=workers, tool_latency=0.05) as fresh:
        results = asyncio.run(_restore_and_continue(fresh, episodes, checkpoint))
    resumed = {r["episode"]["rollout_id"]: r["resumed_from_turn"] for r in results}
    for result in results:
        rollout_id = result["episode"]["rollout_id"]
        assert result["transcript"] == expected_transcript(rollout_id, TASK, seed=7)
        assert result["episode"]["attempt"] == 1
    slots_resumed = {owner_slot(r, workers) for r, turn in resumed.items() if turn > 0}
    assert slots_resumed == set(range(workers)), resumed


async def _snapshot_mid_rollout(
    deployment: WorkerDeployment,
    episodes: list[EnvironmentEpisode],
    checkpoint: Path,
    workers: int,
) -> list[dict[str, object]]:
    async with HttpGym(deployment.urls, token=TOKEN) as gym:
        runs = [gym.start(episode, TASK) for episode in episodes]
        await _until_every_rollout_took_a_turn(deployment, episodes)
        coordinator = gym.coordinator
        participants = await coordinator.discover()
        cid = f"cycle-{time.time_ns()}"
        deadline = time.time() + 60
        prepared = await coordinator.prepare(participants, cid, deadline_ts=deadline)
        assert prepared.prepared, prepared.blockers()
        # Every worker of the model refuses a new rollout it would own.
        async with httpx.AsyncClient(trust_env=False, timeout=30) as client:
            for slot in range(workers):
                newcomer = rollouts_per_slot(workers=workers, each=1, prefix="late")[slot]
                assert owner_slot(newcomer, workers) == slot
                reply = await client.post(
                    f"{deployment.urls[MODEL_SERVER]}/generate",
                    json={"episode": {"rollout_id": newcomer, "attempt": 0}, "turn": 0,
                          "observation": "o"},
                )  # fmt: skip
                assert reply.status_code == 409, reply.text
                assert reply.json()["error"]["code"] == "admission_closed"
        replies = await coordinator.commit(
            participants, cid, str(checkpoint), episodes, deadline_ts=deadline
        )
        keys = sorted(episode.capture_key for episode in episodes)
        for server in (MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER):
            assert replies[server]["episode_ids"] == keys, (server, replies[server])
        await coordinator.resume(participants, cid, deadline_ts=deadline)
        return list(await asyncio.gather(*runs))


async def _until_every_rollout_took_a_turn(
    deployment: WorkerDeployment, episodes: list[EnvironmentEpisode]
) -> None:
    """Until the model holds a row of every rollout (each then holds a saved turn).

    Counted as ``parked``: held and not in flight, so a first generation still
    running (which may yet be cut by the checkpoint) does not count.
    """
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up:
        status = deployment.control(MODEL_SERVER).status()
        if status["report"]["counts"]["parked"] >= len(episodes):
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the rollouts never all reached the model")


async def _restore_and_continue(
    fresh: WorkerDeployment, episodes: list[EnvironmentEpisode], checkpoint: Path
) -> list[dict[str, object]]:
    async with HttpGym(fresh.urls, token=TOKEN) as gym:
        coordinator = gym.coordinator
        participants = await coordinator.discover()
        rid = f"restore-{time.time_ns()}"
        deadline = time.time() + 60
        await coordinator.restore(
            participants, rid, str(checkpoint), episodes, deadline_ts=deadline
        )
        await coordinator.resume(participants, rid, deadline_ts=deadline)
        return list(
            await asyncio.gather(*(gym.run(episode.next_attempt(), TASK) for episode in episodes))
        )


def test_a_hung_worker_is_named_by_the_prepare_deadline(
    deployment: WorkerDeployment, workers: int
) -> None:
    """A stopped worker does not hang prepare: the reply names it when the deadline passes."""
    control = deployment.via_worker(RESOURCES_SERVER, 0)
    victim = deployment.registrations(RESOURCES_SERVER)[workers - 1]
    cid = f"hung-{time.time_ns()}"
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        reply = control.post("prepare", checkpoint_id=cid, deadline_ts=time.time() + 2)
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    assert reply.status_code == 200, reply.text
    report = reply.json()["report"]
    assert report["ready"] is False
    assert f"worker-{workers - 1}:silent:pid-{victim.pid}" in report["blockers"]
    assert control.post("resume", checkpoint_id=cid).status_code == 200
    deployment.wait_for_workers(RESOURCES_SERVER)


def test_a_worker_killed_during_prepare_is_named_as_a_blocker(
    deployment: WorkerDeployment, workers: int
) -> None:
    """SIGKILL of a worker while prepare waits on it: the reply names it, long before the
    deadline; after resume uvicorn's replacement joins and the next snapshot is ready."""
    control = deployment.via_worker(RESOURCES_SERVER, 0)
    victim = deployment.registrations(RESOURCES_SERVER)[workers - 1]
    cid = f"killed-{time.time_ns()}"
    deadline = time.time() + 120
    os.kill(victim.pid, signal.SIGSTOP)  # it cannot answer: prepare waits on it
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(control.post, "prepare", checkpoint_id=cid, deadline_ts=deadline)
        time.sleep(0.5)
        assert not pending.done(), pending.result().text
        os.kill(victim.pid, signal.SIGKILL)
        reply = pending.result(timeout=60)
    assert time.time() < deadline - 30  # answered at the kill, not at the deadline
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["phase"] == "preparing" and body["report"]["ready"] is False
    assert f"worker-{workers - 1}:lost:pid-{victim.pid}" in body["report"]["blockers"]
    # While the checkpoint stays open, the slot stays a blocker: gone, or restarted
    # (uvicorn's replacement lost what the killed worker held).
    again = control.post("prepare", checkpoint_id=cid, deadline_ts=time.time() + 5).json()
    named = [b for b in again["report"]["blockers"] if b.startswith(f"worker-{workers - 1}:")]
    assert named and again["report"]["ready"] is False, again
    assert control.post("resume", checkpoint_id=cid).status_code == 200
    status = deployment.wait_for_workers(RESOURCES_SERVER)
    assert deployment.registrations(RESOURCES_SERVER)[workers - 1].pid != victim.pid
    assert status["phase"] == "idle"
    fresh_cid = f"after-{time.time_ns()}"
    ready = deployment.control(RESOURCES_SERVER).post("prepare", checkpoint_id=fresh_cid).json()
    assert ready["phase"] == "prepared" and ready["report"]["ready"] is True, ready
    assert deployment.control(RESOURCES_SERVER).post("resume", checkpoint_id=fresh_cid).is_success
