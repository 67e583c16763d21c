"""Workers of one multi-worker participant, in this process (fast tests of envckpt.http.workers).

Each worker is a tool (resources) server with its own core and app, mounted
for N workers over one real worker directory; ``start`` runs what the app's
lifespan would (claim a slot, serve the private Unix socket, adopt,
register). Data calls go through the app itself (httpx's ASGI transport),
so the affinity middleware forwards them over the real private sockets::

    async with Workers(tmp, count=2) as workers:
        await workers[0].group.dispatch("POST", "prepare", body)
        await workers.data(0, "call", episode, turn=0)        # sent to worker 0's app
        workers.owned(1, prefix="r")                          # a rollout worker 1 owns
"""

from __future__ import annotations

import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI

from envckpt.episodes import EnvironmentEpisode
from envckpt.http.apps import new_app
from envckpt.http.closing import AsyncCloseable
from envckpt.http.workers import WorkerGroup, mount_worker_participant, owner_slot
from envckpt.http.workers.slots import Registration, WorkerDirectory
from envckpt.sim.data_routes import tool_router
from envckpt.sim.kinds.resources import ToolServer

TOKEN = "in-process-workers-token-77"


@dataclass
class Worker:
    tool: ToolServer
    app: FastAPI
    group: WorkerGroup


def body(checkpoint_id: str, seconds: float = 30.0, **fields: Any) -> dict[str, Any]:
    return {"checkpoint_id": checkpoint_id, "deadline_ts": time.time() + seconds, **fields}


class Workers(AsyncCloseable):
    """``count`` workers of one tool server, sharing a worker directory under /tmp."""

    def __init__(
        self, root: Path, *, count: int, latency: float = 0.0, mode: str = "export_restore"
    ) -> None:
        self.root = root
        self.count = count
        self.latency = latency
        self.mode = mode
        self.path = Path(tempfile.mkdtemp(prefix="eg-", dir="/tmp"))
        self.workers: list[Worker] = []

    def __getitem__(self, slot: int) -> Worker:
        return next(w for w in self.workers if w.group.slot == slot)

    async def __aenter__(self) -> Workers:
        for _ in range(self.count):
            await self.add()
        return self

    async def aclose(self) -> None:
        """Stop every worker's group and remove the group directory."""
        for worker in self.workers:
            await worker.group.stop()
        shutil.rmtree(self.path, ignore_errors=True)

    def build(self) -> Worker:
        """A worker, mounted but not started."""
        tool = ToolServer(seed=7, latency=self.latency, mode=self.mode)
        app = new_app()
        app.include_router(tool_router(tool))
        group = mount_worker_participant(
            app,
            tool.core,
            token=TOKEN,
            checkpoint_root=self.root,
            directory=self.path,
            expected=self.count,
            lease_check_seconds=None,
        )
        assert group is not None
        return Worker(tool, app, group)

    async def add(self) -> Worker:
        """Start one more worker (it takes the lowest free slot)."""
        worker = self.build()
        await worker.group.start(worker.app)
        self.workers.append(worker)
        return worker

    async def kill(self, slot: int) -> tuple[Worker, Registration]:
        """Stop worker ``slot`` as a death would: its registration stays, its socket is gone."""
        worker = self[slot]
        registration = worker.group.registration
        await worker.group.stop()
        assert registration is not None
        WorkerDirectory(self.path).register(registration)  # a dead worker leaves it behind
        self.workers.remove(worker)
        return worker, registration

    def owned(self, slot: int, prefix: str = "r") -> str:
        """A rollout id worker ``slot`` owns."""
        index = 0
        while owner_slot(f"{prefix}{index}", self.count) != slot:
            index += 1
        return f"{prefix}{index}"

    async def data(
        self, via: int, route: str, episode: EnvironmentEpisode, **fields: Any
    ) -> httpx.Response:
        """A data call sent to worker ``via``'s app (it may forward it)."""
        payload = {"episode": episode.to_wire(), "action": "act", **fields}
        if route == "finish":
            payload = {"episode": episode.to_wire()}
        transport = httpx.ASGITransport(app=self[via].app)
        async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
            return await client.post(f"/{route}", json=payload, timeout=30)
