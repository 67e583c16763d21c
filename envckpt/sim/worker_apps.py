"""The simulated Gym's participant servers under uvicorn's own multi-worker mode.

``python -m envckpt.sim.server --workers N`` (``sim.multiworker``) starts one
supervisor per participant server (``supervisor_command``): each is
``uvicorn.run(<factory>, factory=True, workers=N)``, so uvicorn binds the
port once, spawns N worker processes and restarts any that dies. Each worker
builds its app with the factory below: the kind's state for the rollouts its
slot owns, the data routes, and the participant mounted for N workers
(``envckpt.http.workers``)::

    env = {SETTINGS_ENV: settings.to_env()[SETTINGS_ENV], ENVCKPT_WORKER_DIR: ...,
           ENVCKPT_WORKERS: "4", ENVCKPT_GYM_TOKEN: ...}
    subprocess.Popen(supervisor_command("policy_model", host=h, port=p, workers=4,
                                        keep_alive=5), env=env)

Settings travel in the environment as JSON (``WorkerSettings``); the tokens
in their usual variables, never on a command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from envckpt.clock import SystemClock
from envckpt.http.apps import new_app
from envckpt.http.closing import AsyncCloseable
from envckpt.http.read_guard import REQUEST_READ_SECONDS, GuardedH11Protocol
from envckpt.http.routes import DEFAULT_LEASE_CHECK_SECONDS
from envckpt.http.serve import GRACEFUL_SHUTDOWN_SECONDS
from envckpt.http.tokens import (
    GYM_ROWS_TOKEN_ENV,
    GYM_ROWS_TOKEN_FILE_ENV,
    GYM_TOKEN_ENV,
    GYM_TOKEN_FILE_ENV,
    secret,
)
from envckpt.http.workers import mount_worker_participant
from envckpt.participant.confinement import DEFAULT_MAX_LEASE_SECONDS, RequestBounds
from envckpt.participant.core import ParticipantCore
from envckpt.sim.data_clients import HttpModelClient, HttpStagingSink, HttpToolClient
from envckpt.sim.data_routes import agent_router, model_router, tool_router
from envckpt.sim.gym import (
    AGENT_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    GymConfig,
    build_model,
    build_tool,
)
from envckpt.sim.kinds.agent import AgentServer

SETTINGS_ENV = "ENVCKPT_SIM_WORKER_SETTINGS"
# uvicorn pings each worker (a thread of its own answers) and kills one that
# does not answer within this: a hung worker is replaced after it, and a dead
# one may wait that long if it died while a ping was pending.
WORKER_HEALTHCHECK_SECONDS = 10
FACTORIES = {
    MODEL_SERVER: "policy_model_app",
    RESOURCES_SERVER: "tool_resources_app",
    AGENT_SERVER: "simple_agent_app",
}


@dataclass(frozen=True, slots=True)
class WorkerSettings:
    """Everything a worker needs besides its tokens (JSON in ``SETTINGS_ENV``)."""

    config: dict[str, Any]
    checkpoint_root: str
    max_lease_seconds: float = DEFAULT_MAX_LEASE_SECONDS
    lease_check_seconds: float = DEFAULT_LEASE_CHECK_SECONDS
    data_max_body_bytes: int = 16 * 1024 * 1024
    request_read_seconds: float = REQUEST_READ_SECONDS
    expose_docs: bool = False
    model_url: str = ""
    tool_url: str = ""
    rows_url: str | None = None
    log_json: str | None = None

    def to_env(self) -> dict[str, str]:
        return {SETTINGS_ENV: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def from_env(cls) -> WorkerSettings:
        return cls(**json.loads(os.environ[SETTINGS_ENV]))

    def gym_config(self) -> GymConfig:
        return GymConfig(**{**self.config, "token": secret(GYM_TOKEN_ENV, GYM_TOKEN_FILE_ENV)})


def _settings_read_seconds() -> float:
    with contextlib.suppress(KeyError, ValueError, TypeError):
        return float(json.loads(os.environ[SETTINGS_ENV])["request_read_seconds"])
    return REQUEST_READ_SECONDS


class WorkerH11Protocol(GuardedH11Protocol):
    """The request-read guard at the settings' deadline (importable: uvicorn spawns workers)."""

    read_seconds = _settings_read_seconds()


def _participant_app(settings: WorkerSettings, config: GymConfig, core: ParticipantCore) -> FastAPI:
    if settings.log_json:
        from envckpt.sim.json_log import configure_json_log

        configure_json_log(Path(settings.log_json))
    core.set_gym_instance(config.instance_id)
    core.bounds = RequestBounds.under(
        settings.checkpoint_root, max_lease_seconds=settings.max_lease_seconds
    )
    return new_app(expose_docs=settings.expose_docs)


def _mount(
    app: FastAPI, settings: WorkerSettings, config: GymConfig, core: ParticipantCore
) -> None:
    mount_worker_participant(
        app,
        core,
        token=config.token,
        lease_check_seconds=settings.lease_check_seconds,
        data_max_body_bytes=settings.data_max_body_bytes,
    )


def _closing(app: FastAPI, *closeables: AsyncCloseable) -> None:
    """Close ``closeables`` when the worker stops."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            for closeable in closeables:
                await closeable.aclose()

    app.router.lifespan_context = lifespan


def policy_model_app() -> FastAPI:
    """One worker of the policy model server."""
    settings = WorkerSettings.from_env()
    config = settings.gym_config()
    sink = None
    if settings.rows_url:
        sink = HttpStagingSink(
            settings.rows_url, secret(GYM_ROWS_TOKEN_ENV, GYM_ROWS_TOKEN_FILE_ENV)
        )
    model = build_model(config, SystemClock(), sink)
    app = _participant_app(settings, config, model.core)
    app.include_router(model_router(model, max_body_bytes=settings.data_max_body_bytes))
    if sink is not None:
        _closing(app, sink)
    _mount(app, settings, config, model.core)
    return app


def tool_resources_app() -> FastAPI:
    """One worker of the tool (resources) server."""
    settings = WorkerSettings.from_env()
    config = settings.gym_config()
    tool = build_tool(config, SystemClock())
    app = _participant_app(settings, config, tool.core)
    app.include_router(tool_router(tool, max_body_bytes=settings.data_max_body_bytes))
    _mount(app, settings, config, tool.core)
    return app


def simple_agent_app() -> FastAPI:
    """One worker of the agent server; it reaches the model and the tool over HTTP."""
    settings = WorkerSettings.from_env()
    config = settings.gym_config()
    model, tools = HttpModelClient(settings.model_url), HttpToolClient(settings.tool_url)
    agent = AgentServer(
        server_name=AGENT_SERVER,
        model=model,
        tools=tools,
        clock=SystemClock(),
        park_poll_seconds=config.park_poll_seconds,
    )
    app = _participant_app(settings, config, agent.core)
    app.include_router(agent_router(agent, max_body_bytes=settings.data_max_body_bytes))
    # Runs stop first, as in one process, then the clients close.
    _closing(app, _Stopping(agent), model, tools)
    _mount(app, settings, config, agent.core)
    return app


class _Stopping(AsyncCloseable):
    """The agent's runs, stopped as if the process died (``AgentServer.shutdown``)."""

    def __init__(self, agent: AgentServer) -> None:
        self._agent = agent

    async def aclose(self) -> None:
        await self._agent.shutdown()


# The supervisor: ``python -c SUPERVISOR '<uvicorn.run keywords as JSON>'``.
# Run as ``-c``, not ``-m``: uvicorn spawns its workers, and a spawned child
# first re-imports its parent's main module; a module of this package would
# import all of envckpt there, before the worker answers uvicorn's health
# pings (on a loaded machine, past the ping timeout: killed, respawned,
# forever). It asks the kernel to SIGTERM it (and so its workers) when its
# launcher dies, even by SIGKILL (Linux PR_SET_PDEATHSIG).
SUPERVISOR = """
import ctypes, json, os, signal, sys
if sys.platform.startswith("linux"):
    ctypes.CDLL(None).prctl(1, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() == 1:
        sys.exit(0)
import uvicorn
uvicorn.run(**json.loads(sys.argv[1]))
"""


def supervisor_command(
    server: str, *, host: str, port: int, workers: int, keep_alive: int
) -> list[str]:
    """The command running ``server``'s factory under uvicorn with ``workers`` workers."""
    options = {
        "app": f"envckpt.sim.worker_apps:{FACTORIES[server]}",
        "factory": True,
        "host": host,
        "port": port,
        "workers": workers,
        "log_level": "warning",
        "access_log": False,
        "http": "envckpt.sim.worker_apps:WorkerH11Protocol",
        "timeout_keep_alive": keep_alive,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_SECONDS,
        "timeout_worker_healthcheck": WORKER_HEALTHCHECK_SECONDS,
    }
    return [sys.executable, "-c", SUPERVISOR, json.dumps(options)]
