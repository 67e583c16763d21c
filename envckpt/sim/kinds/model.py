"""The policy model as a participant: a scripted policy and its staging ledger.

The policy is deterministic: the action is a pure function of ``(seed,
rollout_id, turn, observation)``, never of the attempt, so a run restored as
attempt N+1 produces exactly what an uninterrupted run would have. Every
generation records a staging row key (``<capture key>/t<turn>``) in the
ledger; a restore installs the saved rows as the next attempt's, because a row
carried over from an earlier attempt belongs to both.

    model = PolicyModelServer(seed=7)
    reply = await model.generate({"episode": ep.to_wire(), "turn": 0, "observation": "hi"})
    reply == {"text": policy_action(7, ep.rollout_id, 0, "hi"), "staging_key": "r/t0"}
    await model.finish({"episode": ep.to_wire()})   # rows leave with the finished rollout

``model.core`` is the participant core a transport serves (kind ``model``).

With a ``staging_sink`` the model also ships each generation's token row to
the trainer's data plane while the rollout runs (NeMo RL's TransferQueue):
``generate`` awaits ``sink.stage(capture_key, staging_key, payload)`` after
admission and before recording the key, so a key in the ledger (and so in a
commit's ``staging_keys``) always names a row the data plane received. A
failed stage fails the generation and records nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from envckpt.clock import Clock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import SessionHooks
from envckpt.participant.model_calls import (
    DEFAULT_MODEL_CALLS,
    ModelCallPolicy,
    ModelCalls,
    deliver,
)
from envckpt.sim.kinds.common import (
    STAGING_KEY,
    check_fields,
    episode_of,
    require_keys,
    staging_key,
    text_of,
    turn_of,
)


def policy_action(seed: int, rollout_id: str, turn: int, observation: str) -> str:
    """The scripted policy: the same inputs always give the same action."""
    material = json.dumps([seed, rollout_id, turn, observation]).encode()
    return "act-" + hashlib.sha256(material).hexdigest()[:12]


def staging_payload(turn: int, text: str) -> str:
    """The token row of one generation: a pure function of the turn and its action."""
    return json.dumps({"turn": turn, "text": text}, sort_keys=True, separators=(",", ":"))


class StagingSink(Protocol):
    """Where generated token rows go while the rollout runs (the trainer's data plane)."""

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None: ...


@dataclass(frozen=True, slots=True)
class StagingState:
    """One episode's validated staging rows, ready to install."""

    staging_keys: tuple[str, ...]


def parse_staging_state(episode: EnvironmentEpisode, state: Mapping[str, Any]) -> StagingState:
    """Validate a saved ledger entry of ``episode``; raise ValueError if it is not one."""
    keys = require_keys(state, ("staging_keys",), "model state")["staging_keys"]
    if not isinstance(keys, list):
        raise ValueError("staging_keys must be a list")
    for key in keys:
        match = STAGING_KEY.match(key) if isinstance(key, str) else None
        if match is None:
            raise ValueError(f"malformed staging key {key!r}")
        owner = EnvironmentEpisode.from_capture_key(match["capture_key"])
        # Rows of this attempt or carried over from an earlier one; never another rollout's.
        if owner.rollout_id != episode.rollout_id or owner.attempt > episode.attempt:
            raise ValueError(f"staging key {key!r} does not belong to {episode.capture_key}")
    if len(set(keys)) != len(keys):
        raise ValueError("duplicate staging keys")
    return StagingState(tuple(keys))


class PolicyModelServer(SessionHooks[list[str]]):
    """A policy model server: ``generate`` and ``finish`` handlers, and its state hooks."""

    def __init__(
        self,
        *,
        server_name: str = "policy_model",
        seed: int = 0,
        instance: str | None = None,
        clock: Clock | None = None,
        latency: float = 0.0,
        staging_sink: StagingSink | None = None,
        model_calls: ModelCallPolicy = DEFAULT_MODEL_CALLS,
    ) -> None:
        self.seed = seed
        self.latency = latency
        self.staging_sink = staging_sink
        # The staging ledger: each episode's staging keys, in generation order.
        super().__init__()
        # How often a checkpoint cut generations, and how many were running then.
        self.admission_closes = 0
        self.in_flight_at_close = 0
        self.calls = ModelCalls(model_calls)
        self.core = ParticipantCore(
            server_name=server_name,
            kind="model",
            hooks=self,
            instance=instance,
            clock=clock,
            model_calls=self.calls,
        )

    # ------------------------------------------------------------ data plane

    async def generate(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """One generation: ``{episode, turn, observation}`` -> ``{text, staging_key}``."""
        body = check_fields(request, required=("episode", "turn", "observation"))
        episode, turn = episode_of(body), turn_of(body)
        observation = text_of(body, "observation")
        async with self.core.admit(episode):
            # Stands in for decoding (a prepare may refuse it); it also lets
            # control calls interleave.
            await self.calls.generate(episode, self._decode())
            if not self.core.fence.is_current(episode):
                # Retired while decoding: its rows must not reappear after retire freed them.
                raise ParticipantError("stale_attempt", f"{episode.capture_key} was retired")
            key = staging_key(episode, turn)
            text = policy_action(self.seed, episode.rollout_id, turn, observation)
            if self.staging_sink is not None:
                await self._stage(self.staging_sink, episode, key, staging_payload(turn, text))
            rows = self.states.setdefault(episode, [])
            if key not in rows:  # a discarded turn re-run by the same attempt rewrites its row
                rows.append(key)
            return {"text": text, "staging_key": key}

    async def _decode(self) -> None:
        await asyncio.sleep(self.latency)
        deliver()  # decoded: from here on the generation finishes

    async def _stage(
        self, sink: StagingSink, episode: EnvironmentEpisode, key: str, payload: str
    ) -> None:
        try:
            await sink.stage(episode.capture_key, key, payload)
        except Exception as error:
            # Even a sink's protocol error becomes checkpoint_error: the agent
            # must not read the data plane's refusal as this model's admission
            # or attempt state.
            raise ParticipantError(
                "checkpoint_error", f"staging row {key} failed: {type(error).__name__}: {error}"
            ) from error
        if not self.core.fence.is_current(episode):
            # Retired while staging: the data plane may hold an orphan row (the
            # trainer clears those), but the ledger must not get it back.
            raise ParticipantError("stale_attempt", f"{episode.capture_key} was retired")

    async def finish(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The rollout ended: hand its rows to the caller and stop tracking them.

        Not admitted: the agent finishes inside its own admitted step, possibly
        after this model already closed admission for a checkpoint.
        """
        episode = episode_of(check_fields(request, required=("episode",)))
        if not self.core.fence.is_current(episode):
            raise ParticipantError("stale_attempt", f"{episode.capture_key} is not current")
        rows = self.states.pop(episode, [])
        return {"released": episode.capture_key, "staging_keys": rows}

    def staging_ledger(self) -> dict[str, tuple[str, ...]]:
        """Capture key -> staging keys in generation order (inspection)."""
        return {episode.capture_key: tuple(rows) for episode, rows in self.states.items()}

    # ----------------------------------------------------------- state hooks
    # The rows live in the trainer's data plane, so releasing exported state
    # frees nothing here.

    state_type = list

    def save_state(self, state: list[str]) -> dict[str, Any]:
        return {"staging_keys": list(state)}

    def load_state(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> list[str]:
        return list(parse_staging_state(episode, state).staging_keys)

    async def close_admission(self) -> None:
        # A real server would abort in-flight decodes here; the scripted one
        # lets them finish (admit tracks them) and only records the cut.
        self.admission_closes += 1
        self.in_flight_at_close = len(self.core.fence.in_flight())

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        by_episode = {e.capture_key: sorted(self.states.get(e, ())) for e in exported}
        keys = sorted({key for rows in by_episode.values() for key in rows})
        return {"staging_keys": keys, "staging_keys_by_episode": by_episode}
