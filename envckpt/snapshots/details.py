"""One snapshot in detail: its manifests, its participants' files, what a restore would do.

    details = describe(SnapshotCatalog(root).entry(cid))
    details.participants          # per Gym instance and participant: records, bytes
    details.outlook               # rollouts a restore continues, restarts, leaves waiting

Read-only and offline, like the catalog: the files are read as they are, not
verified (``envckpt snapshots verify`` checks every digest and record).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from envckpt.errors import CorruptCheckpoint
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.machines.tables import UNFINISHED, LedgerStatus
from envckpt.participant import store
from envckpt.trainer.catalog import SnapshotEntry
from envckpt.trainer.layout import LEDGER_NAME
from envckpt.trainer.ledger import RecoveryLedger


@dataclass(frozen=True, slots=True)
class ParticipantFiles:
    """One participant's saved state in one Gym instance, as its manifest says."""

    instance_id: str
    kind: str
    name: str
    directory: Path
    records: int = 0
    size: int = 0
    problem: str = ""


@dataclass(frozen=True, slots=True)
class RestoreOutlook:
    """What restoring the snapshot would do with each rollout of its ledger (rollout ids)."""

    continued: tuple[str, ...]
    restarted: tuple[str, ...]
    waiting: tuple[str, ...]
    finished: tuple[str, ...]


@dataclass
class SnapshotDetails:
    entry: SnapshotEntry
    participants: list[ParticipantFiles] = field(default_factory=list)
    outlook: RestoreOutlook | None = None
    problems: list[str] = field(default_factory=list)


def participant_dirs(snapshot: Path, instance_id: str) -> list[tuple[str, str, Path]]:
    """(kind, name, directory) of every participant directory one instance's commit wrote."""
    gym_dir = GymCheckpointInstance.parse(instance_id).checkpoint_dir(snapshot) / store.GYM_DIR
    if not gym_dir.is_dir():
        return []
    return [
        (kind_dir.name, name_dir.name, name_dir)
        for kind_dir in sorted(gym_dir.iterdir())
        if kind_dir.is_dir()
        for name_dir in sorted(kind_dir.iterdir())
        if name_dir.is_dir()
    ]


def describe(entry: SnapshotEntry) -> SnapshotDetails:
    """The details of one catalog entry; what cannot be read is listed in ``problems``."""
    details = SnapshotDetails(entry)
    if entry.problem:
        details.problems.append(entry.problem)
    gym = entry.gym_manifest
    if gym is None:
        return details
    for instance_id in sorted(gym.instances):
        checkpoint_dir = GymCheckpointInstance.parse(instance_id).checkpoint_dir(entry.path)
        for kind, name, directory in participant_dirs(entry.path, instance_id):
            details.participants.append(
                _participant(checkpoint_dir, instance_id, kind, name, directory, gym.checkpoint_id)
            )
    try:
        ledger = RecoveryLedger.load(entry.path / LEDGER_NAME)
    except CorruptCheckpoint as error:
        details.problems.append(f"{LEDGER_NAME}: {error}")
        return details
    continued = {rollout_id for _, rollout_id, _ in gym.continued_attempts()}
    details.outlook = outlook(ledger, continued)
    return details


def outlook(ledger: RecoveryLedger, continued: set[str]) -> RestoreOutlook:
    """Sort the ledger's rollouts as ``RecoveryLedger.prepare_for_restart`` would."""
    groups: dict[str, list[str]] = {"continued": [], "restarted": [], "waiting": [], "finished": []}
    for entry in ledger.entries():
        if entry.rollout_id in continued:
            groups["continued"].append(entry.rollout_id)
        elif entry.status is LedgerStatus.RESERVED and not entry.restored:
            groups["waiting"].append(entry.rollout_id)  # never sent: nothing to restart
        elif entry.status in UNFINISHED:
            groups["restarted"].append(entry.rollout_id)
        elif entry.status is LedgerStatus.SEALED:
            groups["finished"].append(entry.rollout_id)
    return RestoreOutlook(**{key: tuple(sorted(ids)) for key, ids in groups.items()})


def _participant(
    checkpoint_dir: Path,
    instance_id: str,
    kind: str,
    name: str,
    directory: Path,
    checkpoint_id: str,
) -> ParticipantFiles:
    size = sum(path.stat().st_size for path in directory.iterdir() if path.is_file())
    try:
        manifest = store.read_manifest(
            checkpoint_dir, kind=kind, instance=name, checkpoint_id=checkpoint_id
        )
    except (CorruptCheckpoint, ValueError) as error:
        return ParticipantFiles(instance_id, kind, name, directory, size=size, problem=str(error))
    return ParticipantFiles(instance_id, kind, name, directory, manifest.record_count, size)
