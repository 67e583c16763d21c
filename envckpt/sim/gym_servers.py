"""One Gym deployment (one Gym instance) served over real HTTP, like a real Gym.

Four servers, each a FastAPI app under uvicorn on an ephemeral 127.0.0.1 port:
the policy model, the tool (resources) server and the agent, each with its
control routes (``mount_participant``, which also runs the core's lease
watchdog) and its data routes; and a judge model with data routes only, so
discovery sees 404 on its status and leaves it out. The agent reaches the
model and the tool over HTTP (``HttpModelClient``, ``HttpToolClient``)::

    async with GymServers(seed=7, token=token, checkpoint_root=root) as servers:
        servers.urls   # {"policy_model": "http://127.0.0.1:41234", "simple_agent": ..., ...}
        async with HttpGym(servers.urls, token=token) as gym:    # the trainer side
            result = await gym.run(EnvironmentEpisode("r1", 0), {"prompt": "p", "turns": 5})
    fresh = servers.fresh()   # a new process of the same deployment (start it with async with)

How the servers are exposed is one ``Serving`` value: the checkpoint root
every participant is confined to (required), the bind address (127.0.0.1
unless told otherwise), the longest lease, the data routes' body limit, the
connection limits (``ServerLimits``) and whether FastAPI's docs are served
(never by default). ``python -m envckpt.sim.server`` runs one as a process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

from fastapi import FastAPI

from envckpt.clock import Clock, SystemClock
from envckpt.http.apps import new_app
from envckpt.http.bodies import DATA_MAX_BODY_BYTES
from envckpt.http.closing import AsyncCloseable
from envckpt.http.routes import DEFAULT_LEASE_CHECK_SECONDS, mount_participant
from envckpt.http.serve import DEFAULT_HOST, ServerLimits, serve, serve_many
from envckpt.participant.confinement import DEFAULT_MAX_LEASE_SECONDS, RequestBounds
from envckpt.participant.core import ParticipantCore
from envckpt.sim.data_clients import HttpModelClient, HttpToolClient
from envckpt.sim.data_routes import agent_router, data_router, model_router, tool_router
from envckpt.sim.gym import (
    AGENT_SERVER,
    JUDGE_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    GymConfig,
    build_model_and_tool,
    expected_transcript,
)
from envckpt.sim.kinds.agent import AgentServer
from envckpt.sim.kinds.model import StagingSink


@dataclass(frozen=True, slots=True)
class Serving:
    """How a deployment's servers are exposed: where checkpoints may go, and every limit."""

    checkpoint_root: Path
    host: str = DEFAULT_HOST
    lease_check_seconds: float = DEFAULT_LEASE_CHECK_SECONDS
    max_lease_seconds: float = DEFAULT_MAX_LEASE_SECONDS
    data_max_body_bytes: int = DATA_MAX_BODY_BYTES
    limits: ServerLimits = field(default_factory=ServerLimits)
    expose_docs: bool = False

    def __post_init__(self) -> None:
        if self.lease_check_seconds <= 0:
            raise ValueError("lease_check_seconds must be positive")
        RequestBounds.under(self.checkpoint_root, max_lease_seconds=self.max_lease_seconds)


def judge_app(serving: Serving | None = None) -> FastAPI:
    """A judge model: ``POST /generate`` only, no control routes (not a participant)."""

    async def generate(request: Mapping[str, Any]) -> dict[str, Any]:
        material = json.dumps(request, sort_keys=True).encode()
        return {"text": "judge-" + hashlib.sha256(material).hexdigest()[:12]}

    limit = DATA_MAX_BODY_BYTES if serving is None else serving.data_max_body_bytes
    app = new_app(expose_docs=serving is not None and serving.expose_docs)
    app.include_router(data_router(JUDGE_SERVER, {"generate": generate}, max_body_bytes=limit))
    return app


class GymServers(AsyncCloseable):
    """One Gym deployment on real HTTP servers; an async context manager."""

    def __init__(
        self,
        *,
        token: str,
        checkpoint_root: str | os.PathLike[str],
        staging_sink: StagingSink | None = None,
        clock: Clock | None = None,
        lease_check_seconds: float = DEFAULT_LEASE_CHECK_SECONDS,
        host: str = DEFAULT_HOST,
        expose_docs: bool = False,
        **settings: Any,
    ) -> None:
        """``settings``: the deployment's other ``GymConfig`` fields (seed, resources_mode, ...)."""
        serving = Serving(
            Path(os.fspath(checkpoint_root)),
            host=host,
            lease_check_seconds=lease_check_seconds,
            expose_docs=expose_docs,
        )
        config = GymConfig(token=token, **settings)
        self._setup(config, serving, staging_sink, clock or SystemClock())

    @classmethod
    def from_config(
        cls,
        config: GymConfig,
        *,
        serving: Serving,
        staging_sink: StagingSink | None = None,
        clock: Clock | None = None,
    ) -> GymServers:
        servers = cls.__new__(cls)
        servers._setup(config, serving, staging_sink, clock or SystemClock())
        return servers

    def _setup(
        self,
        config: GymConfig,
        serving: Serving,
        staging_sink: StagingSink | None,
        clock: Clock,
    ) -> None:
        self.config = config
        self.serving = serving
        self.staging_sink = staging_sink
        self.clock = clock
        self.model, self.tool = build_model_and_tool(config, clock, staging_sink)
        self._agent: AgentServer | None = None
        self._urls: dict[str, str] | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"GymServers(seed={self.config.seed}, urls={self._urls!r})"

    def fresh(self) -> GymServers:
        """A new, unstarted process of the same deployment (same seed, names, sink, clock)."""
        return GymServers.from_config(
            self.config, serving=self.serving, staging_sink=self.staging_sink, clock=self.clock
        )

    # ------------------------------------------------------------------ views

    @property
    def urls(self) -> dict[str, str]:
        """Server name -> base URL of every server (the judge included)."""
        if self._urls is None:
            raise RuntimeError("GymServers is not serving; use it as an async context manager")
        return dict(self._urls)

    @property
    def agent(self) -> AgentServer:
        if self._agent is None:
            raise RuntimeError("the agent exists only while GymServers is serving")
        return self._agent

    @property
    def cores(self) -> dict[str, ParticipantCore]:
        """Server name -> participant core of every participant (the judge is none)."""
        return {
            MODEL_SERVER: self.model.core,
            AGENT_SERVER: self.agent.core,
            RESOURCES_SERVER: self.tool.core,
        }

    def expected_transcript(self, rollout_id: str, task: Mapping[str, Any]) -> list[str]:
        """The uninterrupted transcript of ``rollout_id`` under this deployment's seed."""
        return expected_transcript(rollout_id, task, seed=self.config.seed)

    # -------------------------------------------------------------- lifecycle

    def _participant_app(self, core: ParticipantCore) -> FastAPI:
        serving = self.serving
        app = new_app(expose_docs=serving.expose_docs)
        core.bounds = RequestBounds.under(
            serving.checkpoint_root, max_lease_seconds=serving.max_lease_seconds
        )
        mount_participant(
            app, core, token=self.config.token, lease_check_seconds=serving.lease_check_seconds
        )
        return app

    async def start(self) -> None:
        """Serve every server; ``urls`` is valid once this returns."""
        if self._stack is not None:
            raise RuntimeError("GymServers is already serving (a fresh process: use fresh())")
        stack = contextlib.AsyncExitStack()
        self._stack = stack
        try:
            serving, limit = self.serving, self.serving.data_max_body_bytes
            model_app = self._participant_app(self.model.core)
            model_app.include_router(model_router(self.model, max_body_bytes=limit))
            tool_app = self._participant_app(self.tool.core)
            tool_app.include_router(tool_router(self.tool, max_body_bytes=limit))
            apps = [model_app, tool_app] + ([judge_app(serving)] if self.config.judge else [])
            callee_urls = await stack.enter_async_context(
                serve_many(apps, host=serving.host, limits=serving.limits)
            )
            model_url, tool_url = callee_urls[0], callee_urls[1]
            model_client = HttpModelClient(model_url)
            stack.push_async_callback(model_client.aclose)
            tool_client = HttpToolClient(tool_url)
            stack.push_async_callback(tool_client.aclose)
            agent = AgentServer(
                server_name=AGENT_SERVER,
                model=model_client,
                tools=tool_client,
                clock=self.clock,
                park_poll_seconds=self.config.park_poll_seconds,
            )
            for core in (self.model.core, self.tool.core, agent.core):
                core.set_gym_instance(self.config.instance_id)
            agent_app = self._participant_app(agent.core)
            agent_app.include_router(agent_router(agent, max_body_bytes=limit))
            agent_url = await stack.enter_async_context(
                serve(agent_app, host=serving.host, limits=serving.limits)
            )
            # Runs stop first, so no /run is left for uvicorn's graceful shutdown.
            stack.push_async_callback(agent.shutdown)
        except BaseException:
            self._stack = None
            await stack.aclose()
            raise
        self._agent = agent
        self._urls = {MODEL_SERVER: model_url, RESOURCES_SERVER: tool_url, AGENT_SERVER: agent_url}
        if self.config.judge:
            self._urls[JUDGE_SERVER] = callee_urls[2]

    async def stop(self) -> None:
        """Stop every rollout (its caller gets an error, as if the process died) and the servers."""
        stack, self._stack = self._stack, None
        self._urls = None
        if stack is not None:
            await stack.aclose()

    async def aclose(self) -> None:
        await self.stop()

    async def __aenter__(self) -> Self:
        await self.start()
        return self
