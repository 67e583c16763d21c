"""One Gym deployment (one Gym instance) served over real HTTP, like a real Gym.

Four servers, each a FastAPI app under uvicorn on an ephemeral 127.0.0.1 port:
the policy model, the tool (resources) server and the agent, each with its
control routes (``mount_participant``, which also runs the core's lease
watchdog) and its data routes; and a judge model with data routes only, so
discovery sees 404 on its status and leaves it out. The agent reaches the
model and the tool over HTTP (``HttpModelClient``, ``HttpToolClient``)::

    async with GymServers(seed=7, token=token, tool_latency=0.01) as servers:
        servers.urls   # {"policy_model": "http://127.0.0.1:41234", "simple_agent": ..., ...}
        async with HttpGym(servers.urls, token=token) as gym:    # the trainer side
            result = await gym.run(EnvironmentEpisode("r1", 0), {"prompt": "p", "turns": 5})
    fresh = servers.fresh()   # a new process of the same deployment (start it with async with)

As a process (the demo and the end-to-end tests start these and SIGKILL them)::

    python -m envckpt.sim.server --seed 7 --token T --ready-file urls.json \\
        [--resources-mode stateless] [--audit audit.jsonl] [--rows-url URL --rows-token T] \\
        [--log-json gym.jsonl] [--instance-id shard/replica-0]

It writes ``{server_name: base_url}`` to the ready file atomically once every
server listens, and stops cleanly on SIGTERM or SIGINT. The token may also
come from ``ENVCKPT_GYM_TOKEN`` (a command line is visible to other users).
``--log-json`` (or ``ENVCKPT_GYM_LOG``) appends every log event of the
process as one JSON object per line, the participants' ``transition`` events
among them, so ``envckpt statecharts --overlay`` can draw them; logging is
configured there, in the process's ``main``, never by the library.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import structlog
from fastapi import FastAPI

from envckpt.clock import Clock, SystemClock
from envckpt.fsutil import atomic_write_bytes
from envckpt.http.routes import DEFAULT_LEASE_CHECK_SECONDS, mount_participant
from envckpt.http.serve import DEFAULT_HOST, serve, serve_many
from envckpt.participant.core import ParticipantCore
from envckpt.sim.data_clients import HttpModelClient, HttpStagingSink, HttpToolClient
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
from envckpt.sim.kinds.agent import DEFAULT_PARK_POLL_SECONDS, AgentServer
from envckpt.sim.kinds.model import StagingSink

TOKEN_ENV = "ENVCKPT_GYM_TOKEN"
LOG_ENV = "ENVCKPT_GYM_LOG"


def judge_app() -> FastAPI:
    """A judge model: ``POST /generate`` only, no control routes (not a participant)."""

    async def generate(request: Mapping[str, Any]) -> dict[str, Any]:
        material = json.dumps(request, sort_keys=True).encode()
        return {"text": "judge-" + hashlib.sha256(material).hexdigest()[:12]}

    app = FastAPI()
    app.include_router(data_router(JUDGE_SERVER, {"generate": generate}))
    return app


class GymServers:
    """One Gym deployment on real HTTP servers; an async context manager."""

    def __init__(
        self,
        *,
        token: str,
        seed: int = 0,
        resources_mode: str = "export_restore",
        judge: bool = True,
        model_latency: float = 0.0,
        tool_latency: float = 0.0,
        park_poll_seconds: float = DEFAULT_PARK_POLL_SECONDS,
        audit_path: str | Path | None = None,
        staging_sink: StagingSink | None = None,
        clock: Clock | None = None,
        lease_check_seconds: float = DEFAULT_LEASE_CHECK_SECONDS,
        host: str = DEFAULT_HOST,
        instance_id: str | None = None,
    ) -> None:
        config = GymConfig(
            instance_id=instance_id,
            seed=seed,
            resources_mode=resources_mode,
            judge=judge,
            token=token,
            model_latency=model_latency,
            tool_latency=tool_latency,
            park_poll_seconds=park_poll_seconds,
            audit_path=None if audit_path is None else str(audit_path),
        )
        self._setup(config, staging_sink, clock or SystemClock(), lease_check_seconds, host)

    @classmethod
    def from_config(
        cls,
        config: GymConfig,
        *,
        staging_sink: StagingSink | None = None,
        clock: Clock | None = None,
        lease_check_seconds: float = DEFAULT_LEASE_CHECK_SECONDS,
        host: str = DEFAULT_HOST,
    ) -> GymServers:
        servers = cls.__new__(cls)
        servers._setup(config, staging_sink, clock or SystemClock(), lease_check_seconds, host)
        return servers

    def _setup(
        self,
        config: GymConfig,
        staging_sink: StagingSink | None,
        clock: Clock,
        lease_check_seconds: float,
        host: str,
    ) -> None:
        if lease_check_seconds <= 0:
            raise ValueError("lease_check_seconds must be positive")
        self.config = config
        self.staging_sink = staging_sink
        self.clock = clock
        self.lease_check_seconds = lease_check_seconds
        self.host = host
        self.model, self.tool = build_model_and_tool(config, clock, staging_sink)
        self._agent: AgentServer | None = None
        self._urls: dict[str, str] | None = None
        self._stack: contextlib.AsyncExitStack | None = None

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"GymServers(seed={self.config.seed}, urls={self._urls!r})"

    def fresh(self) -> GymServers:
        """A new, unstarted process of the same deployment (same seed, names, sink, clock)."""
        return GymServers.from_config(
            self.config,
            staging_sink=self.staging_sink,
            clock=self.clock,
            lease_check_seconds=self.lease_check_seconds,
            host=self.host,
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
        app = FastAPI()
        mount_participant(
            app, core, token=self.config.token, lease_check_seconds=self.lease_check_seconds
        )
        return app

    async def start(self) -> None:
        """Serve every server; ``urls`` is valid once this returns."""
        if self._stack is not None:
            raise RuntimeError("GymServers is already serving (a fresh process: use fresh())")
        stack = contextlib.AsyncExitStack()
        self._stack = stack
        try:
            model_app = self._participant_app(self.model.core)
            model_app.include_router(model_router(self.model))
            tool_app = self._participant_app(self.tool.core)
            tool_app.include_router(tool_router(self.tool))
            apps = [model_app, tool_app] + ([judge_app()] if self.config.judge else [])
            callee_urls = await stack.enter_async_context(serve_many(apps, host=self.host))
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
            agent_app.include_router(agent_router(agent))
            agent_url = await stack.enter_async_context(serve(agent_app, host=self.host))
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

    async def __aenter__(self) -> GymServers:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()


# ---------------------------------------------------------------- the process


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m envckpt.sim.server",
        description="Serve one Gym deployment (model, tool, agent, judge) over HTTP.",
    )
    parser.add_argument("--seed", type=int, default=0, help="policy and tool seed (%(default)s)")
    parser.add_argument(
        "--token", default=None, help=f"control-plane bearer token (or ${TOKEN_ENV})"
    )
    parser.add_argument(
        "--resources-mode",
        default="export_restore",
        choices=("export_restore", "restart_only", "stateless"),
        help="the tool server's participant mode (%(default)s)",
    )
    parser.add_argument("--audit", type=Path, default=None, help="append tool effects here")
    parser.add_argument("--rows-url", default=None, help="trainer endpoint for token rows")
    parser.add_argument("--rows-token", default=None, help="bearer token for --rows-url")
    parser.add_argument("--model-latency", type=float, default=0.0, help="seconds per generation")
    parser.add_argument("--tool-latency", type=float, default=0.0, help="seconds per tool call")
    parser.add_argument("--no-judge", action="store_true", help="serve no judge model")
    parser.add_argument(
        "--ready-file", type=Path, required=True, help="write {server: base_url} JSON here"
    )
    parser.add_argument(
        "--instance-id", default=None, help="the Gym instance id its events name (shard/replica-0)"
    )
    parser.add_argument(
        "--log-json",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"append every log event as a JSON line here (or ${LOG_ENV})",
    )
    return parser


def configure_json_log(path: Path) -> None:
    """Send this process's structlog events and stdlib records to ``path`` as JSON lines.

    For a process's ``main`` only. stdlib records (uvicorn's) go through the
    same renderer, so every line of the file is one JSON object; the file is
    appended to and flushed per event, so a process killed mid-run loses no
    line it logged.
    """
    stamps: list[structlog.typing.Processor] = [
        structlog.stdlib.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.add_logger_name, *stamps],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.JSONRenderer(),
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # The transitions library narrates each fire at INFO (envckpt's own
    # ``transition`` event records it once, with its fields) and httpx each
    # request between the agent and its model and tool: warnings only.
    for chatty in ("transitions", "httpx"):
        logging.getLogger(chatty).setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *stamps,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def write_ready_file(path: Path, urls: Mapping[str, str]) -> None:
    """``urls`` as JSON at ``path``, atomically (a reader never sees a partial file)."""
    atomic_write_bytes(path, json.dumps(dict(urls), sort_keys=True).encode())


async def serve_until_signalled(args: argparse.Namespace, token: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    sink = None if args.rows_url is None else HttpStagingSink(args.rows_url, args.rows_token)
    try:
        async with GymServers(
            seed=args.seed,
            token=token,
            resources_mode=args.resources_mode,
            judge=not args.no_judge,
            model_latency=args.model_latency,
            tool_latency=args.tool_latency,
            audit_path=args.audit,
            staging_sink=sink,
            instance_id=args.instance_id,
        ) as servers:
            write_ready_file(args.ready_file, servers.urls)
            await stop.wait()
    finally:
        if sink is not None:
            await sink.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    token = args.token or os.environ.get(TOKEN_ENV, "")
    if not token:
        parser.error(f"a control token is required: --token or ${TOKEN_ENV}")
    if (args.rows_url is None) != (args.rows_token is None):
        parser.error("--rows-url and --rows-token go together")
    log_path = args.log_json or (Path(os.environ[LOG_ENV]) if os.environ.get(LOG_ENV) else None)
    if log_path is not None:
        configure_json_log(log_path)
    asyncio.run(serve_until_signalled(args, token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
