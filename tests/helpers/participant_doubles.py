"""Test doubles for the participant core and coordinator tests (not a test module).

``JsonStateHooks`` keeps one JSON dict per episode and can be told to fail or
stall at each hook. ``Turn`` holds one admitted call open until finished, so a
test can keep an episode in flight. ``Cluster`` builds cores of several kinds
behind an ``InProcessTransport`` wrapped in a ``RecordingTransport``.

    hooks = JsonStateHooks()
    core = ParticipantCore(server_name="agent", kind="agent", hooks=hooks, clock=FakeClock())
    turn = await Turn.start(core, EnvironmentEpisode("task-1", 0))
    ...
    await turn.finish()
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from envckpt.clock import Clock, FakeClock
from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.faults import FaultPlan
from envckpt.coordination.inprocess import InProcessTransport
from envckpt.coordination.transport import ControlReply
from envckpt.episodes import EnvironmentEpisode
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import SessionHooks

TOKEN = "secret-token"
START = 1_800_000_000.0
H = TypeVar("H", bound="JsonStateHooks")


def ep(rollout_id: str, attempt: int = 0) -> EnvironmentEpisode:
    return EnvironmentEpisode(rollout_id, attempt)


class JsonStateHooks(SessionHooks[dict[str, Any]]):
    """Per-episode JSON state with switches to make each hook fail.

    ``turn_key`` is the integer a saved state must carry; a model's staging
    keys are ``<capture key>/stage`` unless a state lists its own under
    ``"staging"`` (``staging_from_state``).
    """

    state_type = dict
    turn_key = "turn"
    staging_from_state = False

    def __init__(self, kind: str = "agent") -> None:
        super().__init__()
        self.kind = kind
        self.admission_open = True
        self.fail_close = False
        self.fail_retire = False
        self.export_error: Exception | None = None
        self.status_error: Exception | None = None
        self.calls: list[str] = []
        self.exports = 0
        self.released = 0
        self.installed: list[EnvironmentEpisode] = []
        self.retired: list[tuple[EnvironmentEpisode, ...]] = []
        self.forgotten: list[str] = []
        # Called from hooks.retire with the episodes, e.g. to stop in-flight turns.
        self.on_retire: list[Callable[[tuple[EnvironmentEpisode, ...]], None]] = []

    def put(self, episode: EnvironmentEpisode, turn: int = 1, **extra: Any) -> None:
        self.states[episode] = {self.turn_key: turn, **extra}

    def save_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return dict(state)

    def load_state(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> dict[str, Any]:
        if type(state.get(self.turn_key)) is not int:
            raise ValueError(f"{episode.capture_key}: state without an integer {self.turn_key}")
        return dict(state)

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        if self.status_error is not None:
            raise self.status_error
        return super().live_episodes()

    async def close_admission(self) -> None:
        self.calls.append("close")
        if self.fail_close:
            raise RuntimeError("cannot cut generations")
        self.admission_open = False

    async def open_admission(self) -> None:
        self.calls.append("open")
        self.admission_open = True

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        self.exports += 1
        if self.export_error is not None:
            raise self.export_error
        return super().export(scope)

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        keys = sorted(e.capture_key for e in exported)
        if self.kind == "agent":
            return {"run_episode_ids": keys}
        if self.kind == "model":
            by_episode = {e.capture_key: self._staging(e) for e in exported}
            return {
                "staging_keys": sorted({k for ks in by_episode.values() for k in ks}),
                "staging_keys_by_episode": by_episode,
            }
        return {}

    def _staging(self, episode: EnvironmentEpisode) -> list[str]:
        if self.staging_from_state:
            return sorted(self.states[episode].get("staging", []))
        return [f"{episode.capture_key}/stage"]

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        super().install(restored)
        self.installed.extend(episode for episode, _ in restored)

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        self.retired.append(episodes)
        for callback in self.on_retire:
            callback(episodes)
        if self.fail_retire:
            raise RuntimeError("the turn would not stop")
        await super().retire(episodes)

    def forget(self, rollout_ids: Iterable[str]) -> None:
        self.forgotten.extend(rollout_ids)

    def release_exported(self) -> None:
        self.released += 1


class Turn:
    """One admitted call held open until ``finish`` (the episode is in flight)."""

    def __init__(self, core: ParticipantCore, episode: EnvironmentEpisode) -> None:
        self.core = core
        self.episode = episode
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    @classmethod
    async def start(cls, core: ParticipantCore, episode: EnvironmentEpisode) -> Turn:
        turn = cls(core, episode)
        turn.task = asyncio.create_task(turn._run())
        await run_until(turn.task, turn.entered)
        return turn

    async def _run(self) -> None:
        async with self.core.admit(self.episode):
            self.entered.set()
            await self.release.wait()

    async def finish(self) -> None:
        self.release.set()
        assert self.task is not None
        await self.task


async def run_until(task: asyncio.Task[None], reached: asyncio.Event) -> None:
    """Wait until ``task`` sets ``reached``; if it ended first, raise its error (the admission
    refused)."""
    waiting = asyncio.create_task(reached.wait())
    await asyncio.wait({task, waiting}, return_when=asyncio.FIRST_COMPLETED)
    waiting.cancel()
    if task.done():
        task.result()


async def run_turn(
    core: ParticipantCore, hooks: JsonStateHooks, episode: EnvironmentEpisode, turn: int = 1
) -> None:
    """Admit ``episode``, advance its state to ``turn`` and park it at the boundary."""
    async with core.admit(episode):
        hooks.put(episode, turn)


async def drain_tasks() -> None:
    """Wait for every other task (commit writes running in the background)."""
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    await asyncio.gather(*others, return_exceptions=True)


@dataclass(frozen=True, slots=True)
class Sent:
    """One request as the coordinator sent it."""

    server: str
    method: str
    route: str
    body: Mapping[str, Any] | None
    timeout: float
    connect_tries: int = 1
    authorization: str | None = None


class TransportDouble:
    """A ``ControlTransport`` for tests: each request, as a ``Sent``, goes to ``answer``."""

    def server_names(self) -> tuple[str, ...]:
        raise NotImplementedError

    async def request(
        self, server: str, method: str, route: str, body: Mapping[str, Any] | None, **options: Any
    ) -> ControlReply:
        # ``Sent`` holds the keyword options (timeout, connect_tries, authorization) and
        # refuses any other, as the transport's signature does.
        return await self.answer(Sent(server, method, route, body, **options))

    async def answer(self, sent: Sent) -> ControlReply:
        raise NotImplementedError


class RecordingTransport(TransportDouble):
    """Wraps a transport and records every request (order, body, timeout)."""

    def __init__(self, inner: InProcessTransport) -> None:
        self.inner = inner
        self.sent: list[Sent] = []

    def server_names(self) -> tuple[str, ...]:
        return self.inner.server_names()

    async def answer(self, sent: Sent) -> ControlReply:
        self.sent.append(sent)
        return await self.inner.request(
            sent.server,
            sent.method,
            sent.route,
            sent.body,
            timeout=sent.timeout,
            connect_tries=sent.connect_tries,
            authorization=sent.authorization,
        )

    def servers_of(self, route: str) -> list[str]:
        return [sent.server for sent in self.sent if sent.route == route]


DEFAULT_KINDS: tuple[tuple[str, str, str], ...] = (
    ("env", "environment", "export_restore"),
    ("policy", "model", "export_restore"),
    ("agent-a", "agent", "export_restore"),
    ("agent-b", "agent", "export_restore"),
    ("tools", "resources", "export_restore"),
)


def cores_of(
    kinds: Iterable[tuple[str, str, str]], hooks: Callable[[str], H], clock: Clock
) -> tuple[dict[str, H], dict[str, ParticipantCore]]:
    """One core per (server name, kind, mode) on ``clock``, each over its own ``hooks(kind)``:
    the hooks and the cores, by server name."""
    kinds = tuple(kinds)
    held = {name: hooks(kind) for name, kind, _ in kinds}
    cores = {
        name: ParticipantCore(server_name=name, kind=kind, mode=mode, hooks=held[name], clock=clock)
        for name, kind, mode in kinds
    }
    return held, cores


@dataclass
class Cluster:
    """Cores of several kinds, a non-participant judge, one coordinator."""

    clock: FakeClock = field(default_factory=lambda: FakeClock(START))
    kinds: tuple[tuple[str, str, str], ...] = DEFAULT_KINDS
    faults: FaultPlan = field(default_factory=FaultPlan)

    def __post_init__(self) -> None:
        self.hooks, self.cores = cores_of(self.kinds, JsonStateHooks, self.clock)
        servers: dict[str, ParticipantCore | None] = dict(self.cores)
        servers["judge"] = None
        self.inner = InProcessTransport(servers, token=TOKEN, faults=self.faults)
        self.transport = RecordingTransport(self.inner)
        self.coordinator = Coordinator(self.transport, clock=self.clock)

    def deadline(self, seconds: float = 60.0) -> float:
        return self.clock.now() + seconds

    async def run_everywhere(self, episode: EnvironmentEpisode, turn: int = 1) -> None:
        """Run one turn of ``episode`` on every participant; it parks there."""
        for name, hooks in self.hooks.items():
            await run_turn(self.cores[name], hooks, episode, turn)

    def phases(self) -> dict[str, str]:
        return {name: core.phase for name, core in self.cores.items()}

    def fresh(self) -> Cluster:
        """A new process of the same deployment, on the same clock."""
        return Cluster(clock=self.clock, kinds=self.kinds)
