"""Content-level corruptions of a published rollout snapshot, with every digest recomputed.

Each corruption changes what one file of the snapshot says, not only its
bytes, and then recomputes every checksum that would notice a byte change
(the file's own envelope, a participant's records digest, ``MANIFEST.json``),
as a bug that wrote wrong content would. Only a check of the content itself
can refuse such a snapshot. ``ENVIRONMENT_REFUSED`` names those only Gym
can judge (participant records).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from envckpt import checksummed
from envckpt.episodes import EnvironmentEpisode
from envckpt.facade.manifest import MANIFEST_NAME as GYM_MANIFEST
from envckpt.facade.manifest import (
    GymSnapshotManifest,
    InstanceRecord,
    read_manifest,
    write_manifest,
)
from envckpt.participant import store
from envckpt.trainer.layout import DATA_PLANE_NAME, LEDGER_NAME, SIDECAR_DIR
from envckpt.trainer.results import RESULTS_SIDECAR
from envckpt.trainer.snapshot_manifest import (
    MANIFEST_NAME,
    build_snapshot_manifest,
    read_snapshot_manifest,
    write_snapshot_manifest,
)


def records_file(snapshot: Path) -> Path:
    return next(snapshot.glob("gym-instances/*/replica-0/gym/agent/*/records-*.jsonl"))


def reseal(snapshot: Path) -> None:
    """Recompute MANIFEST.json over the files as they are now (same id, time, metrics)."""
    old = read_snapshot_manifest(snapshot)
    write_snapshot_manifest(
        snapshot,
        build_snapshot_manifest(
            snapshot,
            checkpoint_id=old.checkpoint_id,
            created_at=old.created_at,
            metrics=old.metrics,
            step=old.step,
            policy_version=old.policy_version,
        ),
    )


def _rewrite_checksummed(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit a checksummed JSON document's body and re-encode it with a fresh checksum."""
    document = json.loads(path.read_bytes())
    document.pop("sha256")
    kind, version = document.pop("kind"), document.pop("schema_version")
    change(document)
    path.write_bytes(checksummed.encode(kind=kind, schema_version=version, body=document))


def _first_exported(snapshot: Path) -> tuple[str, EnvironmentEpisode]:
    manifest = read_manifest(snapshot)
    for instance_id, record in sorted(manifest.instances.items()):
        if record.episodes:
            return instance_id, record.episodes[0]
    raise AssertionError("the snapshot exports no episode")


def manifest_names_another_snapshot(snapshot: Path) -> None:
    old = read_snapshot_manifest(snapshot)
    other = build_snapshot_manifest(
        snapshot, checkpoint_id="rollouts-elsewhere", created_at=old.created_at, metrics={}
    )
    write_snapshot_manifest(snapshot, other)


def ledger_entry_with_unknown_status(snapshot: Path) -> None:
    def change(body: dict[str, Any]) -> None:
        body["entries"][0]["status"] = "flying"

    _rewrite_checksummed(snapshot / LEDGER_NAME, change)
    reseal(snapshot)


def ledger_forgets_a_saved_rollout(snapshot: Path) -> None:
    _, episode = _first_exported(snapshot)

    def change(body: dict[str, Any]) -> None:
        body["entries"] = [e for e in body["entries"] if e["rollout_id"] != episode.rollout_id]

    _rewrite_checksummed(snapshot / LEDGER_NAME, change)
    reseal(snapshot)


def dataplane_truncated(snapshot: Path) -> None:
    path = snapshot / DATA_PLANE_NAME
    os.truncate(path, path.stat().st_size // 2)
    reseal(snapshot)


def dataplane_lost_kept_rows(snapshot: Path) -> None:
    keys = sorted(read_manifest(snapshot).staging_keys())
    assert keys, "the snapshot keeps no staging row"
    conn = sqlite3.connect(snapshot / DATA_PLANE_NAME)
    try:
        conn.executemany("DELETE FROM staging_rows WHERE staging_key = ?", [(k,) for k in keys])
        conn.commit()
    finally:
        conn.close()
    reseal(snapshot)


def results_not_a_mapping(snapshot: Path) -> None:
    def change(body: dict[str, Any]) -> None:
        body["results"] = []

    _rewrite_checksummed(snapshot / SIDECAR_DIR / RESULTS_SIDECAR, change)
    reseal(snapshot)


def results_for_an_unfinished_rollout(snapshot: Path) -> None:
    _, episode = _first_exported(snapshot)

    def change(body: dict[str, Any]) -> None:
        body["results"][episode.rollout_id] = {"transcript": ["finished, it claims"]}

    _rewrite_checksummed(snapshot / SIDECAR_DIR / RESULTS_SIDECAR, change)
    reseal(snapshot)


def gym_manifest_continues_an_unknown_attempt(snapshot: Path) -> None:
    manifest = read_manifest(snapshot)
    instance_id, episode = _first_exported(snapshot)
    record = manifest.instances[instance_id]
    bumped = tuple(
        EnvironmentEpisode(e.rollout_id, e.attempt + 3) if e == episode else e
        for e in record.episodes
    )
    instances = dict(manifest.instances)
    instances[instance_id] = InstanceRecord(
        episodes=bumped,
        staging_keys=record.staging_keys,
        participants=record.participants,
        restarts=record.restarts,
    )
    (snapshot / GYM_MANIFEST).unlink()
    write_manifest(snapshot, GymSnapshotManifest(manifest.checkpoint_id, instances))
    reseal(snapshot)


def records_hold_a_state_gym_refuses(snapshot: Path) -> None:
    """Rewrite one agent's records (digest, count, manifest all valid) with unusable states."""
    records = records_file(snapshot)
    directory = records.parent
    manifest = json.loads((directory / store.MANIFEST_NAME).read_bytes())
    rows = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    for row in rows:
        row["state"] = {"not": "an agent session"}
    checkpoint_dir = directory.parents[2]
    shutil.rmtree(directory)
    store.write_checkpoint(
        checkpoint_dir,
        kind=manifest["kind"],
        instance=manifest["instance"],
        checkpoint_id=manifest["checkpoint_id"],
        records=rows,
        extras={k: v for k, v in manifest.items() if k not in store.STANDARD_FIELDS},
    )
    reseal(snapshot)


CONTENT_CORRUPTIONS: dict[str, tuple[str, Callable[[Path], None]]] = {
    "manifest-names-another-snapshot": (MANIFEST_NAME, manifest_names_another_snapshot),
    "ledger-entry-with-unknown-status": (LEDGER_NAME, ledger_entry_with_unknown_status),
    "ledger-forgets-a-saved-rollout": (LEDGER_NAME, ledger_forgets_a_saved_rollout),
    "dataplane-truncated": (DATA_PLANE_NAME, dataplane_truncated),
    "dataplane-lost-kept-rows": (DATA_PLANE_NAME, dataplane_lost_kept_rows),
    "results-not-a-mapping": (RESULTS_SIDECAR, results_not_a_mapping),
    "results-for-an-unfinished-rollout": (RESULTS_SIDECAR, results_for_an_unfinished_rollout),
    "gym-manifest-continues-an-unknown-attempt": (
        GYM_MANIFEST,
        gym_manifest_continues_an_unknown_attempt,
    ),
    "records-hold-a-state-gym-refuses": ("records", records_hold_a_state_gym_refuses),
}
ENVIRONMENT_REFUSED = frozenset({"records-hold-a-state-gym-refuses"})
