"""A tool (resources) server as a participant, in each of the three modes.

Each ``call`` applies one side effect whose idempotency key is ``(rollout_id,
turn)`` and appends it to the audit log (a list, and a JSONL file if one is
given). What the server keeps per session depends on its mode:

* ``export_restore``: a ledger per session (a counter and the applied effects),
  exported at commit and installed at restore as attempt N+1, so a turn the
  restored agent re-runs re-applies only effects the saved state lacks.
* ``restart_only``: the same ledger, but nothing is saved; its sessions are
  reported as live so the core reports them as restarts.
* ``stateless``: holds nothing (and so cannot deduplicate).

    tool = ToolServer(mode="export_restore", seed=7, audit_path="audit.jsonl")
    reply = await tool.call({"episode": ep.to_wire(), "turn": 0, "action": "act-..."})
    reply == {"observation": ..., "value": ..., "applied": True, "effect": "r/t0"}
    await tool.finish({"episode": ep.to_wire()})

The observation is a pure function of ``(turn, action, value)`` so transcripts
are the same in every mode and across restores.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envckpt.clock import Clock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import SessionHooks
from envckpt.protocol import MODES, Mode
from envckpt.sim.kinds.common import (
    check_fields,
    checked_turn,
    episode_of,
    require_int,
    require_keys,
    text_of,
    turn_of,
)


def effect_value(seed: int, action: str) -> int:
    """What applying ``action`` adds to the session's counter (0..99)."""
    material = json.dumps([seed, action]).encode()
    return int(hashlib.sha256(material).hexdigest()[:8], 16) % 100


def tool_observation(turn: int, action: str, value: int) -> str:
    """What the tool shows the agent after ``action`` at ``turn``."""
    return f"obs{turn}:{action[-6:]}+{value}"


def effect_key(rollout_id: str, turn: int) -> str:
    """The idempotency key of one effect: one per rollout and turn, whatever the attempt."""
    return f"{rollout_id}/t{turn}"


@dataclass(frozen=True, slots=True)
class Effect:
    key: str
    turn: int
    value: int


@dataclass(slots=True)
class ToolSession:
    """The tool state of one episode: a counter and the effects applied to it."""

    counter: int = 0
    effects: list[Effect] = field(default_factory=list)

    def has(self, key: str) -> bool:
        return any(effect.key == key for effect in self.effects)

    def apply(self, effect: Effect) -> None:
        self.effects.append(effect)
        self.counter += effect.value

    def to_state(self) -> dict[str, Any]:
        return {
            "counter": self.counter,
            "effects": [{"key": e.key, "turn": e.turn, "value": e.value} for e in self.effects],
        }


def parse_tool_state(episode: EnvironmentEpisode, state: Mapping[str, Any]) -> ToolSession:
    """Validate a saved tool session of ``episode``; raise ValueError if it is not one."""
    body = require_keys(state, ("counter", "effects"), "tool state")
    counter = require_int(body["counter"], "counter")
    if not isinstance(body["effects"], list):
        raise ValueError("effects must be a list")
    session = ToolSession()
    for raw in body["effects"]:
        item = require_keys(raw, ("key", "turn", "value"), "effect")
        turn = checked_turn(item["turn"])
        value = require_int(item["value"], "effect value")
        if item["key"] != effect_key(episode.rollout_id, turn):
            raise ValueError(f"effect key {item['key']!r} does not match turn {turn}")
        if session.has(item["key"]):
            raise ValueError(f"effect {item['key']!r} applied twice")
        session.apply(Effect(item["key"], turn, value))
    if session.counter != counter:
        raise ValueError(f"counter {counter} is not the sum of its effects ({session.counter})")
    return session


class ToolServer(SessionHooks[ToolSession]):
    """A resources server: ``call`` and ``finish`` handlers, and its state hooks."""

    def __init__(
        self,
        *,
        server_name: str = "tool_resources",
        mode: str = "export_restore",
        seed: int = 0,
        instance: str | None = None,
        clock: Clock | None = None,
        latency: float = 0.0,
        audit_path: str | Path | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown participant mode {mode!r}")
        self.mode = mode
        self.seed = seed
        self.latency = latency
        self.audit: list[dict[str, Any]] = []
        # Names this process in every effect it applies, so an audit log that
        # outlives crashes can tell which process's application a result kept.
        self.process_id = uuid.uuid4().hex[:12]
        self.audit_path = None if audit_path is None else Path(audit_path)
        super().__init__()
        self.core = ParticipantCore(
            server_name=server_name,
            kind="resources",
            hooks=self,
            mode=mode,
            instance=instance,
            clock=clock,
        )

    # ------------------------------------------------------------ data plane

    async def call(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one turn's effect: ``{episode, turn, action}`` -> ``{observation, ...}``."""
        body = check_fields(request, required=("episode", "turn", "action"))
        episode, turn, action = episode_of(body), turn_of(body), text_of(body, "action")
        async with self.core.admit(episode):
            await asyncio.sleep(self.latency)
            if not self.core.fence.is_current(episode):
                raise ParticipantError("stale_attempt", f"{episode.capture_key} was retired")
            value = effect_value(self.seed, action)
            effect = Effect(effect_key(episode.rollout_id, turn), turn, value)
            application = f"{self.process_id}/{len(self.audit)}"
            applied = self._apply(episode, effect, application)
            return {
                "observation": tool_observation(turn, action, value),
                "value": value,
                "applied": applied,
                "effect": effect.key,
                "application": application,
            }

    def _apply(self, episode: EnvironmentEpisode, effect: Effect, application: str) -> bool:
        if self.mode != "stateless":
            session = self.states.setdefault(episode, ToolSession())
            if session.has(effect.key):
                return False  # already applied, by this attempt or a saved earlier one
            session.apply(effect)
        entry = {
            "rollout_id": episode.rollout_id,
            "attempt": episode.attempt,
            "turn": effect.turn,
            "effect": effect.key,
            "value": effect.value,
            "application": application,
        }
        self.audit.append(entry)
        if self.audit_path is not None:
            # One line per effect, flushed at once, so a killed process loses none.
            with self.audit_path.open("a", encoding="utf-8") as stream:
                stream.write(json.dumps(entry, sort_keys=True) + "\n")
                stream.flush()
        return True

    async def finish(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The rollout ended: drop its session. Not admitted, like the model's finish."""
        episode = episode_of(check_fields(request, required=("episode",)))
        if not self.core.fence.is_current(episode):
            raise ParticipantError("stale_attempt", f"{episode.capture_key} is not current")
        session = self.states.pop(episode, None)
        return {
            "released": episode.capture_key,
            "counter": None if session is None else session.counter,
        }

    def sessions(self) -> dict[str, dict[str, Any]]:
        """Capture key -> ``{counter, effects}`` of every held session (inspection)."""
        return {episode.capture_key: s.to_state() for episode, s in self.states.items()}

    # ----------------------------------------------------------- state hooks
    # restart_only and stateless tools save nothing, so they export nothing
    # and have nothing to restore.

    state_type = ToolSession

    def save_state(self, state: ToolSession) -> dict[str, Any]:
        return state.to_state()

    def load_state(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> ToolSession:
        if self.mode != Mode.EXPORT_RESTORE:
            raise ValueError(f"a {self.mode} tool saves no state, so it has none to restore")
        return parse_tool_state(episode, state)

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        if self.mode != Mode.EXPORT_RESTORE:
            return iter(())
        return super().export(scope)
