"""Where the facade learns which rollouts to commit and how to check a snapshot.

The trainer's recovery ledger (``envckpt.trainer.ledger``) implements
``RolloutInventory``; ``InMemoryInventory`` is a small complete implementation
for tests, the property tests and the in-process demo.

Call order inside one snapshot::

    inventory.dropped_attempts(instance)      # retired before prepare
    inventory.retired(instance, episodes)     # after the retire succeeded
    inventory.inventory(instance)             # commit scope (minus restarts)
    await inventory.verify_against_cut(cut, contents)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from envckpt.episodes import EnvironmentEpisode, sorted_episodes
from envckpt.errors import GymCheckpointUnavailable, ProtocolViolation
from envckpt.interfaces import MutationCut


@dataclass(frozen=True, slots=True)
class SnapshotContents:
    """What one snapshot captured, per instance id."""

    checkpoint_id: str
    exported: Mapping[str, tuple[EnvironmentEpisode, ...]]
    restarts: Mapping[str, tuple[EnvironmentEpisode, ...]]
    staging_keys: Mapping[str, tuple[str, ...]]

    def all_staging_keys(self) -> frozenset[str]:
        return frozenset(key for keys in self.staging_keys.values() for key in keys)


class RolloutInventory(Protocol):
    """The trainer's view of unfinished rollouts, per Gym instance."""

    def inventory(self, instance_id: str) -> tuple[EnvironmentEpisode, ...]:
        """Episodes the instance must export: dispatched current attempts, and
        restored-but-not-yet-resent rollouts named by their replacement attempt."""
        ...

    def dropped_attempts(self, instance_id: str) -> tuple[EnvironmentEpisode, ...]:
        """Attempts the trainer gave up on that the instance must retire first."""
        ...

    def retired(self, instance_id: str, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        """The instance retired ``episodes``; stop reporting them as dropped."""
        ...

    async def verify_against_cut(self, cut: MutationCut, contents: SnapshotContents) -> None:
        """Under the cut, raise unless ``contents`` agrees with the trainer's state.

        Disagreement that a retry can fix (a reply still on the wire) raises
        ``GymCheckpointUnavailable``; a contradiction raises ``ProtocolViolation``.
        """
        ...


@dataclass
class InMemoryInventory:
    """A plain in-memory inventory: live episodes and dropped attempts per instance.

    ``staging_rows`` stands in for the data plane: the staging keys that exist.
    ``None`` means the data plane is not checked.
    """

    live: dict[str, set[EnvironmentEpisode]] = field(default_factory=dict)
    dropped: dict[str, set[EnvironmentEpisode]] = field(default_factory=dict)
    staging_rows: set[str] | None = None

    def add(self, instance_id: str, episode: EnvironmentEpisode) -> None:
        self.live.setdefault(instance_id, set()).add(episode)

    def finish(self, instance_id: str, episode: EnvironmentEpisode) -> None:
        self.live.get(instance_id, set()).discard(episode)

    def drop(self, instance_id: str, episode: EnvironmentEpisode) -> None:
        self.finish(instance_id, episode)
        self.dropped.setdefault(instance_id, set()).add(episode)

    # sorted_episodes, not sorted(): the dataclass's __lt__ is a Python call per
    # comparison, several hundred per instance and snapshot.
    def inventory(self, instance_id: str) -> tuple[EnvironmentEpisode, ...]:
        return sorted_episodes(self.live.get(instance_id, ()))

    def dropped_attempts(self, instance_id: str) -> tuple[EnvironmentEpisode, ...]:
        return sorted_episodes(self.dropped.get(instance_id, ()))

    def retired(self, instance_id: str, episodes: tuple[EnvironmentEpisode, ...]) -> None:
        self.dropped.get(instance_id, set()).difference_update(episodes)

    async def verify_against_cut(self, cut: MutationCut, contents: SnapshotContents) -> None:
        cut.require_live()
        verify_contents(
            contents,
            live=self.live,
            staging_rows=self.staging_rows,
        )


def verify_contents(
    contents: SnapshotContents,
    *,
    live: Mapping[str, Iterable[EnvironmentEpisode]],
    staging_rows: Iterable[str] | None,
) -> None:
    """The three checks of a snapshot against the trainer's live state.

    1. Every exported episode is still a live current attempt on the same instance.
    2. Every live episode is exported or reported as a restart (else a reply is
       still on the wire: retryable).
    3. Every kept staging key exists in the data plane.
    """
    owner: dict[EnvironmentEpisode, str] = {
        episode: instance for instance, episodes in live.items() for episode in episodes
    }
    for instance, exported in contents.exported.items():
        for episode in exported:
            actual = owner.get(episode)
            if actual is None:
                raise ProtocolViolation(
                    f"snapshot {contents.checkpoint_id}: {instance} exported "
                    f"{episode.capture_key}, which is no longer a live attempt in the ledger"
                )
            if actual != instance:
                raise ProtocolViolation(
                    f"snapshot {contents.checkpoint_id}: {instance} exported "
                    f"{episode.capture_key}, which the ledger places on {actual}"
                )
    for instance, episodes in live.items():
        covered = set(contents.exported.get(instance, ())) | set(
            contents.restarts.get(instance, ())
        )
        missing = sorted(episode.capture_key for episode in set(episodes) - covered)
        if missing:
            raise GymCheckpointUnavailable(
                f"snapshot {contents.checkpoint_id}: {instance} neither exported nor restarted "
                f"{missing[:10]} (a reply may still be on the wire); retry the snapshot",
                operation="check_against_cut",
                failures={instance: ", ".join(missing[:10])},
            )
    if staging_rows is not None:
        absent = sorted(contents.all_staging_keys() - set(staging_rows))
        if absent:
            raise ProtocolViolation(
                f"snapshot {contents.checkpoint_id}: staging keys missing from the data plane: "
                f"{absent[:10]}"
            )
