"""One Gym deployment whose participant servers each run N uvicorn workers.

``python -m envckpt.sim.server --workers N`` runs this instead of
``GymServers``: the policy model, the tool server and the agent each as one
uvicorn supervisor child with N workers on one port
(``worker_apps.supervisor_command``), the judge in this process. Each server gets its own
worker directory (``envckpt.http.workers.slots``) under one owner-only
directory (``--worker-dir``, or a new one under /tmp, then removed at the end)::

    async with WorkerServers(config, serving, workers=4, token=token) as servers:
        servers.urls      # {"policy_model": "http://127.0.0.1:41234", ...}

It is ready once every participant's ``status`` counts N workers. Leaving
stops the supervisors with SIGTERM (uvicorn stops its workers), SIGKILL after
15 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from envckpt.coordination.transport import TransportFailure
from envckpt.http.client import HttpTransport
from envckpt.http.closing import AsyncCloseable
from envckpt.http.serve import serve
from envckpt.http.tokens import (
    GYM_ROWS_TOKEN_ENV,
    GYM_ROWS_TOKEN_FILE_ENV,
    GYM_TOKEN_ENV,
    GYM_TOKEN_FILE_ENV,
)
from envckpt.http.workers import WorkerDirectory
from envckpt.protocol import STATUS_EXPECTED_WORKERS, STATUS_WORKERS
from envckpt.sim.gym import AGENT_SERVER, JUDGE_SERVER, MODEL_SERVER, RESOURCES_SERVER, GymConfig
from envckpt.sim.gym_servers import Serving, judge_app
from envckpt.sim.worker_apps import WorkerSettings, supervisor_command

# Each of 3 x N workers imports the whole package: on a loaded machine that is slow.
READY_SECONDS = 900.0
STOP_SECONDS = 15.0
# One readiness probe's reply (a busy worker may take a while to answer).
STATUS_SECONDS = 10.0
_PARTICIPANTS = (MODEL_SERVER, RESOURCES_SERVER, AGENT_SERVER)


def free_port(host: str) -> int:
    """A port the kernel just handed out (uvicorn binds it again with SO_REUSEADDR)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


class WorkerServers(AsyncCloseable):
    """The deployment's participant servers as uvicorn multi-worker processes."""

    def __init__(
        self,
        config: GymConfig,
        serving: Serving,
        *,
        workers: int,
        rows_url: str | None = None,
        rows_token: str | None = None,
        log_json: Path | None = None,
        worker_dir: Path | None = None,
    ) -> None:
        if workers < 2:
            raise ValueError("WorkerServers runs at least 2 workers per server")
        self.config = config
        self.serving = serving
        self.workers = workers
        self.rows_url = rows_url
        self._rows_token = rows_token
        self.log_json = log_json
        # Where the servers' worker directories go (a new /tmp directory if None).
        self.worker_dir = worker_dir
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._urls: dict[str, str] = {}
        self._root: WorkerDirectory | None = None
        self._stack = contextlib.AsyncExitStack()

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"WorkerServers(workers={self.workers}, urls={self._urls!r})"

    @property
    def urls(self) -> dict[str, str]:
        return dict(self._urls)

    async def __aenter__(self) -> WorkerServers:
        try:
            await self._start()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _start(self) -> None:
        host = self.serving.host
        url_host = f"[{host}]" if ":" in host else host
        if self.worker_dir is None:
            self._root = WorkerDirectory.create(prefix="envckpt-sim-")
        else:
            self.worker_dir.mkdir(mode=0o700, exist_ok=True)
            self._root = WorkerDirectory(self.worker_dir)
        ports = {server: free_port(host) for server in _PARTICIPANTS}
        urls = {server: f"http://{url_host}:{port}" for server, port in ports.items()}
        settings = self._settings(urls)
        for server in _PARTICIPANTS:
            self._children[server] = self._spawn(server, ports[server], settings)
        if self.config.judge:
            judge = judge_app(self.serving)
            url = await self._stack.enter_async_context(
                serve(judge, host=host, limits=self.serving.limits)
            )
            urls[JUDGE_SERVER] = url
        await self._wait_ready(urls)
        self._urls = urls

    def _settings(self, urls: dict[str, str]) -> WorkerSettings:
        serving = self.serving
        config = {
            key: getattr(self.config, key)
            for key in self.config.__dataclass_fields__
            if key != "token"
        }
        return WorkerSettings(
            config=config,
            checkpoint_root=str(serving.checkpoint_root),
            max_lease_seconds=serving.max_lease_seconds,
            lease_check_seconds=serving.lease_check_seconds,
            data_max_body_bytes=serving.data_max_body_bytes,
            request_read_seconds=serving.limits.request_read_seconds,
            expose_docs=serving.expose_docs,
            model_url=urls[MODEL_SERVER],
            tool_url=urls[RESOURCES_SERVER],
            rows_url=self.rows_url,
            log_json=None if self.log_json is None else str(self.log_json),
        )

    def _spawn(self, server: str, port: int, settings: WorkerSettings) -> subprocess.Popen[bytes]:
        assert self._root is not None
        directory = WorkerDirectory(self._root.path / server)
        directory.path.mkdir(mode=0o700)
        env = {**os.environ, **settings.to_env(), **directory.environment(workers=self.workers)}
        # The secrets the workers read, in their variables (never on a command line).
        env[GYM_TOKEN_ENV] = self.config.token
        env.pop(GYM_TOKEN_FILE_ENV, None)
        env.pop(GYM_ROWS_TOKEN_FILE_ENV, None)
        if self._rows_token is not None:
            env[GYM_ROWS_TOKEN_ENV] = self._rows_token
        command = supervisor_command(
            server,
            host=self.serving.host,
            port=port,
            workers=self.workers,
            keep_alive=self.serving.limits.keep_alive_seconds,
        )
        return subprocess.Popen(command, env=env)

    async def _wait_ready(self, urls: dict[str, str]) -> None:
        """Until every participant's status counts all its workers (a child that died fails)."""
        give_up = time.monotonic() + READY_SECONDS
        pending = set(_PARTICIPANTS)
        async with HttpTransport(urls, token=self.config.token) as transport:
            while pending:
                for server in sorted(pending):
                    child = self._children[server]
                    if child.poll() is not None:
                        raise RuntimeError(f"{server} exited with {child.returncode} at startup")
                    # Not listening yet, or not answering yet: asked again below.
                    with contextlib.suppress(TransportFailure):
                        reply = await transport.request(
                            server, "GET", "status", None, timeout=STATUS_SECONDS
                        )
                        body = reply.body
                        if (
                            reply.status == 200
                            and isinstance(body, dict)
                            and body.get(STATUS_WORKERS) == body.get(STATUS_EXPECTED_WORKERS)
                        ):
                            pending.discard(server)
                if time.monotonic() > give_up:
                    raise TimeoutError(f"{sorted(pending)} not ready in {READY_SECONDS:g} s")
                await asyncio.sleep(0.1)

    async def aclose(self) -> None:
        """Stop every server process (SIGTERM, then SIGKILL past its grace) and the judge if any."""
        children, self._children = self._children, {}
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for child in children.values():
            try:
                await asyncio.to_thread(child.wait, STOP_SECONDS)
            except subprocess.TimeoutExpired:
                child.kill()
                await asyncio.to_thread(child.wait)
        await self._stack.aclose()
        if self._root is not None and self.worker_dir is None:
            self._root.remove()
        self._root = None
        self._urls = {}
