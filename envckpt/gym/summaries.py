"""Picklable results of one instance's prepare and commit.

They cross the Ray actor boundary, so they hold plain tuples and dicts.
``GymCheckpointCommitSummary`` refuses staging-key attributions that do not
cover exactly the committed staging keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from envckpt.coordination.types import PrepareResult
from envckpt.episodes import EnvironmentEpisode, excluding, sorted_episodes

# Gym's episode identity is the backend-neutral one the ledger uses.
GymCheckpointEpisode = EnvironmentEpisode


@dataclass(frozen=True)
class GymCheckpointCommitSummary:
    """What one instance's commit exported.

    ``participants`` are the servers that committed state: a restore must
    find each of them live. ``staging_keys_by_episode`` attributes each staged
    row to its episodes (a row carried over from an earlier attempt belongs to
    both). ``unowned_live_episodes`` are parked agent sessions that no agent's
    own /run drives: they can be neither restored nor finished while prepared.
    """

    exported_episodes: tuple[EnvironmentEpisode, ...]
    staging_keys: tuple[str, ...]
    participants: tuple[str, ...]
    staging_keys_by_episode: Mapping[EnvironmentEpisode, tuple[str, ...]] = field(
        default_factory=dict
    )
    unowned_live_episodes: tuple[EnvironmentEpisode, ...] = ()

    def __post_init__(self) -> None:
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
    """

    prepared: bool
    blockers: dict[str, tuple[str, ...]]
    restarts: tuple[EnvironmentEpisode, ...]

    @classmethod
    def from_result(cls, result: PrepareResult) -> GymCheckpointPrepareSummary:
        return cls(
            prepared=result.prepared,
            blockers=result.blockers(),
            restarts=sorted_episodes(result.restarts()),
        )

    def continued(self, episodes: tuple[EnvironmentEpisode, ...]) -> tuple[EnvironmentEpisode, ...]:
        """``episodes`` minus the restarts: the commit scope."""
        return excluding(episodes, self.restarts)
