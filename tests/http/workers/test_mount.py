"""Tests for envckpt.http.workers.mount: the participant mounted for N workers, or for one."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from envckpt.http.apps import new_app
from envckpt.http.serve import serve
from envckpt.http.workers import WorkerDirectory, mount_worker_participant
from envckpt.http.workers.slots import WORKER_DIR_ENV, WORKERS_ENV
from envckpt.sim.kinds.resources import ToolServer

TOKEN = "mount-token-0123456789"


async def status(url: str) -> dict[str, object]:
    async with httpx.AsyncClient(trust_env=False) as client:
        reply = await client.get(
            f"{url}/ng-control/v1/checkpoint/status", headers={"authorization": f"Bearer {TOKEN}"}
        )
    body: dict[str, object] = reply.json()
    return body


async def test_one_worker_is_mounted_as_one_process(tmp_path: Path, short_dir: Path) -> None:
    """With a single worker there is no group: status is the plain participant's."""
    app = new_app()
    tool = ToolServer()
    group = mount_worker_participant(
        app, tool.core, token=TOKEN, checkpoint_root=tmp_path, directory=short_dir, expected=1
    )
    assert group is None
    async with serve(app) as url:
        assert "workers" not in await status(url)


async def test_the_lifespan_registers_the_worker_and_stopping_withdraws_it(
    tmp_path: Path, short_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a real server (directory and count from the launcher's environment) the worker
    claims slot 0 and registers; it is gone from the directory once the server stopped."""
    monkeypatch.setenv(WORKER_DIR_ENV, str(short_dir))
    monkeypatch.setenv(WORKERS_ENV, "2")
    app = new_app()
    tool = ToolServer()
    group = mount_worker_participant(app, tool.core, token=TOKEN, checkpoint_root=tmp_path)
    assert group is not None and group.expected == 2
    async with serve(app) as url:
        assert list(WorkerDirectory(short_dir).registrations(expected=2)) == [0]
        reply = await status(url)
        assert (reply["workers"], reply["expected_workers"]) == (1, 2)
        assert "worker-1:unregistered" in reply["report"]["blockers"]  # type: ignore[index]
    assert WorkerDirectory(short_dir).registrations(expected=2) == {}
    assert group.slot is None


def test_a_worker_without_its_launchers_environment_refuses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No directory or count given, none in the environment: refused before mounting."""
    monkeypatch.delenv(WORKER_DIR_ENV, raising=False)
    monkeypatch.delenv(WORKERS_ENV, raising=False)
    with pytest.raises(ValueError, match=WORKER_DIR_ENV):
        mount_worker_participant(
            new_app(), ToolServer().core, token=TOKEN, checkpoint_root=tmp_path
        )
