"""One candidate snapshot, read and checked on the trainer side before Gym hears of it.

    candidate = check_candidate(path, data_plane_path=live, sidecar_readers=readers)
    candidate.ledger, candidate.sidecars        # parsed and cross-checked
    candidate.staged_plane.install()            # the data plane, only once chosen
    candidate.discard()                         # or drop the staged copy

Every trainer-side file is read and checked for content, not only for its
digest, in this order; the first problem raises ``CorruptCheckpoint`` (or a
subclass) and the snapshot is refused whole:

1. ``MANIFEST.json`` verifies by itself, and every file's digest and size match it;
2. ``ledger.json`` parses: checksum, schema, every entry valid;
3. every sidecar with a reader parses and agrees with the ledger (results:
   every sealed rollout has a result, every result's rollout is sealed);
4. ``gym_checkpoint.json``, when present, parses, and every rollout it
   continues is restorable by the ledger (current attempt, same instance, held);
5. the data plane copy (staged beside the live file) passes SQLite's
   integrity check and the schema check, and holds every staging key the
   Gym manifest keeps.

An ``OSError`` while reading is not a verdict on the content: it propagates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from envckpt.errors import CorruptCheckpoint
from envckpt.facade.manifest import MANIFEST_NAME as GYM_MANIFEST
from envckpt.facade.manifest import GymSnapshotManifest, read_manifest
from envckpt.trainer.dataplane import StagedDataPlane
from envckpt.trainer.layout import DATA_PLANE_NAME, LEDGER_NAME, SIDECAR_DIR
from envckpt.trainer.ledger import RecoveryLedger
from envckpt.trainer.ledger_entry import restore_mismatches
from envckpt.trainer.snapshot_manifest import OnBytes, SnapshotManifest, verify_snapshot


class SidecarReader(Protocol):
    """Parses one sidecar; ``CorruptCheckpoint`` if it is bad or disagrees with the ledger."""

    def __call__(self, data: bytes, *, path: str, ledger: RecoveryLedger) -> object: ...


@dataclass
class CheckedCandidate:
    """A snapshot whose trainer-side files all passed; the data plane waits, staged."""

    path: Path
    manifest: SnapshotManifest
    ledger: RecoveryLedger
    staged_plane: StagedDataPlane
    gym_manifest: GymSnapshotManifest | None
    sidecars: dict[str, object] = field(default_factory=dict)

    def discard(self) -> None:
        self.staged_plane.discard()


def check_candidate(
    path: Path,
    *,
    data_plane_path: Path,
    sidecar_readers: Mapping[str, SidecarReader] | None = None,
    on_bytes: OnBytes | None = None,
) -> CheckedCandidate:
    """Steps 1-5 above; ``CorruptCheckpoint`` names the first problem.

    ``on_bytes`` hears the progress of step 1's hashing (``envckpt snapshots verify``).
    """
    manifest = verify_snapshot(path, on_bytes=on_bytes)
    ledger = RecoveryLedger.load(path / LEDGER_NAME)
    sidecars: dict[str, object] = {}
    for name, read in sorted((sidecar_readers or {}).items()):
        sidecar = path / SIDECAR_DIR / name
        try:
            data = sidecar.read_bytes()
        except FileNotFoundError:
            raise CorruptCheckpoint(f"sidecar {name} is missing", path=str(sidecar)) from None
        sidecars[name] = read(data, path=str(sidecar), ledger=ledger)
    gym_manifest = None
    if GYM_MANIFEST in manifest.files:
        gym_manifest = read_manifest(path)
        entries = {entry.rollout_id: entry for entry in ledger.entries()}
        problems = restore_mismatches(entries, gym_manifest.continued_attempts())
        if problems:
            raise CorruptCheckpoint(
                f"the Gym manifest continues rollouts the ledger cannot: {list(problems[:5])}",
                path=str(path / GYM_MANIFEST),
            )
    staged = StagedDataPlane.stage(path / DATA_PLANE_NAME, data_plane_path)
    try:
        if gym_manifest is not None:
            missing = staged.missing_keys(gym_manifest.staging_keys())
            if missing:
                raise CorruptCheckpoint(
                    f"the data plane lacks {len(missing)} staging rows the Gym manifest "
                    f"keeps: {sorted(missing)[:5]}",
                    path=str(path / DATA_PLANE_NAME),
                )
    except BaseException:
        staged.discard()
        raise
    return CheckedCandidate(path, manifest, ledger, staged, gym_manifest, sidecars)
