"""A simulated Gym deployment whose participant servers run N uvicorn workers, as a process.

    with WorkerDeployment.start(tmp, workers=2) as deployment:
        deployment.urls["tool_resources"]             # one port, N workers behind it
        deployment.registrations("tool_resources")    # slot -> Registration (pid, socket)
        deployment.control("tool_resources").post("prepare", checkpoint_id="c", ...)
        deployment.via_worker("tool_resources", 1)    # a client answered by worker 1
        ids = rollouts_per_slot(workers=2, each=2)    # rollout ids covering every slot

``python -m envckpt.sim.server --workers N`` with the worker directory under
a short /tmp path (socket paths are limited to about 107 bytes), checkpoints
confined to ``tmp``, stopped with SIGTERM.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from envckpt.http.workers import Registration, WorkerDirectory, owner_slot
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX

from helpers.server_process import stop, wait_ready

TOKEN = "worker-deployment-token-5f1c"
READY_SECONDS = 240.0


def rollouts_per_slot(*, workers: int, each: int, prefix: str = "r") -> list[str]:
    """Rollout ids, ``each`` owned by every slot, in slot order."""
    found: dict[int, list[str]] = {slot: [] for slot in range(workers)}
    index = 0
    while any(len(ids) < each for ids in found.values()):
        rollout_id = f"{prefix}{index}"
        slot = owner_slot(rollout_id, workers)
        if len(found[slot]) < each:
            found[slot].append(rollout_id)
        index += 1
    return [rollout_id for slot in range(workers) for rollout_id in found[slot]]


@dataclass
class Control:
    """Synchronous control calls to one server (over TCP, or one worker's private socket)."""

    http: httpx.Client
    base_url: str

    def call(self, route: str, body: Any = None) -> httpx.Response:
        method = "GET" if route == "status" else "POST"
        return self.http.request(
            method,
            f"{self.base_url}{CHECKPOINT_ROUTE_PREFIX}/{route}",
            json=body,
            headers={"Authorization": f"Bearer {TOKEN}"},
        )

    def post(self, route: str, **fields: Any) -> httpx.Response:
        fields.setdefault("deadline_ts", time.time() + 30)
        return self.call(route, fields)

    def status(self) -> dict[str, Any]:
        reply = self.call("status")
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body


class WorkerDeployment:
    """One running ``envckpt.sim.server --workers N`` process and clients of it."""

    def __init__(
        self, process: subprocess.Popen[bytes], urls: dict[str, str], worker_dir: Path, workers: int
    ) -> None:
        self.process = process
        self.urls = urls
        self.worker_dir = worker_dir
        self.workers = workers
        self.http = httpx.Client(timeout=120.0, trust_env=False)
        self._private: list[httpx.Client] = []

    @classmethod
    @contextlib.contextmanager
    def start(
        cls, tmp: Path, *, workers: int, tool_latency: float = 0.0, model_latency: float = 0.0
    ) -> Iterator[WorkerDeployment]:
        worker_dir = Path(tempfile.mkdtemp(prefix="ew-", dir="/tmp"))
        ready = tmp / f"ready-{worker_dir.name}.json"
        log = (tmp / f"server-{worker_dir.name}.log").open("wb")
        command = [
            sys.executable, "-m", "envckpt.sim.server", "--seed", "7", "--no-judge",
            "--workers", str(workers), "--worker-dir", str(worker_dir / "servers"),
            "--checkpoint-root", str(tmp), "--ready-file", str(ready),
            "--tool-latency", str(tool_latency), "--model-latency", str(model_latency),
        ]  # fmt: skip
        env = {**os.environ, "ENVCKPT_GYM_TOKEN": TOKEN}
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        deployment = None
        try:
            urls = wait_ready(ready, process, seconds=READY_SECONDS, log=Path(log.name))
            deployment = cls(process, urls, worker_dir / "servers", workers)
            yield deployment
        finally:
            if deployment is not None:
                deployment.close()
            stop(process, seconds=30)
            log.close()
            shutil.rmtree(worker_dir, ignore_errors=True)

    def close(self) -> None:
        self.http.close()
        for client in self._private:
            client.close()

    def control(self, server: str) -> Control:
        return Control(self.http, self.urls[server])

    def registrations(self, server: str) -> dict[int, Registration]:
        return WorkerDirectory(self.worker_dir / server).registrations(expected=self.workers)

    def via_worker(self, server: str, slot: int) -> Control:
        """Control calls answered by worker ``slot`` (sent to its private socket)."""
        socket = self.registrations(server)[slot].socket
        client = httpx.Client(
            transport=httpx.HTTPTransport(uds=socket), timeout=120.0, trust_env=False
        )
        self._private.append(client)
        return Control(client, "http://worker")

    def wait_for_workers(self, server: str, *, seconds: float = 120.0) -> dict[str, Any]:
        """Until every worker of ``server`` answers its status again (after a kill)."""
        give_up = time.monotonic() + seconds
        while True:
            with contextlib.suppress(httpx.HTTPError, AssertionError):
                status = self.control(server).status()
                if status["workers"] == status["expected_workers"] and status["report"]["ready"]:
                    return status
            if time.monotonic() > give_up:
                raise AssertionError(f"{server}: workers did not all come back")
            time.sleep(0.1)
