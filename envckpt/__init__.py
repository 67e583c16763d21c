"""envckpt: turn-level checkpoint and restore of RL environment rollout state.

The public names a trainer needs; see ``docs/`` for how they fit together.
"""

from envckpt.clock import Clock, FakeClock, SystemClock
from envckpt.coordination.coordinator import Coordinator
from envckpt.coordination.types import GymCoordination, Member, Participants, PrepareResult
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import (
    CoordinationError,
    CorruptCheckpoint,
    DeadlineExceeded,
    EnvckptError,
    GymCheckpointUnavailable,
    IllegalTransition,
    IncompatibleCheckpoint,
    ParticipantError,
    ProtocolViolation,
    SnapshotNotReady,
    UnsupportedDeployment,
)
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import InstanceClient, LocalInstance
from envckpt.facade.snapshot import GymEnvironmentSnapshot
from envckpt.gym.adapter import GymCheckpointAdapter
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.gym.summaries import (
    GymCheckpointCommitSummary,
    GymCheckpointEpisode,
    GymCheckpointPrepareSummary,
)
from envckpt.interfaces import (
    EnvironmentCheckpoint,
    EnvironmentSnapshot,
    MutationCut,
    NoEnvironmentCheckpoint,
    RestoredEnvironmentRollouts,
)
from envckpt.inventory import InMemoryInventory, RolloutInventory, SnapshotContents

__all__ = [
    "CheckpointTimeouts",
    "Clock",
    "CoordinationError",
    "Coordinator",
    "CorruptCheckpoint",
    "DeadlineExceeded",
    "EnvckptError",
    "EnvironmentCheckpoint",
    "EnvironmentEpisode",
    "EnvironmentSnapshot",
    "FakeClock",
    "GymCheckpointAdapter",
    "GymCheckpointCommitSummary",
    "GymCheckpointEpisode",
    "GymCheckpointInstance",
    "GymCheckpointPrepareSummary",
    "GymCheckpointUnavailable",
    "GymCoordination",
    "GymEnvironmentCheckpoint",
    "GymEnvironmentSnapshot",
    "IllegalTransition",
    "InMemoryInventory",
    "IncompatibleCheckpoint",
    "InstanceClient",
    "LocalInstance",
    "Member",
    "MutationCut",
    "NoEnvironmentCheckpoint",
    "ParticipantError",
    "Participants",
    "PrepareResult",
    "ProtocolViolation",
    "RestoredEnvironmentRollouts",
    "RolloutInventory",
    "SnapshotContents",
    "SnapshotNotReady",
    "SystemClock",
    "UnsupportedDeployment",
]
