"""envckpt's participant for the benchmarks: a ``ParticipantCore`` on a FastAPI app.

The hooks hold the same parked states as the floor (``bench/states.py``),
keyed by episode; the routes are envckpt's own ``mount_participant``, lease
watchdog included, confined to a checkpoint root, on envckpt's ``new_app``:
exactly as ``python -m envckpt.sim.server`` serves a participant.

    app, hooks = envckpt_app(
        server_name="policy", kind="model", token=token, states=states, checkpoint_root=root
    )
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from bench.states import commit_extras
from envckpt.episodes import EnvironmentEpisode, capture_keys
from envckpt.http.apps import new_app
from envckpt.http.routes import mount_participant
from envckpt.participant.confinement import RequestBounds
from envckpt.participant.core import ParticipantCore


class ParkedStates:
    """``StateHooks`` over parked states (attempt 0), held by episode as a Gym kind holds them.

    ``install`` counts what it is given and keeps nothing, so a restore's
    memory is the core's own, not the installed state's.
    """

    def __init__(self, states: Mapping[str, dict[str, Any]], *, kind: str) -> None:
        self.kind = kind
        self.installed = 0
        self.states: dict[EnvironmentEpisode, dict[str, Any]] = {}
        self.replace(states)

    def replace(self, states: Mapping[str, dict[str, Any]]) -> None:
        """Hold ``states`` (rollout id -> state) instead, in rollout id order."""
        self.states = {EnvironmentEpisode(rid, 0): states[rid] for rid in sorted(states)}

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self.states)

    async def close_admission(self) -> None:
        return None

    async def open_admission(self) -> None:
        return None

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        # Held in episode order already: filtering keeps it.
        for episode, state in self.states.items():
            if episode in scope:
                yield episode, state

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        return commit_extras(self.kind, capture_keys(exported))

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> object:
        if not isinstance(state.get("messages"), list):
            raise ValueError(f"{episode.capture_key}: no messages")
        return state

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        self.installed += len(restored)

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        return None

    def forget(self, rollout_ids: Iterable[str]) -> None:
        return None

    def release_exported(self) -> None:
        return None


def envckpt_core(
    *, server_name: str, kind: str, states: Mapping[str, dict[str, Any]]
) -> ParticipantCore:
    """A participant core whose hooks hold ``states``."""
    hooks = ParkedStates(states, kind=kind)
    return ParticipantCore(server_name=server_name, kind=kind, hooks=hooks, instance=server_name)


def envckpt_app(
    *,
    server_name: str,
    kind: str,
    token: str,
    states: Mapping[str, dict[str, Any]],
    checkpoint_root: Path,
) -> tuple[FastAPI, ParkedStates]:
    """A FastAPI app with envckpt's control routes over a core holding ``states``, confined
    to ``checkpoint_root`` as ``envckpt.sim.gym_servers`` confines its participants; its hooks."""
    app = new_app()
    core = envckpt_core(server_name=server_name, kind=kind, states=states)
    core.bounds = RequestBounds.under(checkpoint_root)
    mount_participant(app, core, token=token)
    assert isinstance(core.hooks, ParkedStates)
    return app, core.hooks
