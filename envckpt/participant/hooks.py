"""What a participant kind plugs into the participant core.

The core (``core.py``) owns the protocol: phases, admission, leases, fencing,
replays, retire marks. A kind owns only its state, through these hooks:

    live_episodes()          what it holds state for (restart_only reports these)
    close_admission()        e.g. the model cuts generations; may raise
    open_admission()
    export(scope)            (episode, JSON state) for each held episode in scope
    commit_extras(exported)  kind-specific reply fields (run_episode_ids, staging keys)
    validate(episode, state) parse one saved state; raise ValueError if invalid
    install(restored)        install validated states as the next attempts
    retire(episodes)         free the state of these attempts
    forget(rollout_ids)      drop per-rollout bookkeeping
    release_exported()       commit with stop=True: free what exports hold outside

The core never calls a hook while a transition is half-done: it does the
hook's I/O first, then fires the phase machine.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from envckpt.episodes import EnvironmentEpisode, retired_by

S = TypeVar("S")


class StateHooks(Protocol):
    """The kind-specific state of one participant."""

    def live_episodes(self) -> frozenset[EnvironmentEpisode]: ...

    async def close_admission(self) -> None: ...

    async def open_admission(self) -> None: ...

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]: ...

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]: ...

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> object: ...

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None: ...

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None: ...

    def forget(self, rollout_ids: Iterable[str]) -> None: ...

    def release_exported(self) -> None: ...


class HookDefaults:
    """The hooks' usual meaning, for a kind with nothing of its own to do there.

    Admission has nothing of its own to close or open, a commit reply gets no
    fields of the kind's, forget and release hold nothing. A kind overrides
    what it does do (the model counts its admission closes).
    """

    async def close_admission(self) -> None:
        return None

    async def open_admission(self) -> None:
        return None

    def commit_extras(self, exported: tuple[EnvironmentEpisode, ...]) -> dict[str, Any]:
        return {}

    def forget(self, rollout_ids: Iterable[str]) -> None:
        return None

    def release_exported(self) -> None:
        return None


class SessionHooks(HookDefaults, Generic[S]):
    """``StateHooks`` of a kind that holds one state object per episode.

    A kind says how one state is saved and read back (``save_state``,
    ``load_state``, and ``state_type``, the type ``load_state`` returns); the
    rest has the usual meaning: admission has nothing of its own to close,
    export is every held episode in scope, retire drops the sessions of the
    retired attempts and every earlier one, forget and release hold nothing.
    Override a hook to add to it (an agent cancels its runs before retiring).

        class Counters(SessionHooks[int]):
            state_type = int
            def save_state(self, state): return {"count": state}
            def load_state(self, episode, state): return int(state["count"])
    """

    state_type: ClassVar[type[Any]] = object

    def __init__(self) -> None:
        self.states: dict[EnvironmentEpisode, S] = {}

    def save_state(self, state: S) -> dict[str, Any]:
        """One episode's state as a JSON object (its record)."""
        raise NotImplementedError

    def load_state(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> S:
        """Parse one saved state; raise ValueError if it is not valid."""
        raise NotImplementedError

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self.states)

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        for episode in sorted(scope & self.states.keys()):
            yield episode, self.save_state(self.states[episode])

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> object:
        return self.load_state(episode, state)

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        # Checked before anything is installed: all or nothing.
        for _, state in restored:
            if not isinstance(state, self.state_type):
                raise TypeError(
                    f"expected a validated {self.state_type.__name__}, got {type(state).__name__}"
                )
        for episode, state in restored:
            self.states[episode] = state  # type: ignore[assignment]

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        for held in [episode for episode in self.states if retired_by(episode, episodes)]:
            del self.states[held]


class NoState(HookDefaults):
    """Hooks of a participant that holds nothing (stateless or restart_only kinds).

    ``live`` may be filled by the server to report which episodes it touches,
    so a restart_only participant can name its restarts.
    """

    def __init__(self) -> None:
        self.live: set[EnvironmentEpisode] = set()

    def live_episodes(self) -> frozenset[EnvironmentEpisode]:
        return frozenset(self.live)

    def export(
        self, scope: frozenset[EnvironmentEpisode]
    ) -> Iterator[tuple[EnvironmentEpisode, dict[str, Any]]]:
        return iter(())

    def validate(self, episode: EnvironmentEpisode, state: Mapping[str, Any]) -> object:
        raise ValueError("this participant saves no state, so it has none to restore")

    def install(self, restored: Sequence[tuple[EnvironmentEpisode, object]]) -> None:
        return None

    async def retire(self, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        # As for a session kind: the retired attempts and every earlier one.
        self.live.difference_update([e for e in self.live if retired_by(e, episodes)])
