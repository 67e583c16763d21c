"""Tests for envckpt.trainer.snapshot_manifest: MANIFEST.json, verifiable by itself."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.snapshot_manifest import (
    MANIFEST_KIND,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    read_created_at,
    verify_snapshot,
)

from helpers.snapshot_files import FILES, RECORDS, flip_byte, publish


def reseal(directory: Path, **changes: Any) -> None:
    """Edit MANIFEST.json fields and recompute its own checksum, as a careful forger would."""
    path = directory / MANIFEST_NAME
    document = json.loads(path.read_bytes())
    document.pop("sha256")
    document.update(changes)
    body = {k: v for k, v in document.items() if k not in ("kind", "schema_version")}
    path.write_bytes(
        checksummed.encode(
            kind=document["kind"], schema_version=document["schema_version"], body=body
        )
    )


def rewrite(directory: Path, **changes: Any) -> None:
    """Edit MANIFEST.json fields without touching its checksum."""
    path = directory / MANIFEST_NAME
    document = json.loads(path.read_bytes())
    document.update(changes)
    path.write_text(json.dumps(document))


@pytest.fixture
def layout(tmp_path: Path) -> SnapshotLayout:
    return SnapshotLayout(tmp_path / "root")


def test_the_manifest_is_a_checksummed_document_listing_every_file(
    layout: SnapshotLayout,
) -> None:
    """Kind, schema, id, time, metrics and each file's sha256 and size, under its own sha256."""
    final = publish(layout, "ck-1", 100.0)
    data = (final / MANIFEST_NAME).read_bytes()
    body = checksummed.decode(
        data,
        kind=MANIFEST_KIND,
        schema_version=SCHEMA_VERSION,
        fields=("checkpoint_id", "created_at", "files", "metrics"),
    )
    assert body == {
        "checkpoint_id": "ck-1",
        "created_at": 100.0,
        "files": {
            name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
            for name, data in sorted(FILES.items())
        },
        "metrics": {"snapshot_bytes": 42.0},
    }


def test_verify_returns_the_published_manifest(layout: SnapshotLayout) -> None:
    """An untouched snapshot verifies and yields its identity, time, digests and metrics."""
    final = publish(layout, "ck-1", 12.5)
    manifest = verify_snapshot(final)
    assert manifest.checkpoint_id == "ck-1" and manifest.created_at == 12.5
    assert manifest.metrics == {"snapshot_bytes": 42.0}
    assert set(manifest.files) == set(FILES)
    assert manifest.files[RECORDS] == (
        hashlib.sha256(FILES[RECORDS]).hexdigest(),
        len(FILES[RECORDS]),
    )
    assert read_created_at(final) == 12.5


def _move(final: Path) -> Path:
    other = final.with_name("ck-other")
    final.rename(other)
    return other


Damage = Callable[[Path], object]
REFUSALS: dict[str, tuple[Damage, str]] = {
    "no-manifest": (lambda d: (d / MANIFEST_NAME).unlink(), "missing"),
    "truncated-manifest": (
        lambda d: (d / MANIFEST_NAME).write_bytes((d / MANIFEST_NAME).read_bytes()[:40]),
        "not valid JSON",
    ),
    "edited-created-at": (lambda d: rewrite(d, created_at=99.0), "checksum mismatch"),
    "foreign-kind": (lambda d: rewrite(d, kind="someone.else"), "foreign"),
    "old-schema": (lambda d: rewrite(d, schema_version=1), "schema 1"),
    "resealed-other-id": (lambda d: reseal(d, checkpoint_id="ck-9"), "ck-9"),
    "resealed-bad-time": (lambda d: reseal(d, created_at="yesterday"), "created_at"),
    "resealed-bad-digest": (
        lambda d: reseal(d, files={"ledger.json": {"sha256": "zz", "size": 1}}),
        "sha256",
    ),
    "resealed-no-file-list": (lambda d: reseal(d, files=None), "invalid"),
    "moved-directory": (_move, "directory is ck-other"),
    "ledger-byte": (lambda d: flip_byte(d / "ledger.json"), "ledger.json"),
    "dataplane-byte": (lambda d: flip_byte(d / "dataplane.sqlite"), "dataplane.sqlite"),
    "records-byte": (lambda d: flip_byte(d / RECORDS), "records-0123abcd"),
    "nested-manifest-byte": (lambda d: flip_byte(d / "sidecars" / MANIFEST_NAME), "sidecars"),
    "missing-file": (lambda d: (d / RECORDS).unlink(), "missing=['gym-instances"),
    "extra-file": (lambda d: (d / "sidecars" / "extra.bin").write_bytes(b"x"), "unlisted="),
    "same-size-rewrite": (
        lambda d: (d / "ledger.json").write_bytes(b"x" * len(FILES["ledger.json"])),
        "checksum mismatch",
    ),
}


@pytest.mark.parametrize("damage", sorted(REFUSALS))
def test_verify_refuses_any_damage(layout: SnapshotLayout, damage: str) -> None:
    """A snapshot must look exactly as published, its manifest included, else CorruptCheckpoint."""
    final = publish(layout, "ck-1", 1.0)
    change, reason = REFUSALS[damage]
    moved = change(final)
    target = moved if isinstance(moved, Path) else final
    with pytest.raises(CorruptCheckpoint, match=reason.replace("[", r"\[")):
        verify_snapshot(target)
    if damage != "moved-directory":
        assert read_created_at(target) is None or damage in (
            "ledger-byte",
            "dataplane-byte",
            "records-byte",
            "nested-manifest-byte",
            "missing-file",
            "extra-file",
            "same-size-rewrite",
        )
