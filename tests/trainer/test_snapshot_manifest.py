"""Tests for envckpt.trainer.snapshot_manifest: MANIFEST.json, verifiable by itself."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envckpt import checksummed
from envckpt.errors import CorruptCheckpoint, ManifestTooLarge
from envckpt.trainer import snapshot_manifest
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.snapshot_manifest import (
    MANIFEST_KIND,
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    MAX_MANIFEST_FILES,
    SCHEMA_VERSION,
    SnapshotManifest,
    build_snapshot_manifest,
    read_created_at,
    read_snapshot_manifest,
    verify_snapshot,
    write_snapshot_manifest,
)

from helpers.snapshot_files import FILES, RECORDS, fill, flip_byte, publish


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
        fields=("checkpoint_id", "created_at", "files", "metrics", "step", "policy_version"),
    )
    assert body == {
        "checkpoint_id": "ck-1",
        "created_at": 100.0,
        "step": None,
        "policy_version": None,
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
    "resealed-negative-step": (lambda d: reseal(d, step=-1), "step must be"),
    "resealed-boolean-step": (lambda d: reseal(d, step=True), "step must be"),
    "resealed-empty-policy": (lambda d: reseal(d, policy_version=""), "policy_version"),
    "resealed-v2-with-step": (lambda d: reseal(d, schema_version=2), "fields"),
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


def test_the_step_and_policy_version_are_recorded_and_read_back(layout: SnapshotLayout) -> None:
    """A manifest built with a step and policy version verifies and returns both."""
    temporary = layout.new_temporary("ck-s")
    (temporary / "ledger.json").write_bytes(b"{}")
    manifest = build_snapshot_manifest(
        temporary, checkpoint_id="ck-s", created_at=5.0, metrics={}, step=120, policy_version="v7"
    )
    final = layout.publish(temporary, manifest)
    read = verify_snapshot(final)
    assert (read.step, read.policy_version, read.size) == (120, "v7", 2)
    assert json.loads((final / MANIFEST_NAME).read_bytes())["step"] == 120


def test_a_schema_2_manifest_still_reads_without_a_step(layout: SnapshotLayout) -> None:
    """Snapshots published before steps existed stay restorable: step and version are None."""
    final = publish(layout, "ck-old", 3.0)
    body = read_snapshot_manifest(final).body()
    del body["step"], body["policy_version"]
    (final / MANIFEST_NAME).write_bytes(
        checksummed.encode(kind=MANIFEST_KIND, schema_version=2, body=body, indent=1)
    )
    manifest = verify_snapshot(final)
    assert (manifest.step, manifest.policy_version, manifest.created_at) == (None, None, 3.0)


def test_a_bad_step_is_refused_when_the_manifest_is_built() -> None:
    """A negative, boolean or non-integer step, or an empty policy version, is a ValueError."""
    for bad in ({"step": -1}, {"step": True}, {"step": 1.5}, {"policy_version": ""}):
        with pytest.raises(ValueError):
            SnapshotManifest("ck", 1.0, {}, {}, **bad)  # type: ignore[arg-type]


def test_verify_reports_every_byte_it_hashes(layout: SnapshotLayout) -> None:
    """on_bytes hears chunks adding up to the manifest's size: a progress bar's total."""
    final = publish(layout, "ck-1", 1.0)
    heard: list[int] = []
    manifest = verify_snapshot(final, on_bytes=heard.append)
    assert heard and sum(heard) == manifest.size == sum(len(d) for d in FILES.values())


def test_rewriting_the_manifest_keeps_what_it_said(layout: SnapshotLayout) -> None:
    """write_snapshot_manifest of a read manifest reproduces the same bytes."""
    final = publish(layout, "ck-1", 1.0)
    before = (final / MANIFEST_NAME).read_bytes()
    write_snapshot_manifest(final, read_snapshot_manifest(final))
    assert (final / MANIFEST_NAME).read_bytes() == before


def test_a_manifest_over_its_byte_cap_is_refused_before_it_is_read(
    layout: SnapshotLayout,
) -> None:
    """A manifest larger than max_bytes (a sparse 8 GiB one too) is ManifestTooLarge from its
    size; at the default caps a published one reads."""
    published = publish(layout, "ck-1", 1.0)
    size = (published / MANIFEST_NAME).stat().st_size
    assert read_snapshot_manifest(published, max_bytes=size).checkpoint_id == "ck-1"
    with pytest.raises(ManifestTooLarge) as caught:
        read_snapshot_manifest(published, max_bytes=size - 1)
    assert caught.value.unit == "bytes" and caught.value.limit == size - 1
    with open(published / MANIFEST_NAME, "r+b") as stream:
        stream.truncate(8 << 30)
    with pytest.raises(ManifestTooLarge) as caught:
        read_snapshot_manifest(published)
    assert caught.value.limit == MAX_MANIFEST_BYTES and caught.value.found == 8 << 30
    assert read_created_at(published) is None  # ordering treats it as unverified


def test_a_manifest_listing_too_many_files_is_refused(layout: SnapshotLayout) -> None:
    """More files (and metrics) than max_files is ManifestTooLarge in entries, checksum or not."""
    published = publish(layout, "ck-1", 1.0)
    listed = len(FILES) + 1  # the files and the one metric
    read_snapshot_manifest(published, max_files=listed)
    with pytest.raises(ManifestTooLarge) as caught:
        read_snapshot_manifest(published, max_files=listed - 1)
    assert (caught.value.unit, caught.value.found) == ("entries", listed)
    many = {f"f{i}": {"sha256": "0" * 64, "size": 0} for i in range(MAX_MANIFEST_FILES + 1)}
    reseal(published, files=many)
    with pytest.raises(ManifestTooLarge, match="entries"):
        read_snapshot_manifest(published)


def test_a_symlinked_manifest_is_refused(layout: SnapshotLayout, tmp_path: Path) -> None:
    """MANIFEST.json linked to a valid copy elsewhere is refused, not read through the link."""
    published = publish(layout, "ck-1", 1.0)
    (published / MANIFEST_NAME).rename(tmp_path / "elsewhere.json")
    (published / MANIFEST_NAME).symlink_to(tmp_path / "elsewhere.json")
    with pytest.raises(CorruptCheckpoint, match="symbolic link"):
        read_snapshot_manifest(published)


def test_a_manifest_no_reader_would_take_is_not_written(
    layout: SnapshotLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over either cap, write_snapshot_manifest raises ManifestTooLarge and writes nothing:
    the snapshot fails now instead of its restore later."""
    directory = layout.new_temporary("ck-1")
    fill(directory)
    manifest = build_snapshot_manifest(
        directory, checkpoint_id="ck-1", created_at=1.0, metrics={"m": 1.0}
    )
    monkeypatch.setattr(snapshot_manifest, "MAX_MANIFEST_FILES", len(FILES))
    with pytest.raises(ManifestTooLarge, match="entries"):
        write_snapshot_manifest(directory, manifest)
    monkeypatch.setattr(snapshot_manifest, "MAX_MANIFEST_FILES", len(FILES) + 1)
    monkeypatch.setattr(snapshot_manifest, "MAX_MANIFEST_BYTES", len(manifest.to_bytes()) - 1)
    with pytest.raises(ManifestTooLarge, match="bytes"):
        write_snapshot_manifest(directory, manifest)
    assert not (directory / MANIFEST_NAME).exists()
    monkeypatch.setattr(snapshot_manifest, "MAX_MANIFEST_BYTES", len(manifest.to_bytes()))
    write_snapshot_manifest(directory, manifest)
    assert (directory / MANIFEST_NAME).exists()
