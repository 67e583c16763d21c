"""envckpt: turn-level checkpoint and restore of RL environment rollout state.

The public names a trainer, a Gym server host and an operator need; see
``docs/`` for how they fit together. Names that need an optional extra
(``mount_participant`` needs ``envckpt[http]``, ``RayInstance`` needs
``envckpt[ray]`` to be used) are imported when first used (``HttpTransport``
too, though it needs only the core), so ``import envckpt`` works on a
core-only install, and a missing extra is a ``MissingExtra`` error that names
it.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from envckpt.clock import Clock, FakeClock, SystemClock
from envckpt.config import CheckpointingConfig, ConfigError, load_config
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
from envckpt.extras import MissingExtra
from envckpt.facade.checkpoint import CheckpointTimeouts, GymEnvironmentCheckpoint
from envckpt.facade.instances import InstanceClient, LocalInstance
from envckpt.facade.ray_instance import InstanceActor, RayInstance
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
from envckpt.participant.core import ParticipantCore
from envckpt.participant.hooks import NoState, SessionHooks, StateHooks
from envckpt.protocol import ErrorCode, Kind, Mode, Phase
from envckpt.telemetry.log import read_telemetry
from envckpt.telemetry.observers import TelemetryObserver
from envckpt.telemetry.prometheus import PrometheusExporter
from envckpt.telemetry.restore_record import RestoreTelemetry
from envckpt.telemetry.snapshot_record import SnapshotTelemetry
from envckpt.telemetry.tracing import SnapshotSpans
from envckpt.trainer.barrier import DataPlaneBarrier
from envckpt.trainer.catalog import SnapshotCatalog, SnapshotEntry
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.job import RolloutJob, RolloutTask, StagingRecorder
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.preemption import JobSignals
from envckpt.trainer.restorer import Restorer, RestoreReport
from envckpt.trainer.snapshot_loop import SnapshotPolicy
from envckpt.trainer.snapshotter import RolloutSnapshotter, SnapshotResult
from envckpt.trainer.startup import PendingStaging, StartedTrainer, start_trainer

if TYPE_CHECKING:
    from envckpt.http.client import HttpTransport
    from envckpt.http.routes import mount_participant

try:
    __version__ = version("envckpt")
except PackageNotFoundError:  # a checkout on sys.path without installed metadata
    __version__ = "0+unknown"

# Public names that import an optional extra: name -> (module, extra).
_LAZY = {
    "HttpTransport": ("envckpt.http.client", "http"),
    "mount_participant": ("envckpt.http.routes", "http"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'envckpt' has no attribute {name!r}")
    module, extra = _LAZY[name]
    try:
        value = getattr(import_module(module), name)
    except ModuleNotFoundError as error:
        raise MissingExtra(error.name or module, extra) from error
    globals()[name] = value
    return value


__all__ = [
    "CheckpointTimeouts",
    "CheckpointingConfig",
    "Clock",
    "ConfigError",
    "CoordinationError",
    "Coordinator",
    "CorruptCheckpoint",
    "DataPlaneBarrier",
    "DeadlineExceeded",
    "EnvckptError",
    "EnvironmentCheckpoint",
    "EnvironmentEpisode",
    "EnvironmentSnapshot",
    "ErrorCode",
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
    "HttpTransport",
    "IllegalTransition",
    "InMemoryInventory",
    "IncompatibleCheckpoint",
    "InstanceActor",
    "InstanceClient",
    "JobSignals",
    "Kind",
    "LocalInstance",
    "Member",
    "MissingExtra",
    "Mode",
    "MutationCut",
    "NoEnvironmentCheckpoint",
    "NoState",
    "ParticipantCore",
    "ParticipantError",
    "Participants",
    "PendingStaging",
    "Phase",
    "PrepareResult",
    "PrometheusExporter",
    "ProtocolViolation",
    "RayInstance",
    "RecoveryLedger",
    "RestoreReport",
    "RestoreTelemetry",
    "RestoredEnvironmentRollouts",
    "Restorer",
    "RolloutInventory",
    "RolloutJob",
    "RolloutSnapshotter",
    "RolloutTask",
    "SessionHooks",
    "SnapshotCatalog",
    "SnapshotContents",
    "SnapshotEntry",
    "SnapshotNotReady",
    "SnapshotPolicy",
    "SnapshotResult",
    "SnapshotSpans",
    "SnapshotTelemetry",
    "SqliteDataPlane",
    "StagingRecorder",
    "StartedTrainer",
    "StateHooks",
    "SystemClock",
    "TelemetryObserver",
    "UnsupportedDeployment",
    "__version__",
    "load_config",
    "mount_participant",
    "read_telemetry",
    "start_trainer",
]
