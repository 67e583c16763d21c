"""Tests for envckpt.http.workers.preflight: what one worker alone would refuse is refused
before any worker acts (workers in this process, over their real private sockets)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envckpt.episodes import EnvironmentEpisode
from envckpt.http.workers import preflight

from helpers.worker_groups import Workers, body

Ep = EnvironmentEpisode


async def call(workers: Workers, via: int, route: str, **fields: Any) -> tuple[int, dict[str, Any]]:
    return await workers[via].group.dispatch("POST", route, body(**fields))


async def commit_all(workers: Workers, checkpoint_id: str, target: str) -> None:
    status, reply = await call(
        workers, 0, "commit", checkpoint_id=checkpoint_id, checkpoint_dir=target, episode_ids=None
    )
    assert status == 200, reply


async def test_a_commit_into_a_file_is_refused_before_any_worker_commits(tmp_path: Path) -> None:
    """The write would fail: checkpoint_error, and every worker is still prepared."""
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    async with Workers(tmp_path, count=2) as workers:
        await workers.data(0, "call", Ep(workers.owned(1), 0), turn=0)
        await call(workers, 0, "prepare", checkpoint_id="c1")
        status, reply = await call(
            workers, 1, "commit", checkpoint_id="c1", checkpoint_dir=str(target), episode_ids=None
        )
        assert (status, reply["error"]["code"]) == (500, "checkpoint_error")
        assert [workers[s].tool.core.phase for s in (0, 1)] == ["prepared", "prepared"]


async def test_a_commit_into_a_published_directory_is_refused_before_any_commits(
    tmp_path: Path,
) -> None:
    """Another checkpoint's manifest is there: invalid_checkpoint_state, nobody committed."""
    async with Workers(tmp_path, count=2) as workers:
        target = str(tmp_path / "ckpt")
        await call(workers, 0, "prepare", checkpoint_id="c1")
        await call(
            workers, 0, "commit", checkpoint_id="c1", checkpoint_dir=target, episode_ids=None
        )
        await call(workers, 0, "resume", checkpoint_id="c1")
        await call(workers, 1, "prepare", checkpoint_id="c2")
        status, reply = await call(
            workers, 0, "commit", checkpoint_id="c2", checkpoint_dir=target, episode_ids=None
        )
        assert (status, reply["error"]["code"]) == (422, "invalid_checkpoint_state")
        assert [workers[s].tool.core.phase for s in (0, 1)] == ["prepared", "prepared"]


async def test_a_restore_over_one_workers_live_attempt_restores_nowhere(tmp_path: Path) -> None:
    """Worker 1 still holds the attempt the restore would install: stale_attempt, and worker
    0 stays idle (it did not restore its part alone)."""
    target = str(tmp_path / "ckpt")
    async with Workers(tmp_path, count=2) as workers:
        saved = Ep(workers.owned(1), 0)
        await workers.data(0, "call", saved, turn=0)
        await call(workers, 0, "prepare", checkpoint_id="c1")
        await call(
            workers, 0, "commit", checkpoint_id="c1", checkpoint_dir=target, episode_ids=None
        )
        await call(workers, 0, "resume", checkpoint_id="c1")
        await workers.data(0, "call", saved.next_attempt(), turn=1)  # the next attempt is live
        status, reply = await call(
            workers, 0, "restore", checkpoint_id="r1", checkpoint_dir=target,
            episode_ids=[saved.to_wire()],
        )  # fmt: skip
        assert (status, reply["error"]["code"]) == (409, "stale_attempt")
        assert [workers[s].tool.core.phase for s in (0, 1)] == ["idle", "idle"]


async def test_a_restored_worker_answers_the_check_so_a_replay_goes_through(
    tmp_path: Path,
) -> None:
    """The check applies from idle only: once restored, the same restore replays."""
    target = str(tmp_path / "ckpt")
    async with Workers(tmp_path, count=2) as old:
        saved = Ep(old.owned(0), 0)
        await old.data(0, "call", saved, turn=0)
        await call(old, 0, "prepare", checkpoint_id="c1")
        await call(old, 0, "commit", checkpoint_id="c1", checkpoint_dir=target, episode_ids=None)
    async with Workers(tmp_path, count=2) as fresh:
        fields = {"checkpoint_id": "r1", "checkpoint_dir": target, "episode_ids": [saved.to_wire()]}
        first = await call(fresh, 0, "restore", **fields)
        again = await call(fresh, 1, "restore", **fields)
        assert first[0] == 200 and again == first
        status, _ = preflight.restorable(fresh[0].tool.core, body(**fields))
        assert status == 200
