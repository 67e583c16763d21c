"""One Gym deployment (one Gym instance) simulated inside this process.

A policy model, an agent and a tool server, each with its participant core,
plus an optional judge model that is not a participant (no control routes).
They share one clock and one fault plan; control calls go through an
``InProcessTransport`` (so through the same control edge as HTTP) and a
``Coordinator``. Everything is a pure function of the seed, so an
uninterrupted run and a restored one give identical transcripts::

    gym = SimulatedGym(seed=7)
    result = await gym.run(EnvironmentEpisode("r1", 0), {"prompt": "p", "turns": 5})
    result["transcript"] == gym.expected_transcript("r1", {"prompt": "p", "turns": 5})

    participants = await gym.coordinator.discover()
    await gym.coordinator.prepare(participants, cid, deadline_ts=d)   # runs park
    await gym.coordinator.commit(participants, cid, path, episodes, deadline_ts=d)
    await gym.shutdown()                 # the process "dies"
    fresh = gym.fresh_process()          # a new process of the same deployment
    await fresh.coordinator.restore(fresh_participants, rid, path, episodes, deadline_ts=d)
    await fresh.coordinator.resume(fresh_participants, rid, deadline_ts=d)
    await fresh.run(episode.next_attempt(), task)   # continues at the saved turn
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from envckpt.clock import Clock, SystemClock
from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.faults import FaultPlan
from envckpt.coordination.inprocess import InProcessTransport
from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.core import ParticipantCore
from envckpt.participant.model_calls import DEFAULT_MODEL_CALLS, parse_model_calls
from envckpt.protocol import MODES
from envckpt.sim.kinds.agent import (
    DEFAULT_PARK_POLL_SECONDS,
    AgentServer,
    InProcessModelClient,
    InProcessToolClient,
    opening_line,
    turn_lines,
)
from envckpt.sim.kinds.common import parse_task
from envckpt.sim.kinds.model import PolicyModelServer, StagingSink, policy_action
from envckpt.sim.kinds.resources import ToolServer, effect_value, tool_observation

MODEL_SERVER = "policy_model"
AGENT_SERVER = "simple_agent"
RESOURCES_SERVER = "tool_resources"
JUDGE_SERVER = "judge_model"


@dataclass(frozen=True, slots=True)
class GymConfig:
    """What makes two processes the same deployment (a fresh process reuses it)."""

    seed: int = 0
    resources_mode: str = "export_restore"
    judge: bool = True
    token: str = "simulated-gym-token"
    model_latency: float = 0.0
    tool_latency: float = 0.0
    park_poll_seconds: float = DEFAULT_PARK_POLL_SECONDS
    # Where the tool server appends its audit lines (a Path given is kept as its str).
    audit_path: str | None = None
    # What a prepare does with generations still decoding (model_calls.py).
    model_calls: str = DEFAULT_MODEL_CALLS.value
    # The Gym instance id ("shard/replica-0") every participant's events name.
    instance_id: str | None = None

    def __post_init__(self) -> None:
        if self.audit_path is not None:
            object.__setattr__(self, "audit_path", os.fspath(self.audit_path))
        if self.resources_mode not in MODES:
            raise ValueError(f"unknown resources mode {self.resources_mode!r}")
        if min(self.model_latency, self.tool_latency) < 0 or self.park_poll_seconds <= 0:
            raise ValueError("latencies must be >= 0 and the park poll interval > 0")
        parse_model_calls(self.model_calls)


def expected_transcript(rollout_id: str, task: Mapping[str, Any], *, seed: int) -> list[str]:
    """The transcript an uninterrupted run produces, computed without any server."""
    parsed = parse_task(task)
    observation: str = parsed["prompt"]
    lines = [opening_line(observation)]
    for turn in range(parsed["turns"]):
        action = policy_action(seed, rollout_id, turn, observation)
        observation = tool_observation(turn, action, effect_value(seed, action))
        lines.extend(turn_lines(action, observation))
    return lines


def build_model(
    config: GymConfig, clock: Clock, staging_sink: StagingSink | None
) -> PolicyModelServer:
    """The policy model server of one deployment, every setting of ``config`` applied (one
    home for it: the in-process Gym, its HTTP servers and each multi-worker worker)."""
    return PolicyModelServer(
        server_name=MODEL_SERVER,
        seed=config.seed,
        clock=clock,
        latency=config.model_latency,
        staging_sink=staging_sink,
        model_calls=parse_model_calls(config.model_calls),
    )


def build_tool(config: GymConfig, clock: Clock) -> ToolServer:
    """The tool (resources) server of one deployment, every setting of ``config`` applied."""
    return ToolServer(
        server_name=RESOURCES_SERVER,
        mode=config.resources_mode,
        seed=config.seed,
        clock=clock,
        latency=config.tool_latency,
        audit_path=config.audit_path,
    )


def build_model_and_tool(
    config: GymConfig, clock: Clock, staging_sink: StagingSink | None
) -> tuple[PolicyModelServer, ToolServer]:
    """The policy model and tool servers of one deployment (shared with the HTTP servers)."""
    return build_model(config, clock, staging_sink), build_tool(config, clock)


class SimulatedGym:
    """One in-process Gym deployment and its coordinator."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        faults: FaultPlan | None = None,
        staging_sink: StagingSink | None = None,
        **settings: Any,
    ) -> None:
        """``settings``: the deployment's ``GymConfig`` fields (seed, resources_mode, ...)."""
        config = GymConfig(**settings)
        self._build(config, clock or SystemClock(), faults or FaultPlan(), staging_sink)

    @classmethod
    def from_config(
        cls,
        config: GymConfig,
        *,
        clock: Clock | None = None,
        faults: FaultPlan | None = None,
        staging_sink: StagingSink | None = None,
    ) -> SimulatedGym:
        gym = cls.__new__(cls)
        gym._build(config, clock or SystemClock(), faults or FaultPlan(), staging_sink)
        return gym

    def _build(
        self,
        config: GymConfig,
        clock: Clock,
        faults: FaultPlan,
        staging_sink: StagingSink | None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.faults = faults
        # Not part of the config: the trainer's data plane outlives a Gym process.
        self.staging_sink = staging_sink
        self.model, self.tool = build_model_and_tool(config, clock, staging_sink)
        self.agent = AgentServer(
            server_name=AGENT_SERVER,
            model=InProcessModelClient(self.model),
            tools=InProcessToolClient(self.tool),
            clock=clock,
            park_poll_seconds=config.park_poll_seconds,
        )
        self.cores: dict[str, ParticipantCore] = {
            MODEL_SERVER: self.model.core,
            AGENT_SERVER: self.agent.core,
            RESOURCES_SERVER: self.tool.core,
        }
        for core in self.cores.values():
            core.set_gym_instance(config.instance_id)
        servers: dict[str, ParticipantCore | None] = dict(self.cores)
        if config.judge:
            servers[JUDGE_SERVER] = None  # a judge model has no control routes
        self.transport = InProcessTransport(servers, token=config.token, faults=faults)
        self.coordinator = Coordinator(self.transport, clock=clock)

    def fresh_process(self, *, faults: FaultPlan | None = None) -> SimulatedGym:
        """A new process of the same deployment: same names and seed, new cores, no traffic.

        It shares this one's clock and staging sink; it gets a new fault plan
        unless one is given.
        """
        return SimulatedGym.from_config(
            self.config, clock=self.clock, faults=faults, staging_sink=self.staging_sink
        )

    async def run(self, episode: EnvironmentEpisode, task: Mapping[str, Any]) -> dict[str, Any]:
        """Drive one rollout attempt through the agent's run, as the trainer would."""
        request = json.loads(json.dumps({"episode": episode.to_wire(), "task": dict(task)}))
        return await self.agent.run(request)

    def start(self, episode: EnvironmentEpisode, task: Mapping[str, Any]) -> asyncio.Task[Any]:
        """``run`` as a background task (for snapshots taken mid-rollout)."""
        return asyncio.create_task(self.run(episode, task), name=f"rollout {episode.capture_key}")

    async def shutdown(self) -> None:
        """Stop every running rollout as if this process died."""
        await self.agent.shutdown()

    def expected_transcript(self, rollout_id: str, task: Mapping[str, Any]) -> list[str]:
        """The uninterrupted transcript of ``rollout_id`` under this deployment's seed."""
        return expected_transcript(rollout_id, task, seed=self.config.seed)
