"""Offline verification of one snapshot: every digest, and every file's content.

    report = verify_snapshot_dir(path, on_bytes=bar.advance)
    report.passed            # False: report.checks says which check failed, and why

Nothing is sent to any Gym server and nothing in the snapshot changes; the
data plane is checked on a copy in a temporary directory. The checks, in order:

1. **trainer files** (``trainer.candidate.check_candidate``, the restore's own
   check): ``MANIFEST.json`` and the digest and size of every file it lists,
   the ledger, the results sidecar against the ledger, ``gym_checkpoint.json``
   against the ledger, and the data plane (SQLite integrity, schema, every
   staging row the Gym manifest keeps);
2. **records** of every participant of every Gym instance: its manifest
   (schema, kind, name, checkpoint id) and every line of its records file
   (count, digest, each record in Gym's envelope), as a restore reads them;
3. **continued episodes**: every episode the Gym manifest continues is held
   by an agent of its instance (an agent that lost one cannot resume it).

Checks 2 and 3 run even when check 1 failed, so one run reports every part
that is wrong.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from envckpt.errors import CorruptCheckpoint
from envckpt.facade.manifest import GymSnapshotManifest, read_manifest
from envckpt.gym.instance import GymCheckpointInstance
from envckpt.participant import store
from envckpt.protocol import Kind
from envckpt.snapshots.details import participant_dirs
from envckpt.trainer.candidate import SidecarReader, check_candidate
from envckpt.trainer.results import RESULTS_SIDECAR, read_results_sidecar
from envckpt.trainer.snapshot_manifest import OnBytes

TRAINER_FILES = "trainer files"
CONTINUED = "continued episodes"
DEFAULT_READERS: Mapping[str, SidecarReader] = {RESULTS_SIDECAR: read_results_sidecar}


@dataclass(frozen=True, slots=True)
class Check:
    """One verdict: what was checked, whether it held, and what was wrong."""

    name: str
    passed: bool
    detail: str = ""


@dataclass
class VerifyReport:
    checkpoint_id: str
    path: Path
    checks: list[Check] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(check.passed for check in self.checks)

    def failed(self) -> list[Check]:
        return [check for check in self.checks if not check.passed]


def verify_snapshot_dir(
    path: Path,
    *,
    on_bytes: OnBytes | None = None,
    sidecar_readers: Mapping[str, SidecarReader] | None = None,
) -> VerifyReport:
    """Checks 1-3 above on the snapshot directory ``path``."""
    report = VerifyReport(path.name, path)
    readers = DEFAULT_READERS if sidecar_readers is None else sidecar_readers
    with tempfile.TemporaryDirectory(prefix="envckpt-verify-") as scratch:
        try:
            candidate = check_candidate(
                path,
                data_plane_path=Path(scratch) / "dataplane.sqlite",
                sidecar_readers=readers,
                on_bytes=on_bytes,
            )
        except CorruptCheckpoint as error:
            report.checks.append(Check(TRAINER_FILES, False, _described(error, path)))
        else:
            candidate.discard()
            report.checks.append(
                Check(TRAINER_FILES, True, f"{len(candidate.manifest.files)} files")
            )
    gym = _gym_manifest(path, report)
    if gym is not None:
        held = _check_records(path, gym, report)
        _check_continued(gym, held, report)
    return report


def _gym_manifest(path: Path, report: VerifyReport) -> GymSnapshotManifest | None:
    if not (path / "gym_checkpoint.json").exists():
        return None  # a snapshot of an environment without Gym state
    try:
        return read_manifest(path)
    except CorruptCheckpoint as error:
        if report.passed:  # check 1 already said so otherwise
            report.checks.append(Check("gym_checkpoint.json", False, _described(error, path)))
        return None


def _check_records(
    path: Path, gym: GymSnapshotManifest, report: VerifyReport
) -> dict[str, set[tuple[str, int]]]:
    """Check 2; the episodes each instance's agents hold, for check 3."""
    held: dict[str, set[tuple[str, int]]] = {}
    for instance_id in sorted(gym.instances):
        checkpoint_dir = GymCheckpointInstance.parse(instance_id).checkpoint_dir(path)
        agents = held.setdefault(instance_id, set())
        for kind, name, _ in participant_dirs(path, instance_id):
            label = f"records {instance_id} {kind}/{name}"
            try:
                episodes = _read_records(checkpoint_dir, kind, name, gym.checkpoint_id)
            except CorruptCheckpoint as error:
                report.checks.append(Check(label, False, _described(error, path)))
                continue
            if kind == Kind.AGENT:
                agents.update(episodes)
            report.checks.append(Check(label, True, f"{len(episodes)} records"))
    return held


def _read_records(
    checkpoint_dir: Path, kind: str, name: str, checkpoint_id: str
) -> list[tuple[str, int]]:
    """Every record as a restore reads it; ``CorruptCheckpoint`` at the first bad one."""
    try:
        manifest = store.read_manifest(
            checkpoint_dir, kind=kind, instance=name, checkpoint_id=checkpoint_id
        )
    except ValueError as error:  # a directory name that is no path component
        raise CorruptCheckpoint(str(error), path=str(checkpoint_dir)) from error
    episodes = []
    for number, record in enumerate(store.iter_records(checkpoint_dir, manifest), start=1):
        try:
            episode, _ = store.from_record(record)
        except ValueError as error:
            where = str(store.records_path(checkpoint_dir, manifest))
            raise CorruptCheckpoint(f"record {number}: {error}", path=where) from error
        episodes.append((episode.rollout_id, episode.attempt))
    return episodes


def _check_continued(
    gym: GymSnapshotManifest, held: dict[str, set[tuple[str, int]]], report: VerifyReport
) -> None:
    """Check 3: an episode the manifest continues that no agent holds cannot resume."""
    missing = sorted(
        f"{instance_id}:{episode.capture_key}"
        for instance_id, record in gym.instances.items()
        for episode in record.episodes
        if (episode.rollout_id, episode.attempt) not in held.get(instance_id, set())
    )
    total = sum(len(record.episodes) for record in gym.instances.values())
    if missing:
        report.checks.append(
            Check(CONTINUED, False, f"{len(missing)} held by no agent: {', '.join(missing[:5])}")
        )
    else:
        report.checks.append(Check(CONTINUED, True, f"{total} held by their agents"))


def _described(error: CorruptCheckpoint, base: Path) -> str:
    """The error's message, its path relative to the snapshot when it lies inside."""
    where = error.path
    if where and Path(where).is_relative_to(base):
        where = Path(where).relative_to(base).as_posix() or "."
    return f"{error.message} ({where})" if where else error.message
