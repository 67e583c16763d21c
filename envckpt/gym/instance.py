"""Identity and on-disk namespace of one logical Gym instance.

``instance_id`` is ``<shard>/replica-<i>``; its checkpoint directory is
``<root>/gym-instances/<instance_id>``. A replacement actor of the same
logical instance uses the same directory; siblings never share one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envckpt.ids import validate_path_component


@dataclass(frozen=True, order=True, slots=True)
class GymCheckpointInstance:
    """One Gym deployment as the trainer addresses it."""

    shard_name: str
    replica_index: int
    # ``<shard>/replica-<i>``, made once: the trainer reads it on every call it
    # fans out, 100k times per fan-out at 100k instances.
    instance_id: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        validate_path_component(self.shard_name, what="Gym checkpoint shard_name")
        if (
            not isinstance(self.replica_index, int)
            or isinstance(self.replica_index, bool)
            or self.replica_index < 0
        ):
            raise ValueError("Gym checkpoint replica_index must be a non-negative integer")
        object.__setattr__(self, "instance_id", f"{self.shard_name}/replica-{self.replica_index}")

    @classmethod
    def parse(cls, instance_id: str) -> GymCheckpointInstance:
        """Inverse of ``instance_id``; raise ValueError for anything else."""
        shard, sep, replica = instance_id.partition("/replica-")
        if not sep or not replica.isdigit() or str(int(replica)) != replica:
            raise ValueError(f"not an instance id: {instance_id!r}")
        return cls(shard, int(replica))

    def live_capture_dir(self, capture_root: str | Path) -> Path:
        return Path(capture_root) / "gym-instances" / self.instance_id

    def checkpoint_dir(self, checkpoint_root: str | Path) -> Path:
        return Path(checkpoint_root) / "gym-instances" / self.instance_id
