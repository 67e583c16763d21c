"""Picklable results of one instance's prepare and commit, and Gym's episodes made ours.

They cross the Ray actor boundary, so they hold plain tuples and dicts.
``GymCheckpointCommitSummary`` refuses staging-key attributions that do not
cover exactly the committed staging keys.

Wherever an episode comes in, Gym's own objects are accepted as the NeMo RL
seeds accept them: anything with ``rollout_id`` and ``attempt`` (nemo-gym's
``EpisodeId``), or their wire form, is converted to an ``EnvironmentEpisode``
first (``as_episode``), so it hashes, compares and sorts as ours do::

    summary = GymCheckpointPrepareSummary.from_result(gym_prepare_result)
    summary.restarts          # EnvironmentEpisode, sorted; blockers are tuples
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from types import MappingProxyType
from typing import Any, Protocol, TypeGuard

from envckpt.episodes import EnvironmentEpisode, excluding, sorted_episodes

# Gym's episode identity is the backend-neutral one the ledger uses.
GymCheckpointEpisode = EnvironmentEpisode


def as_episode(value: object) -> EnvironmentEpisode:
    """``value`` as an ``EnvironmentEpisode``: ours, an object with ``rollout_id`` and
    ``attempt`` (Gym's ``EpisodeId``), or ``{"rollout_id", "attempt"}``; else TypeError."""
    if isinstance(value, EnvironmentEpisode):
        return value
    if isinstance(value, Mapping):
        return EnvironmentEpisode.from_wire(value)
    rollout_id = getattr(value, "rollout_id", None)
    attempt = getattr(value, "attempt", None)
    if rollout_id is None or attempt is None:
        raise TypeError(f"not an episode (needs rollout_id and attempt): {value!r}")
    return EnvironmentEpisode(rollout_id, attempt)


def as_episodes(values: Iterable[object]) -> tuple[EnvironmentEpisode, ...]:
    """Each of ``values`` through ``as_episode``, order kept."""
    items = tuple(values)
    if _all_ours(items):
        return items
    return tuple(as_episode(value) for value in items)


def _all_ours(items: tuple[object, ...]) -> TypeGuard[tuple[EnvironmentEpisode, ...]]:
    """Whether every item is ours already (the usual case: the coordinator's own
    results), checked in C with no call per episode."""
    return all(map(isinstance, items, repeat(EnvironmentEpisode)))


class PrepareOutcome(Protocol):
    """What ``from_result`` reads: envckpt's ``PrepareResult``, or Gym's."""

    @property
    def prepared(self) -> bool: ...

    def blockers(self) -> Mapping[str, Iterable[str]]: ...

    def restarts(self) -> Iterable[Any]: ...


@dataclass(frozen=True)
class GymCheckpointCommitSummary:
    """What one instance's commit exported.

    ``participants`` are the servers that committed state: a restore must
    find each of them live. ``staging_keys_by_episode`` attributes each staged
    row to its episodes (a row carried over from an earlier attempt belongs to
    both). ``unowned_live_episodes`` are parked agent sessions that no agent's
    own /run drives: they can be neither restored nor finished while prepared.
    ``participant_seconds`` is how long each participant's commit call took
    (when the coordination measured it), ``participant_records`` how many
    records each one wrote.
    """

    exported_episodes: tuple[EnvironmentEpisode, ...]
    staging_keys: tuple[str, ...]
    participants: tuple[str, ...]
    staging_keys_by_episode: Mapping[EnvironmentEpisode, tuple[str, ...]] = field(
        default_factory=dict
    )
    unowned_live_episodes: tuple[EnvironmentEpisode, ...] = ()
    participant_seconds: Mapping[str, float] = field(default_factory=dict)
    participant_records: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Gym's episode objects become ours, so they hash and compare as ours do.
        object.__setattr__(self, "exported_episodes", as_episodes(self.exported_episodes))
        object.__setattr__(self, "unowned_live_episodes", as_episodes(self.unowned_live_episodes))
        by_episode = self.staging_keys_by_episode
        if _all_ours(tuple(by_episode)) and all(
            map(isinstance, by_episode.values(), repeat(tuple))
        ):
            # Ours already: a copy keeps the stored hashes (no call per episode).
            by_episode = dict(by_episode)
        else:
            by_episode = {as_episode(e): tuple(keys) for e, keys in by_episode.items()}
        object.__setattr__(self, "staging_keys_by_episode", by_episode)
        attributed = {key for keys in self.staging_keys_by_episode.values() for key in keys}
        committed = set(self.staging_keys)
        if attributed != committed:
            raise ValueError(
                "staging_keys_by_episode must attribute exactly the committed staging keys: "
                f"unattributed={sorted(committed - attributed)[:10]!r}, "
                f"unlisted={sorted(attributed - committed)[:10]!r}"
            )


@dataclass(frozen=True)
class GymCheckpointPrepareSummary:
    """Whether one instance prepared; blockers per server; the restarts.

    Restarts are in-flight episodes some participant cannot capture: a commit
    naming one is refused, and they start over after a crash.
    ``participant_seconds``: how long each contacted participant's prepare
    call took, when the coordination measured it.
    """

    prepared: bool
    blockers: dict[str, tuple[str, ...]]
    restarts: tuple[EnvironmentEpisode, ...]
    participant_seconds: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # As the seeds make them: blockers as tuples, restarts as sorted episodes.
        blockers = {str(server): tuple(keys) for server, keys in self.blockers.items()}
        object.__setattr__(self, "blockers", blockers)
        object.__setattr__(self, "restarts", sorted_episodes(as_episodes(self.restarts)))

    @classmethod
    def from_result(cls, result: PrepareOutcome) -> GymCheckpointPrepareSummary:
        """From envckpt's ``PrepareResult`` or Gym's: restarts converted to episodes first."""
        # Gym's own result has no timings. Concrete types only: an ABC isinstance
        # check costs more than the rest of this, once per instance per snapshot.
        seconds = getattr(result, "seconds", None)
        return cls(
            prepared=result.prepared,
            blockers={server: tuple(keys) for server, keys in result.blockers().items()},
            restarts=as_episodes(result.restarts()),
            participant_seconds=dict(seconds)
            if isinstance(seconds, dict | MappingProxyType)
            else {},
        )

    def continued(self, episodes: Iterable[object]) -> tuple[EnvironmentEpisode, ...]:
        """``episodes`` (ours or Gym's) minus the restarts: the commit scope."""
        return excluding(as_episodes(episodes), self.restarts)
