"""The trainer's handle on one Gym deployment served over HTTP.

It holds the two separate pools the trainer needs: the control transport (and
the coordinator over it) for checkpoints, and the agent client for rollouts::

    async with HttpGym(urls, token=token) as gym:     # urls: server name -> base URL
        adapter = GymCheckpointAdapter(instance=instance, coordination=gym.coordinator)
        result = await gym.run(EnvironmentEpisode("r1", 0), {"prompt": "p", "turns": 5})
        task = gym.start(episode, task)               # the same, in the background
    backend = HttpBackend({"shard/replica-0": gym})   # a trainer's RolloutBackend over them
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from envckpt.clock import Clock
from envckpt.coordination.coordinator import Coordinator
from envckpt.episodes import EnvironmentEpisode
from envckpt.http.client import HttpTransport
from envckpt.http.closing import AsyncCloseable
from envckpt.sim.data_clients import DEFAULT_RUN_TIMEOUT, HttpAgentClient
from envckpt.sim.gym import AGENT_SERVER


class HttpGym(AsyncCloseable):
    """Control transport, coordinator and agent client of one Gym deployment."""

    def __init__(
        self,
        urls: Mapping[str, str],
        *,
        token: str,
        agent_server: str = AGENT_SERVER,
        run_timeout: float = DEFAULT_RUN_TIMEOUT,
        clock: Clock | None = None,
    ) -> None:
        if agent_server not in urls:
            raise ValueError(f"no agent server {agent_server!r} among {sorted(urls)}")
        self.urls = dict(urls)
        self.transport = HttpTransport(self.urls, token=token)
        self.coordinator = Coordinator(self.transport, clock=clock)
        self.agent = HttpAgentClient(self.urls[agent_server], timeout=run_timeout)

    def __repr__(self) -> str:  # the token stays out of reprs and logs
        return f"HttpGym(urls={self.urls!r})"

    async def run(
        self, episode: EnvironmentEpisode, task: Mapping[str, Any], *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Run (or continue) one rollout attempt through the agent's ``/run``."""
        return await self.agent.run(episode, task, timeout=timeout)

    def start(self, episode: EnvironmentEpisode, task: Mapping[str, Any]) -> asyncio.Task[Any]:
        """``run`` as a background task (for snapshots taken mid-rollout)."""
        return asyncio.create_task(self.run(episode, task), name=f"rollout {episode.capture_key}")

    async def aclose(self) -> None:
        try:
            await self.agent.aclose()
        finally:
            await self.transport.aclose()


class HttpBackend:
    """``RolloutBackend`` over Gym deployments served by other processes: each rollout
    attempt runs through its instance's ``HttpGym`` (the data plane)."""

    def __init__(self, gyms: Mapping[str, HttpGym]) -> None:
        self.gyms = gyms  # instance id -> its deployment

    async def run(
        self, instance_id: str, episode: EnvironmentEpisode, task: Mapping[str, Any]
    ) -> dict[str, Any]:
        return await self.gyms[instance_id].run(episode, task)
