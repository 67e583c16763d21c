"""``gym_checkpoint.json``: what one rollout snapshot holds, per Gym instance.

Written atomically into the snapshot directory after every instance
committed; read first at restore. A checksum over the canonical body catches
a damaged file; schema, kind and every field's type are checked on read.

    write_manifest(directory, manifest)
    manifest = read_manifest(directory)          # CorruptCheckpoint if bad

The reader caps the file (``MAX_MANIFEST_BYTES``, refused before it is read)
and its entries (``MAX_MANIFEST_ENTRIES``: instances, episodes, restarts,
staging keys and participants together) with ``ManifestTooLarge``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt import checksummed
from envckpt.episodes import EnvironmentEpisode, sorted_episodes
from envckpt.errors import CorruptCheckpoint
from envckpt.fsutil import atomic_write_bytes
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.gym.summaries import GymCheckpointCommitSummary
from envckpt.ids import validate_checkpoint_id

MANIFEST_NAME = "gym_checkpoint.json"
MANIFEST_KIND = "envckpt.gym_checkpoint"
SCHEMA_VERSION = 1
# A staging key per turn of every exported episode dominates: 2,048 instances
# holding 8 episodes of 50 turns each are 820k keys, about 30 MB. Twice the
# entries, and a size that lists in a few seconds, bound a hostile file.
MAX_MANIFEST_BYTES = 48 * 1024 * 1024
MAX_MANIFEST_ENTRIES = 2_000_000
_WHAT = "Gym snapshot manifest"


@dataclass(frozen=True, slots=True)
class InstanceRecord:
    """One instance's part of a snapshot."""

    episodes: tuple[EnvironmentEpisode, ...]
    staging_keys: tuple[str, ...]
    participants: tuple[str, ...]
    restarts: tuple[EnvironmentEpisode, ...] = ()

    @classmethod
    def from_summary(
        cls, summary: GymCheckpointCommitSummary, restarts: tuple[EnvironmentEpisode, ...]
    ) -> InstanceRecord:
        exported = set(summary.exported_episodes)
        # Only rows of episodes actually exported are kept; the rest are orphans.
        kept = sorted(
            {
                key
                for episode, keys in summary.staging_keys_by_episode.items()
                if episode in exported
                for key in keys
            }
        )
        return cls(
            episodes=sorted_episodes(exported),
            staging_keys=tuple(kept),
            participants=summary.participants,
            restarts=sorted_episodes(restarts),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "episodes": [episode.to_wire() for episode in self.episodes],
            "staging_keys": list(self.staging_keys),
            "participants": list(self.participants),
            "restarts": [episode.to_wire() for episode in self.restarts],
        }


@dataclass(frozen=True, slots=True)
class GymSnapshotManifest:
    checkpoint_id: str
    instances: Mapping[str, InstanceRecord]

    def body(self) -> dict[str, Any]:
        return {
            "checkpoint_id": self.checkpoint_id,
            "instances": {iid: rec.to_json() for iid, rec in sorted(self.instances.items())},
        }

    def continued_attempts(self) -> frozenset[tuple[str, str, int]]:
        return frozenset(
            (iid, episode.rollout_id, episode.attempt)
            for iid, record in self.instances.items()
            for episode in record.episodes
        )

    def staging_keys(self) -> frozenset[str]:
        return frozenset(key for rec in self.instances.values() for key in rec.staging_keys)


def write_manifest(directory: Path, manifest: GymSnapshotManifest) -> int:
    """Write ``gym_checkpoint.json`` atomically; return the bytes written.

    ``ManifestTooLarge`` for a manifest over either cap: nothing is written.
    """
    path = directory / MANIFEST_NAME
    body = manifest.body()
    # What no reader would take is refused here, failing the snapshot, not the restore.
    checksummed.check_entries(
        _entries(body["instances"]), limit=MAX_MANIFEST_ENTRIES, what=_WHAT, path=path
    )
    data = checksummed.encode(
        kind=MANIFEST_KIND, schema_version=SCHEMA_VERSION, body=body, indent=1
    )
    checksummed.check_size(len(data), limit=MAX_MANIFEST_BYTES, what=_WHAT, path=path)
    atomic_write_bytes(path, data)
    return len(data)


def read_manifest(
    directory: Path,
    *,
    max_bytes: int = MAX_MANIFEST_BYTES,
    max_entries: int = MAX_MANIFEST_ENTRIES,
) -> GymSnapshotManifest:
    """Read and validate ``gym_checkpoint.json``; ``CorruptCheckpoint`` otherwise.

    ``ManifestTooLarge`` (a ``CorruptCheckpoint``) past either cap.
    """
    path = directory / MANIFEST_NAME
    data = checksummed.read_capped(path, max_bytes=max_bytes, what=_WHAT)
    body = checksummed.decode(
        data,
        kind=MANIFEST_KIND,
        schema_version=SCHEMA_VERSION,
        fields=("checkpoint_id", "instances"),
        path=str(path),
    )
    try:
        checksummed.check_entries(
            _entries(body["instances"]), limit=max_entries, what=_WHAT, path=path
        )
        return _parse(body)
    except CorruptCheckpoint:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as error:
        raise CorruptCheckpoint(
            f"invalid Gym snapshot manifest: {error}", path=str(path)
        ) from error


def _entries(instances: Any) -> int:
    """Instances plus every list item they hold; what parsing would build objects for."""
    if not isinstance(instances, dict):
        raise TypeError("instances must be an object")
    count = len(instances)
    for record in instances.values():
        if isinstance(record, dict):
            count += sum(len(value) for value in record.values() if isinstance(value, list))
    return count


def _parse(body: Mapping[str, Any]) -> GymSnapshotManifest:
    instances: dict[str, InstanceRecord] = {}
    for instance_id, record in body["instances"].items():
        GymCheckpointInstance.parse(instance_id)
        if set(record) != {"episodes", "staging_keys", "participants", "restarts"}:
            raise ValueError(f"instance {instance_id}: unexpected fields {sorted(record)}")
        instances[instance_id] = InstanceRecord(
            episodes=_episodes(record["episodes"]),
            staging_keys=tuple(_strings(record["staging_keys"])),
            participants=tuple(_strings(record["participants"])),
            restarts=_episodes(record["restarts"]),
        )
    return GymSnapshotManifest(
        checkpoint_id=validate_checkpoint_id(body["checkpoint_id"]), instances=instances
    )


def _episodes(value: Any) -> tuple[EnvironmentEpisode, ...]:
    # A JSON object would iterate as its keys: an empty one would pass as no episodes.
    if not isinstance(value, list):
        raise TypeError("expected a list of episodes")
    return tuple(EnvironmentEpisode.from_wire(item) for item in value)


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise TypeError("expected a list of strings")
    return value
