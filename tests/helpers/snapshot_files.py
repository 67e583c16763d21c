"""Snapshot directories made of fixed files, for the layout and manifest tests."""

from __future__ import annotations

from pathlib import Path

from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.snapshot_manifest import build_snapshot_manifest

RECORDS = "gym-instances/shard/replica-0/gym/agent/simple_agent/records-0123abcd.jsonl"
FILES: dict[str, bytes] = {
    "gym_checkpoint.json": b'{"kind": "envckpt.gym_checkpoint"}',
    "dataplane.sqlite": bytes(range(256)) * 8,
    "ledger.json": b'{"kind": "envckpt.ledger", "entries": []}\n',
    RECORDS: b'{"capture_key": "r1", "state": {"turn": 3}}\n',
    "gym-instances/shard/replica-0/gym/agent/simple_agent/manifest.json": b'{"record_count": 1}',
    "sidecars/results.json": b'{"results": {}}',
    # Only the top-level MANIFEST.json is left out of the digest list.
    "sidecars/MANIFEST.json": b"a sidecar that happens to share the name",
}


def fill(directory: Path, files: dict[str, bytes] = FILES) -> None:
    for name, data in files.items():
        path = directory / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def publish(layout: SnapshotLayout, checkpoint_id: str, created_at: float) -> Path:
    temporary = layout.new_temporary(checkpoint_id)
    fill(temporary)
    manifest = build_snapshot_manifest(
        temporary,
        checkpoint_id=checkpoint_id,
        created_at=created_at,
        metrics={"snapshot_bytes": 42.0},
    )
    return layout.publish(temporary, manifest)


def flip_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x20
    path.write_bytes(bytes(data))
