"""The agent as a participant: multi-turn sessions driven by its own ``run``.

``run`` is the agent's /run episode. Each step runs inside ``core.admit``: one
turn calls the policy model, then the tool, and only then appends the turn to
the session, so a refused call leaves the session at its previous boundary.
After the last turn one more step tells the model and the tool that the
rollout is finished. When a step is refused with ``admission_closed`` (the
model closes before the agents, per the staged prepare order, or refuses a
generation already decoding for a checkpoint; or this agent itself is
closed) the run **parks**: it waits until this server reopens and retries
the step, so a refused generation is asked for again from the same turn.
``stale_attempt`` ends the run with that error.

    agent = AgentServer(model=InProcessModelClient(model), tools=InProcessToolClient(tool))
    result = await agent.run({"episode": ep.to_wire(), "task": {"prompt": "p", "turns": 3}})
    result["transcript"] == ["user: p", "assistant: act-...", "tool: obs0:...", ...]

A restore installs each saved session as attempt N+1; ``run`` of that attempt
continues from the saved turn. Every session here was started by this agent's
own ``run``, so commit names all exported sessions in ``run_episode_ids``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from envckpt.clock import Clock
from envckpt.episodes import EnvironmentEpisode, capture_keys, retired_by
from envckpt.errors import ParticipantError
from envckpt.participant.agent_steps import (
    cancel_and_wait,
    run_own_task,
    step_until_done,
    wait_until_open,
)
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import SessionHooks
from envckpt.sim.kinds.common import (
    check_fields,
    episode_of,
    invalid,
    parse_task,
    require_int,
    require_keys,
)

DEFAULT_PARK_POLL_SECONDS = 0.005
TURN_KEYS = (
    "turn",
    "attempt",
    "observation",
    "action",
    "tool_observation",
    "value",
    "application",
)


class ModelClient(Protocol):
    """How the agent reaches the policy model (in-process here, HTTP elsewhere)."""

    async def generate(self, request: dict[str, Any]) -> dict[str, Any]: ...

    async def finish(self, request: dict[str, Any]) -> dict[str, Any]: ...


class ToolClient(Protocol):
    """How the agent reaches the tool (resources) server."""

    async def call(self, request: dict[str, Any]) -> dict[str, Any]: ...

    async def finish(self, request: dict[str, Any]) -> dict[str, Any]: ...


def _through_json(value: dict[str, Any]) -> dict[str, Any]:
    # Like a wire hop: neither side can keep a reference into the other's state.
    copied: dict[str, Any] = json.loads(json.dumps(value))
    return copied


class _Finishing(Protocol):
    async def finish(self, request: dict[str, Any]) -> dict[str, Any]: ...


ServerT = TypeVar("ServerT", bound=_Finishing)


class _InProcessClient(Generic[ServerT]):
    """A server object called directly, bodies copied as JSON both ways."""

    def __init__(self, server: ServerT) -> None:
        self._server = server

    async def finish(self, request: dict[str, Any]) -> dict[str, Any]:
        return _through_json(await self._server.finish(_through_json(request)))


class InProcessModelClient(_InProcessClient[ModelClient]):
    """``ModelClient`` calling a model server object directly, bodies copied as JSON."""

    async def generate(self, request: dict[str, Any]) -> dict[str, Any]:
        return _through_json(await self._server.generate(_through_json(request)))


class InProcessToolClient(_InProcessClient[ToolClient]):
    """``ToolClient`` calling a tool server object directly, bodies copied as JSON."""

    async def call(self, request: dict[str, Any]) -> dict[str, Any]:
        return _through_json(await self._server.call(_through_json(request)))


def opening_line(prompt: str) -> str:
    return f"user: {prompt}"


def turn_lines(action: str, tool_observation: str) -> list[str]:
    return [f"assistant: {action}", f"tool: {tool_observation}"]


@dataclass(slots=True)
class AgentSession:
    """One episode's conversation: its task, the turns so far, the transcript."""

    task: dict[str, Any]
    turns: list[dict[str, Any]]
    transcript: list[str]

    @classmethod
    def start(cls, task: dict[str, Any]) -> AgentSession:
        return cls(task, [], [opening_line(task["prompt"])])

    @property
    def done(self) -> bool:
        budget: int = self.task["turns"]
        return len(self.turns) >= budget

    def next_observation(self) -> str:
        observation: str = self.turns[-1]["tool_observation"] if self.turns else self.task["prompt"]
        return observation

    def append(self, turn: dict[str, Any]) -> None:
        self.turns.append(turn)
        self.transcript.extend(turn_lines(turn["action"], turn["tool_observation"]))

    def to_state(self) -> dict[str, Any]:
        return _through_json(
            {"task": self.task, "turns": self.turns, "transcript": self.transcript}
        )


def parse_session(episode: EnvironmentEpisode, state: Mapping[str, Any]) -> AgentSession:
    """Validate a saved session of ``episode``; raise ValueError if it is not one.

    Rebuilds the session turn by turn, so the observation chain, the turn
    numbers, the attempts and the transcript must all agree.
    """
    body = require_keys(state, ("task", "turns", "transcript"), "agent state")
    session = AgentSession.start(parse_task(body["task"]))
    turns, transcript = body["turns"], body["transcript"]
    if not isinstance(turns, list) or not isinstance(transcript, list):
        raise ValueError("turns and transcript must be lists")
    if len(turns) > session.task["turns"]:
        raise ValueError(f"{len(turns)} turns exceed the task's {session.task['turns']}")
    last_attempt = 0
    for index, raw in enumerate(turns):
        turn = dict(require_keys(raw, TURN_KEYS, f"turn {index}"))
        if turn["turn"] != index or isinstance(turn["turn"], bool):
            raise ValueError(f"turn {index} is numbered {turn['turn']!r}")
        attempt = require_int(turn["attempt"], f"turn {index} attempt")
        if not last_attempt <= attempt <= episode.attempt:
            raise ValueError(f"turn {index} has attempt {attempt} out of order")
        last_attempt = attempt
        require_int(turn["value"], f"turn {index} value")
        for name in ("observation", "action", "tool_observation", "application"):
            if not isinstance(turn[name], str):
                raise ValueError(f"turn {index} {name} must be a string")
        if turn["observation"] != session.next_observation():
            raise ValueError(f"turn {index} does not continue from the previous observation")
        session.append(turn)
    if transcript != session.transcript:
        raise ValueError("transcript does not match the turns")
    return session


class AgentServer(SessionHooks[AgentSession]):
    """An agent server: the ``run`` handler, and its state hooks."""

    def __init__(
        self,
        *,
        model: ModelClient,
        tools: ToolClient,
        server_name: str = "simple_agent",
        instance: str | None = None,
        clock: Clock | None = None,
        park_poll_seconds: float = DEFAULT_PARK_POLL_SECONDS,
    ) -> None:
        self._model = model
        self._tools = tools
        self.park_poll_seconds = park_poll_seconds
        super().__init__()
        self._runs: dict[EnvironmentEpisode, asyncio.Task[dict[str, Any]]] = {}
        self._parked: set[EnvironmentEpisode] = set()
        self.parks = 0  # how often a step was refused and its run parked
        self.model_calls_refused = 0  # ... of them because the model refused a running call
        self.core = ParticipantCore(
            server_name=server_name, kind="agent", hooks=self, instance=instance, clock=clock
        )

    # ------------------------------------------------------------ data plane

    async def run(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Run (or continue) one episode to its end: ``{episode, task}`` -> result."""
        body = check_fields(request, required=("episode", "task"))
        episode = episode_of(body)
        try:
            task = parse_task(body["task"])
        except ValueError as error:
            raise invalid(f"task: {error}") from None
        session = self.states.get(episode)
        if session is not None and session.task != task:
            raise invalid(f"{episode.capture_key} holds a session of another task")
        if episode in self._runs:
            raise invalid(f"{episode.capture_key} is already running")
        start_turn = 0 if session is None else len(session.turns)
        work = step_until_done(
            lambda: self._step(episode, task, start_turn),
            park=lambda: self._park(episode),
            on_refused_call=self._count_refused,
        )
        return await run_own_task(episode, work, running=self._runs, fence=self.core.fence)

    def _count_refused(self) -> None:
        self.model_calls_refused += 1

    async def _step(
        self, episode: EnvironmentEpisode, task: dict[str, Any], start_turn: int
    ) -> dict[str, Any] | None:
        """One turn, or the closing step; the result once the episode is finished."""
        wire = episode.to_wire()
        async with self.core.admit(episode):
            session = self.states.get(episode)
            if session is None:
                session = self.states[episode] = AgentSession.start(task)
            if session.done:
                return await self._finish(episode, session, start_turn)
            turn, observation = len(session.turns), session.next_observation()
            generated = await self._model.generate(
                {"episode": wire, "turn": turn, "observation": observation}
            )
            action = _reply_text(generated, "text")
            effect = await self._tools.call({"episode": wire, "turn": turn, "action": action})
            session.append(
                {
                    "turn": turn,
                    "attempt": episode.attempt,
                    "observation": observation,
                    "action": action,
                    "tool_observation": _reply_text(effect, "observation"),
                    "value": _reply_value(effect),
                    # Which application of the effect this turn kept (audit).
                    "application": _reply_text(effect, "application"),
                }
            )
            return None

    async def _finish(
        self, episode: EnvironmentEpisode, session: AgentSession, start_turn: int
    ) -> dict[str, Any]:
        released = await self._model.finish({"episode": episode.to_wire()})
        await self._tools.finish({"episode": episode.to_wire()})
        del self.states[episode]
        return {
            "episode": episode.to_wire(),
            "capture_key": episode.capture_key,
            "status": "completed",
            "resumed_from_turn": start_turn,
            "transcript": list(session.transcript),
            "turns": [dict(turn) for turn in session.turns],
            "total": sum(turn["value"] for turn in session.turns),
            "staging_keys": released.get("staging_keys", []),
        }

    async def _park(self, episode: EnvironmentEpisode) -> None:
        """Wait until this server is open again (polled every ``park_poll_seconds``)."""
        self.parks += 1
        self._parked.add(episode)
        try:
            poll = self.park_poll_seconds
            await wait_until_open(self.core, first_seconds=poll, max_seconds=poll)
        finally:
            self._parked.discard(episode)

    async def shutdown(self) -> None:
        """Stop every running ``run`` as if the process died (their callers see cancellation)."""
        await cancel_and_wait(self._runs.values())

    # ------------------------------------------------------------ inspection

    def sessions(self) -> dict[str, dict[str, Any]]:
        """Capture key -> ``{task, turns, transcript}`` of every held session."""
        return {episode.capture_key: s.to_state() for episode, s in self.states.items()}

    def running(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._runs)

    def parked(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self._parked)

    # ----------------------------------------------------------- state hooks
    # Closing admission needs nothing here: running steps finish at their
    # boundary (admit tracks them) and new steps park themselves.

    state_type = AgentSession

    def save_state(self, state: AgentSession) -> dict[str, Any]:
        return state.to_state()

    def load_state(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> AgentSession:
        return parse_session(episode, state)

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        # Sessions only ever start in this agent's own run.
        return {"run_episode_ids": capture_keys(exported)}

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        await cancel_and_wait(task for e, task in self._runs.items() if retired_by(e, episodes))
        await super().retire(episodes)


def _reply_text(reply: Mapping[str, Any], name: str) -> str:
    value = reply.get(name)
    if not isinstance(value, str):
        raise ParticipantError("checkpoint_error", f"callee reply lacks a string {name!r}")
    return value


def _reply_value(reply: Mapping[str, Any]) -> int:
    value = reply.get("value")
    if not isinstance(value, int) or isinstance(value, bool):
        raise ParticipantError("checkpoint_error", "tool reply lacks an integer 'value'")
    return value
