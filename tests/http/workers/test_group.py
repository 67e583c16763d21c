"""Tests for envckpt.http.workers.group: each control request run by every worker, answered
as one participant (workers in this process, over real private sockets; the real uvicorn
multi-worker processes are tests/sim/test_multiworker.py)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.http.serve import serve_unix
from envckpt.http.workers.slots import Registration, WorkerDirectory
from envckpt.participant import store

from helpers.worker_groups import Workers, body

Ep = EnvironmentEpisode


async def call(workers: Workers, via: int, route: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    method = "GET" if route == "status" else "POST"
    sent = None if route == "status" else body(**fields)
    return await workers[via].group.dispatch(method, route, sent)


async def refused_commit(workers: Workers, target: Path) -> str:
    """Commit ``c1`` to ``target`` through worker 1, which the group refuses: the detail."""
    status, reply = await call(
        workers, 1, "commit", checkpoint_id="c1", checkpoint_dir=str(target), episode_ids=None
    )
    assert status == 409, reply
    return str(reply["error"]["detail"])


async def hold(workers: Workers, rollout_id: str) -> Ep:
    """One tool call of ``rollout_id`` (sent to worker 0): its owner then holds a session."""
    episode = Ep(rollout_id, 0)
    reply = await workers.data(0, "call", episode, turn=0)
    assert reply.status_code == 200, reply.text
    return episode


async def test_status_counts_every_worker(tmp_path: Path) -> None:
    """Status answers for the server: its workers, the expected count, one phase."""
    async with Workers(tmp_path, count=3) as workers:
        status, reply = await call(workers, 2, "status")
    assert status == 200
    assert (reply["workers"], reply["expected_workers"], reply["phase"]) == (3, 3, "idle")
    assert reply["report"]["ready"] is True


async def test_prepare_closes_every_worker_and_waits_for_each(tmp_path: Path) -> None:
    """A turn in flight on worker 1 holds the prepare answered by worker 0; once prepared,
    every worker refuses new work."""
    async with Workers(tmp_path, count=2, latency=0.3) as workers:
        busy = Ep(workers.owned(1), 0)
        turn = asyncio.create_task(workers.data(0, "call", busy, turn=0))
        while busy not in workers[1].tool.core.fence.in_flight():
            await asyncio.sleep(0.005)
        status, reply = await call(workers, 0, "prepare", checkpoint_id="c1")
        assert turn.done() and (await turn).status_code == 200
        assert (status, reply["phase"], reply["report"]["ready"]) == (200, "prepared", True)
        for slot in (0, 1):
            assert workers[slot].tool.core.phase == "prepared"
            refused = await workers.data(slot, "call", Ep(workers.owned(slot, "new"), 0), turn=0)
            assert refused.json()["error"]["code"] == "admission_closed"


async def test_commit_writes_every_workers_episodes_into_one_records_file(tmp_path: Path) -> None:
    """Each worker's sessions land in the participant's one records file; a retry answered
    by another worker returns the same manifest."""
    async with Workers(tmp_path, count=2) as workers:
        held = [await hold(workers, workers.owned(slot, f"s{slot}-")) for slot in (0, 1)]
        await call(workers, 1, "prepare", checkpoint_id="c1")
        target = str(tmp_path / "ckpt")
        fields = {"checkpoint_id": "c1", "checkpoint_dir": target, "episode_ids": None}
        status, reply = await call(workers, 1, "commit", **fields)
        assert status == 200, reply
        assert reply["episode_ids"] == sorted(e.capture_key for e in held)
        manifest = store.read_manifest(target, kind="resources", instance="tool_resources")
        assert reply["manifest"] == manifest.to_json() and manifest.record_count == 2
        files = sorted(
            p.name for p in store.participant_dir(target, "resources", "tool_resources").iterdir()
        )
        assert files == ["manifest.json", manifest.records_file]
        again = await call(workers, 0, "commit", **fields)
        assert again == (200, reply)
        assert all(workers[s].tool.core.phase == "committed" for s in (0, 1))


async def test_restore_puts_each_rollout_on_the_worker_that_serves_it(tmp_path: Path) -> None:
    """A fresh server restores from the one file; each worker installs only the rollouts it
    owns, and their next attempts continue there."""
    target = str(tmp_path / "ckpt")
    async with Workers(tmp_path, count=2) as old:
        held = [await hold(old, old.owned(slot, f"k{slot}-")) for slot in (0, 1)]
        await call(old, 0, "prepare", checkpoint_id="c1")
        await call(old, 0, "commit", checkpoint_id="c1", checkpoint_dir=target, episode_ids=None)
    async with Workers(tmp_path, count=2) as fresh:
        scope = [e.to_wire() for e in held]
        status, reply = await call(
            fresh, 1, "restore", checkpoint_id="r1", checkpoint_dir=target, episode_ids=scope
        )
        assert status == 200, reply
        assert reply["restored"] == sorted(e.next_attempt().capture_key for e in held)
        for slot, episode in enumerate(held):
            assert set(fresh[slot].tool.states) == {episode.next_attempt()}
        assert (await call(fresh, 0, "resume", checkpoint_id="r1"))[0] == 200
        go_on = await fresh.data(1, "call", held[0].next_attempt(), turn=1)
        assert go_on.status_code == 200 and go_on.json()["applied"] is True


async def test_a_gone_worker_blocks_prepare_and_commit_but_not_cleanup(tmp_path: Path) -> None:
    """A dead worker (its registration left behind) is a blocker of prepare and a refusal of
    commit, by name; resume, retire and forget go on without it."""
    async with Workers(tmp_path, count=3) as workers:
        dead, registration = await workers.kill(2)
        pid = os.getpid()
        _, reply = await call(workers, 0, "prepare", checkpoint_id="c1")
        assert reply["phase"] == "preparing" and reply["report"]["ready"] is False
        assert f"worker-2:lost:pid-{pid}" in reply["report"]["blockers"]
        assert "worker-2:lost" in await refused_commit(workers, tmp_path / "x")
        assert not (tmp_path / "x").exists()
        assert (await call(workers, 1, "resume", checkpoint_id="c1"))[0] == 200
        retire = {"checkpoint_id": "c2", "episode_ids": [{"rollout_id": "z", "attempt": 0}]}
        assert (await call(workers, 0, "retire", **retire))[0] == 200
        assert dead.tool.core.phase == "idle"
        WorkerDirectory(workers.path).unregister(registration)
        _, reply = await call(workers, 0, "status")
        assert "worker-2:unregistered" in reply["report"]["blockers"] and reply["workers"] == 2


async def test_a_worker_that_joins_an_open_checkpoint_closes_and_blocks_it(
    tmp_path: Path,
) -> None:
    """A replacement takes the dead worker's slot, adopts finished ids and retire marks,
    closes at once, and blocks the open checkpoint (it lost what it held) until it ends."""
    async with Workers(tmp_path, count=2) as workers:
        await call(workers, 0, "resume", checkpoint_id="old")  # a finished id
        retire = {"checkpoint_id": "c0", "episode_ids": [{"rollout_id": "gone", "attempt": 3}]}
        await call(workers, 0, "retire", **retire)
        await call(workers, 0, "prepare", checkpoint_id="c1")
        await workers.kill(1)
        joined = await workers.add()
        assert joined.group.slot == 1 and joined.group.joined_open == {"c1"}
        assert joined.tool.core.phase == "prepared" and "old" in joined.tool.core.finished
        assert joined.tool.core.fence.mark("gone") == 3
        status, reply = await call(workers, 0, "prepare", checkpoint_id="c1")
        assert f"worker-1:restarted:pid-{os.getpid()}" in reply["report"]["blockers"]
        assert "restarted" in await refused_commit(workers, tmp_path / "y")
        assert (await call(workers, 1, "resume", checkpoint_id="c1"))[0] == 200
        status, reply = await call(workers, 1, "prepare", checkpoint_id="c2")
        assert reply["phase"] == "prepared", reply
        status, reply = await call(workers, 0, "prepare", checkpoint_id="old")
        assert status == 409 and reply["error"]["code"] == "stale_checkpoint"


async def test_a_commit_one_worker_would_refuse_is_refused_before_any_commits(
    tmp_path: Path,
) -> None:
    """A scope naming worker 1's restart: restart_in_scope, and worker 0 (which holds none)
    did not commit either; nothing was written."""
    async with Workers(tmp_path, count=2, mode="restart_only") as workers:
        restart = await hold(workers, workers.owned(1))
        await call(workers, 0, "prepare", checkpoint_id="c1")
        status, reply = await call(
            workers, 0, "commit", checkpoint_id="c1", checkpoint_dir=str(tmp_path / "z"),
            episode_ids=[restart.to_wire()],
        )  # fmt: skip
        assert (status, reply["error"]["code"]) == (409, "restart_in_scope")
        assert [workers[s].tool.core.phase for s in (0, 1)] == ["prepared", "prepared"]
        assert not (tmp_path / "z").exists()


async def test_a_commit_while_one_worker_still_prepares_commits_nowhere(tmp_path: Path) -> None:
    """Worker 0 prepared, worker 1 still waiting on a turn: the commit is refused and worker
    0 stays prepared (it did not commit its share alone)."""
    async with Workers(tmp_path, count=2, latency=1.0) as workers:
        busy = Ep(workers.owned(1), 0)
        turn = asyncio.create_task(workers.data(0, "call", busy, turn=0))
        while busy not in workers[1].tool.core.fence.in_flight():
            await asyncio.sleep(0.005)
        status, reply = await call(workers, 0, "prepare", checkpoint_id="c1", seconds=0.1)
        assert reply["phase"] == "preparing" and busy.capture_key in reply["report"]["blockers"]
        assert [workers[s].tool.core.phase for s in (0, 1)] == ["prepared", "preparing"]
        status, reply = await call(
            workers, 0, "commit", checkpoint_id="c1", checkpoint_dir=str(tmp_path / "w"),
            episode_ids=None,
        )  # fmt: skip
        assert (status, reply["error"]["code"]) == (409, "invalid_phase")
        assert [workers[s].tool.core.phase for s in (0, 1)] == ["prepared", "preparing"]
        status, reply = await call(
            workers, 1, "commit", checkpoint_id="other", checkpoint_dir=str(tmp_path / "w"),
            episode_ids=None,
        )  # fmt: skip
        assert (status, reply["error"]["code"]) == (409, "checkpoint_conflict")  # as one process
        await turn


async def test_a_bad_request_is_refused_before_any_worker_sees_it(tmp_path: Path) -> None:
    """Validation happens once, at the worker that received it; no core changes."""
    async with Workers(tmp_path, count=2) as workers:
        status, reply = await workers[0].group.dispatch(
            "POST", "prepare", {**body("c1"), "surprise": True}
        )
        assert (status, reply["error"]["code"]) == (422, "invalid_request")
        assert all(workers[s].tool.core.checkpoint_id is None for s in (0, 1))


@contextlib.asynccontextmanager
async def silent_worker(directory: Path, slot: int) -> AsyncIterator[Registration]:
    """A registered 'worker' whose socket accepts requests and never answers."""

    async def hang(scope: Any, receive: Any, send: Any) -> None:
        await asyncio.sleep(3600)

    socket = str(directory / f"silent{slot}.sock")
    async with serve_unix(hang, socket):
        registration = Registration(slot, 999_999, "s" * 32, socket)
        WorkerDirectory(directory).register(registration)
        yield registration


async def test_a_silent_worker_is_named_by_the_deadline_not_waited_for(tmp_path: Path) -> None:
    """A worker that never answers costs the prepare its deadline (plus a grace), then is
    named; the other workers' answers are not lost."""
    workers = Workers(tmp_path, count=2)
    async with workers:
        await workers.kill(1)
        async with silent_worker(workers.path, 1):
            started = time.monotonic()
            status, reply = await call(workers, 0, "prepare", checkpoint_id="c1", seconds=0.5)
            assert time.monotonic() - started < 10
        assert status == 200
        assert "worker-1:silent:pid-999999" in reply["report"]["blockers"]
        assert workers[0].tool.core.phase == "prepared"


def test_a_deadline_met_on_arrival_is_met_by_every_worker() -> None:
    """A deadline that passed in transit moves just ahead of the worker's clock; one that had
    passed on arrival, or that is well ahead, is left as sent."""
    from envckpt.http.workers.group import MIN_AHEAD_SECONDS, deadline_met_at

    sent = {"checkpoint_id": "c", "deadline_ts": 100.05}
    moved = deadline_met_at(sent, 100.0, now=100.3)
    assert moved == {"checkpoint_id": "c", "deadline_ts": 100.3 + MIN_AHEAD_SECONDS}
    assert deadline_met_at(sent, 100.1, now=100.3) == sent  # already past on arrival
    far = {"deadline_ts": 200.0}
    assert deadline_met_at(far, 100.0, now=100.3) is far
    assert deadline_met_at(None, 100.0, now=100.3) is None


async def test_a_short_deadline_reaches_every_worker_as_met(tmp_path: Path) -> None:
    """A prepare whose deadline passes while it travels to the siblings still closes every
    worker (not deadline_exceeded at one of them), and a past one is refused by all."""
    async with Workers(tmp_path, count=3) as workers:
        status, reply = await call(workers, 0, "prepare", checkpoint_id="c1", seconds=0.001)
        assert status == 200, reply
        assert all(workers[s].tool.core.checkpoint_id == "c1" for s in range(3))
        await call(workers, 0, "resume", checkpoint_id="c1")
        status, reply = await call(workers, 1, "prepare", checkpoint_id="c2", seconds=-5)
        assert (status, reply["error"]["code"]) == (409, "deadline_exceeded")
        assert all(workers[s].tool.core.checkpoint_id is None for s in range(3))


def test_a_group_needs_a_worker() -> None:
    """A server of zero workers is refused."""
    from envckpt.http.workers import WorkerGroup
    from envckpt.sim.kinds.resources import ToolServer

    with pytest.raises(ValueError):
        WorkerGroup(
            ToolServer().core, token="t" * 20, directory=WorkerDirectory("/tmp"), expected=0
        )
