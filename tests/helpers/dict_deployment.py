"""Test doubles shared by the adapter and facade tests: dict-backed participants.

``DictHooks`` keeps one JSON dict per episode and plays the agent, model or
resources part (run_episode_ids, staging keys). ``Deployment`` builds the
cores of one Gym instance behind an ``InProcessTransport``; ``discovered``
puts an adapter in front of it, and ``saved_then_restored`` takes an episode
through a commit and a restore by fresh processes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.clock import Clock, FakeClock
from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.faults import FaultPlan
from envckpt.coordination.inprocess import InProcessTransport
from envckpt.episodes import EnvironmentEpisode
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.participant.core import ParticipantCore

from helpers.participant_doubles import JsonStateHooks, cores_of

TOKEN = "test-token-5d0e2b7a"
INSTANCE = GymCheckpointInstance("shard", 0)
E1 = EnvironmentEpisode("r1", 0)
# A second rollout on a later attempt, held beside E1.
E2 = EnvironmentEpisode("r2", 2)


class DictHooks(JsonStateHooks):
    """Per-episode dict state for any participant kind; a model's rows come from the state."""

    staging_from_state = True

    @property
    def state(self) -> dict[EnvironmentEpisode, dict[str, Any]]:
        return self.states

    @property
    def admission_closed(self) -> bool:
        return not self.admission_open


@dataclass
class Deployment:
    """The participants of one Gym instance, in process."""

    clock: Clock = field(default_factory=FakeClock)
    kinds: tuple[tuple[str, str, str], ...] = (
        ("policy", "model", "export_restore"),
        ("agent", "agent", "export_restore"),
        ("tools", "resources", "export_restore"),
    )
    non_participants: tuple[str, ...] = ("judge",)
    faults: FaultPlan = field(default_factory=FaultPlan)
    # Over real HTTP (uvicorn, FastAPI routes, httpx) instead of direct calls.
    http: bool = False

    def __post_init__(self) -> None:
        self.hooks, self.cores = cores_of(self.kinds, DictHooks, self.clock)
        servers: dict[str, ParticipantCore | None] = dict(self.cores)
        servers.update({name: None for name in self.non_participants})
        self.loopback = LoopbackHttp(servers, token=TOKEN) if self.http else None
        self.transport = InProcessTransport(
            servers, token=TOKEN, faults=self.faults, deliver=self.loopback
        )
        self.coordinator = Coordinator(self.transport, clock=self.clock)

    async def start(self, episode: EnvironmentEpisode, turn: int = 1) -> None:
        """Run ``episode`` to ``turn`` in every participant; it parks there."""
        for name, hooks in self.hooks.items():
            async with self.cores[name].admit(episode):
                state: dict[str, Any] = {"turn": turn}
                if hooks.kind == "model":
                    state["staging"] = [f"{episode.capture_key}/t{t}" for t in range(turn)]
                hooks.state[episode] = state

    def fresh(self) -> Deployment:
        """A new process of the same deployment (nothing served yet)."""
        return Deployment(
            clock=self.clock,
            kinds=self.kinds,
            non_participants=self.non_participants,
            http=self.http,
        )


class LoopbackHttp:
    """Delivers control requests over real HTTP to the cores, served in this loop.

    Plugged into ``InProcessTransport(deliver=...)``, so a ``Deployment`` keeps
    its fault plan while every request crosses uvicorn, the FastAPI routes and
    httpx. The servers start on the first request and live as long as the
    event loop that started them (each hypothesis example has its own).
    """

    # Requests delivered over HTTP by every instance (tests check it is not zero).
    delivered = 0
    # Every one not closed yet: a test's teardown closes them (close_all).
    unclosed: list[LoopbackHttp] = []

    def __init__(self, cores: Mapping[str, ParticipantCore | None], *, token: str) -> None:
        self._cores = dict(cores)
        self._token = token
        self._transport: Any = None
        self._names: dict[int, str] = {}
        self._stack: Any = None
        self._starting: asyncio.Future[None] | None = None
        LoopbackHttp.unclosed.append(self)

    async def _start(self) -> None:
        import contextlib
        import tempfile

        from fastapi import FastAPI

        from envckpt.http.client import HttpTransport
        from envckpt.http.routes import mount_participant
        from envckpt.http.serve import serve_many

        names = sorted(self._cores)
        apps = []
        for name in names:
            app = FastAPI()
            core = self._cores[name]
            if core is not None:
                # No watchdog: the fake clock's leases are checked on each call.
                mount_participant(
                    app,
                    core,
                    token=self._token,
                    checkpoint_root=tempfile.gettempdir(),
                    lease_check_seconds=None,
                )
            apps.append(app)
        self._stack = contextlib.AsyncExitStack()
        urls = await self._stack.enter_async_context(serve_many(apps))
        self._transport = HttpTransport(dict(zip(names, urls, strict=True)), token=self._token)
        self._names = {id(core): name for name, core in self._cores.items() if core is not None}

    async def __call__(
        self, core: ParticipantCore, method: str, route: str, body: Mapping[str, Any] | None
    ) -> tuple[int, dict[str, Any]]:
        if self._starting is None:
            # Concurrent first requests start the servers once.
            self._starting = asyncio.ensure_future(self._start())
        await asyncio.shield(self._starting)
        reply = await self._transport.request(
            self._names[id(core)], method, route, body, timeout=60.0
        )
        LoopbackHttp.delivered += 1
        return reply.status, reply.body if isinstance(reply.body, dict) else {}

    async def aclose(self) -> None:
        if self in LoopbackHttp.unclosed:
            LoopbackHttp.unclosed.remove(self)
        if self._transport is not None:
            await self._transport.aclose()
        if self._stack is not None:
            await self._stack.aclose()

    @classmethod
    async def close_all(cls) -> None:
        """Close every loopback still open (servers and client sessions)."""
        for loopback in list(cls.unclosed):
            await loopback.aclose()


def pass_every_lease(deployment: Deployment) -> None:
    """Advance ``deployment``'s fake clock one second past its participants' latest lease."""
    assert isinstance(deployment.clock, FakeClock)
    lease = max(core.lease_expires_at or 0.0 for core in deployment.cores.values())
    deployment.clock.advance(lease - deployment.clock.now() + 1)


def all_idle_and_open(deployment: Deployment) -> bool:
    """Whether every participant of ``deployment`` is idle with its admission reopened."""
    return all(
        core.phase == "idle" and deployment.hooks[name].admission_open
        for name, core in deployment.cores.items()
    )


def far(deployment: Deployment) -> float:
    """A deadline a minute ahead of the deployment's clock."""
    return deployment.clock.now() + 60


async def discovered(
    deployment: Deployment, instance: GymCheckpointInstance = INSTANCE
) -> GymCheckpointAdapter:
    """An adapter in front of ``deployment``, after its discovery."""
    adapter = GymCheckpointAdapter(instance=instance, coordination=deployment.coordinator)
    await adapter.discover()
    return adapter


async def prepared_with(
    deployment: Deployment, episode: EnvironmentEpisode
) -> GymCheckpointAdapter:
    """``episode`` run in ``deployment``, then an adapter discovered and prepared as c1."""
    await deployment.start(episode)
    adapter = await discovered(deployment)
    await adapter.prepare("c1", deadline_ts=far(deployment))
    return adapter


async def saved_then_restored(
    deployment: Deployment, directory: Any, episode: EnvironmentEpisode, *, turn: int = 2
) -> tuple[Deployment, GymCheckpointAdapter]:
    """``episode`` run to ``turn``, committed as c1, then restored as r1 by fresh processes."""
    await deployment.start(episode, turn=turn)
    adapter = await discovered(deployment)
    await adapter.prepare("c1", deadline_ts=far(deployment))
    summary = await adapter.commit("c1", directory, [episode], deadline_ts=far(deployment))
    await adapter.resume("c1", deadline_ts=far(deployment))
    fresh = deployment.fresh()
    restored = await discovered(fresh)
    await restore_r1(restored, fresh, directory, summary.participants, [episode])
    return fresh, restored


async def restore_r1(
    adapter: GymCheckpointAdapter,
    deployment: Deployment,
    directory: str | Path,
    participants: Iterable[str],
    episodes: Iterable[EnvironmentEpisode] = (E1,),
) -> None:
    """``adapter``'s restore as r1 of what c1 saved of ``episodes`` in ``directory``."""
    await adapter.restore(
        "r1",
        directory,
        episodes,
        participants=participants,
        source_checkpoint_id="c1",
        deadline_ts=far(deployment),
    )
