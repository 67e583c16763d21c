"""envckpt: turn-level checkpoint and restore of RL environment rollout state.

The public names a trainer, a Gym server host and an operator need; see
``docs/`` for how they fit together. Every name is imported when first used
(PEP 562), so ``import envckpt.ids`` costs only that module, and ``import
envckpt`` works on a core-only install: a name whose module needs a missing
extra (``mount_participant`` needs ``envckpt[http]``) is a ``MissingExtra``
error that names it.
"""

from __future__ import annotations

from importlib import import_module

from envckpt.extras import MissingExtra

# Not typing's: importing typing costs more than the rest of ``import envckpt``,
# and type checkers read any TYPE_CHECKING as true.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

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
    from envckpt.http.client import HttpTransport
    from envckpt.http.routes import mount_participant
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

    __version__: str

# Where each public name lives (the TYPE_CHECKING imports above, for type checkers).
_EXPORTS: dict[str, str] = {
    "Clock": "envckpt.clock",
    "FakeClock": "envckpt.clock",
    "SystemClock": "envckpt.clock",
    "CheckpointingConfig": "envckpt.config",
    "ConfigError": "envckpt.config",
    "load_config": "envckpt.config",
    "Coordinator": "envckpt.coordination.coordinator",
    "GymCoordination": "envckpt.coordination.types",
    "Member": "envckpt.coordination.types",
    "Participants": "envckpt.coordination.types",
    "PrepareResult": "envckpt.coordination.types",
    "EnvironmentEpisode": "envckpt.episodes",
    "CoordinationError": "envckpt.errors",
    "CorruptCheckpoint": "envckpt.errors",
    "DeadlineExceeded": "envckpt.errors",
    "EnvckptError": "envckpt.errors",
    "GymCheckpointUnavailable": "envckpt.errors",
    "IllegalTransition": "envckpt.errors",
    "IncompatibleCheckpoint": "envckpt.errors",
    "ParticipantError": "envckpt.errors",
    "ProtocolViolation": "envckpt.errors",
    "SnapshotNotReady": "envckpt.errors",
    "UnsupportedDeployment": "envckpt.errors",
    "CheckpointTimeouts": "envckpt.facade.checkpoint",
    "GymEnvironmentCheckpoint": "envckpt.facade.checkpoint",
    "InstanceClient": "envckpt.facade.instances",
    "LocalInstance": "envckpt.facade.instances",
    "InstanceActor": "envckpt.facade.ray_instance",
    "RayInstance": "envckpt.facade.ray_instance",
    "GymEnvironmentSnapshot": "envckpt.facade.snapshot",
    "GymCheckpointAdapter": "envckpt.gym.adapter",
    "GymCheckpointInstance": "envckpt.gym.instance",
    "GymCheckpointCommitSummary": "envckpt.gym.summaries",
    "GymCheckpointEpisode": "envckpt.gym.summaries",
    "GymCheckpointPrepareSummary": "envckpt.gym.summaries",
    "EnvironmentCheckpoint": "envckpt.interfaces",
    "EnvironmentSnapshot": "envckpt.interfaces",
    "MutationCut": "envckpt.interfaces",
    "NoEnvironmentCheckpoint": "envckpt.interfaces",
    "RestoredEnvironmentRollouts": "envckpt.interfaces",
    "InMemoryInventory": "envckpt.inventory",
    "RolloutInventory": "envckpt.inventory",
    "SnapshotContents": "envckpt.inventory",
    "ParticipantCore": "envckpt.participant.core",
    "NoState": "envckpt.participant.hooks",
    "SessionHooks": "envckpt.participant.hooks",
    "StateHooks": "envckpt.participant.hooks",
    "ErrorCode": "envckpt.protocol",
    "Kind": "envckpt.protocol",
    "Mode": "envckpt.protocol",
    "Phase": "envckpt.protocol",
    "read_telemetry": "envckpt.telemetry.log",
    "TelemetryObserver": "envckpt.telemetry.observers",
    "PrometheusExporter": "envckpt.telemetry.prometheus",
    "RestoreTelemetry": "envckpt.telemetry.restore_record",
    "SnapshotTelemetry": "envckpt.telemetry.snapshot_record",
    "SnapshotSpans": "envckpt.telemetry.tracing",
    "DataPlaneBarrier": "envckpt.trainer.barrier",
    "SnapshotCatalog": "envckpt.trainer.catalog",
    "SnapshotEntry": "envckpt.trainer.catalog",
    "SqliteDataPlane": "envckpt.trainer.dataplane",
    "RolloutJob": "envckpt.trainer.job",
    "RolloutTask": "envckpt.trainer.job",
    "StagingRecorder": "envckpt.trainer.job",
    "RecoveryLedger": "envckpt.trainer.ledger",
    "JobSignals": "envckpt.trainer.preemption",
    "Restorer": "envckpt.trainer.restorer",
    "RestoreReport": "envckpt.trainer.restorer",
    "SnapshotPolicy": "envckpt.trainer.snapshot_loop",
    "RolloutSnapshotter": "envckpt.trainer.snapshotter",
    "SnapshotResult": "envckpt.trainer.snapshotter",
    "PendingStaging": "envckpt.trainer.startup",
    "StartedTrainer": "envckpt.trainer.startup",
    "start_trainer": "envckpt.trainer.startup",
    "HttpTransport": "envckpt.http.client",
    "mount_participant": "envckpt.http.routes",
}
# Modules that need an optional extra, and which.
_EXTRAS = {"envckpt.http.client": "http", "envckpt.http.routes": "http"}


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value: Any = _version()
    else:
        module = _EXPORTS.get(name)
        if module is None:
            raise AttributeError(f"module 'envckpt' has no attribute {name!r}")
        try:
            value = getattr(import_module(module), name)
        except ModuleNotFoundError as error:
            if module not in _EXTRAS or (error.name or "").startswith("envckpt"):
                raise
            raise MissingExtra(error.name or module, _EXTRAS[module]) from error
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("envckpt")
    except PackageNotFoundError:  # a checkout on sys.path without installed metadata
        return "0+unknown"


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
