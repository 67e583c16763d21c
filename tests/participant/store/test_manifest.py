"""Tests for envckpt.participant.store.manifest: publishing and reading manifest.json."""

from __future__ import annotations

import json
import os
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from envckpt.errors import CorruptCheckpoint, ManifestTooLarge
from envckpt.participant.store import (
    DEFAULT_MAX_MANIFEST_BYTES,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Manifest,
    iter_records,
    participant_dir,
    read_manifest,
    verify_records,
)

from helpers.store_files import (
    CKPT,
    INSTANCE,
    KIND,
    RECORDS,
    move_behind_symlink,
    pdir,
    read,
    restore,
    rewrite_manifest,
    snapshot,
    write,
)


def test_manifest_has_sorted_keys_and_standard_fields(tmp_path: Path) -> None:
    """manifest.json lists its keys sorted and carries every standard field and the extras."""
    manifest = write(tmp_path, extras={"staging_keys": ["k2", "k1"], "episode_ids": ["e1"]})
    raw = (pdir(tmp_path) / MANIFEST_NAME).read_text()
    body = json.loads(raw)
    assert list(body) == sorted(body)
    assert body == {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "instance": INSTANCE,
        "checkpoint_id": CKPT,
        "records_file": manifest.records_file,
        "records_sha256": manifest.records_sha256,
        "record_count": 3,
        "episode_ids": ["e1"],
        "staging_keys": ["k2", "k1"],
    }


def test_manifest_read_back_equals_written_one(tmp_path: Path) -> None:
    """read_manifest returns a Manifest equal to the one write_checkpoint returned."""
    written = write(tmp_path, extras={"episode_ids": ["e1", "e2"], "meta": {"n": 1}})
    read_back = read(tmp_path)
    assert read_back == written
    assert read_back.extras["episode_ids"] == ("e1", "e2")
    assert read_back.extras["meta"]["n"] == 1


def test_extras_are_read_only(tmp_path: Path) -> None:
    """Manifest extras cannot be mutated, nor changed through the caller's objects."""
    ids = ["e1"]
    manifest = write(tmp_path, extras={"episode_ids": ids})
    ids.append("e2")
    assert manifest.extras["episode_ids"] == ("e1",)
    with pytest.raises(TypeError):
        manifest.extras["x"] = 1  # type: ignore[index]


def test_extras_may_not_override_standard_fields(tmp_path: Path) -> None:
    """Extras naming a standard field are refused before anything is written."""
    with pytest.raises(ValueError, match="record_count"):
        write(tmp_path, extras={"record_count": 0})
    assert not (tmp_path / "gym").exists()


def test_non_json_extras_are_refused(tmp_path: Path) -> None:
    """Extras that are not JSON are refused before anything is written."""
    with pytest.raises(ValueError, match="not JSON"):
        write(tmp_path, extras={"x": object()})
    assert not (tmp_path / "gym").exists()


def test_second_write_is_refused_and_files_untouched(tmp_path: Path) -> None:
    """Writing into a published directory raises and changes no file."""
    write(tmp_path)
    before = snapshot(pdir(tmp_path))
    with pytest.raises(CorruptCheckpoint, match="already published"):
        write(tmp_path, records=[{"other": 1}])
    with pytest.raises(CorruptCheckpoint, match="already published"):
        write(tmp_path)
    assert snapshot(pdir(tmp_path)) == before


def test_racing_writers_exactly_one_publishes(tmp_path: Path) -> None:
    """Two threads publishing at the same moment: one wins, the other gets a typed error."""
    barrier = threading.Barrier(2)
    outcomes: dict[int, Any] = {}

    def writer(index: int) -> None:
        try:
            outcomes[index] = write(
                tmp_path,
                records=[{"writer": index}],
                before_publish=lambda: barrier.wait(timeout=30),
            )
        except CorruptCheckpoint as exc:
            outcomes[index] = exc

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    winners = [o for o in outcomes.values() if isinstance(o, Manifest)]
    losers = [o for o in outcomes.values() if isinstance(o, CorruptCheckpoint)]
    assert len(winners) == 1 and len(losers) == 1
    assert "already published" in losers[0].message
    assert read(tmp_path) == winners[0]
    assert restore(tmp_path) == list(iter_records(tmp_path, winners[0]))
    # The loser removed its own records file; only the winner's remains.
    assert sorted(p.name for p in pdir(tmp_path).iterdir()) == sorted(
        [MANIFEST_NAME, winners[0].records_file]
    )


def test_crash_before_publish_leaves_unpublished_directory(tmp_path: Path) -> None:
    """A crash between records and manifest leaves no manifest, and reading fails."""

    def crash() -> None:
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError, match="simulated crash"):
        write(tmp_path, before_publish=crash)
    names = [p.name for p in pdir(tmp_path).iterdir()]
    assert MANIFEST_NAME not in names
    assert [n for n in names if n.startswith("records-")]
    with pytest.raises(CorruptCheckpoint, match="no manifest"):
        read(tmp_path)


def test_unpublished_directory_can_be_written_again(tmp_path: Path) -> None:
    """After a crash before publishing, a retry publishes normally."""

    def crash() -> None:
        raise RuntimeError("simulated crash")

    with pytest.raises(RuntimeError):
        write(tmp_path, before_publish=crash)
    write(tmp_path)
    assert restore(tmp_path) == RECORDS


def test_missing_checkpoint_is_corrupt(tmp_path: Path) -> None:
    """A participant directory that never existed reads as an unpublished checkpoint."""
    with pytest.raises(CorruptCheckpoint, match="no manifest: unpublished or missing"):
        read(tmp_path)


def test_manifest_count_mismatch_is_corrupt(tmp_path: Path) -> None:
    """A manifest whose record_count disagrees with the file is refused."""
    write(tmp_path)
    rewrite_manifest(tmp_path, record_count=len(RECORDS) + 1)
    manifest = read(tmp_path)
    with pytest.raises(CorruptCheckpoint, match="count mismatch"):
        verify_records(tmp_path, manifest)


@pytest.mark.parametrize(
    ("field", "value"),
    [("kind", "resources"), ("instance", "other_agent"), ("checkpoint_id", "ckpt-0002")],
)
def test_foreign_manifest_is_corrupt(tmp_path: Path, field: str, value: str) -> None:
    """A manifest naming another kind, instance or checkpoint is refused."""
    write(tmp_path)
    rewrite_manifest(tmp_path, **{field: value})
    with pytest.raises(CorruptCheckpoint, match="foreign checkpoint"):
        read(tmp_path)


def test_manifest_copied_from_another_instance_is_corrupt(tmp_path: Path) -> None:
    """A whole participant directory copied under another instance's name is refused."""
    write(tmp_path, instance="agent_a")
    source = participant_dir(tmp_path, KIND, "agent_a")
    target = participant_dir(tmp_path, KIND, "agent_b")
    source.rename(target)
    with pytest.raises(CorruptCheckpoint, match="foreign checkpoint"):
        read(tmp_path, instance="agent_b")


def test_read_without_checkpoint_id_accepts_any(tmp_path: Path) -> None:
    """checkpoint_id=None skips the checkpoint check but keeps the others."""
    write(tmp_path)
    manifest = read_manifest(tmp_path, kind=KIND, instance=INSTANCE)
    assert manifest.checkpoint_id == CKPT


@pytest.mark.parametrize("version", [0, 2, "1", True, None])
def test_unknown_schema_version_is_corrupt(tmp_path: Path, version: Any) -> None:
    """A manifest with any schema_version other than the int 1 is refused."""
    write(tmp_path)
    rewrite_manifest(tmp_path, schema_version=version)
    with pytest.raises(CorruptCheckpoint, match="schema_version"):
        read(tmp_path)


@pytest.mark.parametrize(
    ("field", "value"),
    [("record_count", "3"), ("record_count", -1), ("record_count", True), ("kind", 5)],
)
def test_manifest_field_types_are_checked(tmp_path: Path, field: str, value: Any) -> None:
    """Manifest fields of the wrong type are refused."""
    write(tmp_path)
    rewrite_manifest(tmp_path, **{field: value})
    with pytest.raises(CorruptCheckpoint, match=field):
        read(tmp_path)


def test_manifest_not_json_is_corrupt(tmp_path: Path) -> None:
    """A manifest that is not a JSON object is refused."""
    write(tmp_path)
    path = pdir(tmp_path) / MANIFEST_NAME
    path.write_text("{not json")
    with pytest.raises(CorruptCheckpoint, match="not valid JSON"):
        read(tmp_path)
    path.write_text("[1, 2]")
    with pytest.raises(CorruptCheckpoint, match="not a JSON object"):
        read(tmp_path)


def test_symlinked_manifest_is_corrupt(tmp_path: Path) -> None:
    """A manifest.json that is a symlink is refused."""
    write(tmp_path)
    move_behind_symlink(pdir(tmp_path) / MANIFEST_NAME, tmp_path / "elsewhere.json")
    with pytest.raises(CorruptCheckpoint, match="manifest is a symbolic link"):
        read(tmp_path)


# ------------------------------------------------------------- encoding


def test_a_manifest_without_extras_has_the_standard_librarys_bytes(tmp_path: Path) -> None:
    """Gym's seven fields, sorted, two-space indent, final newline: as json.dumps writes them."""
    manifest = write(tmp_path)
    raw = (pdir(tmp_path) / MANIFEST_NAME).read_bytes()
    expected = json.dumps(manifest.to_json(), sort_keys=True, indent=2) + "\n"
    assert raw == expected.encode("ascii")
    assert manifest.extras == {}


def test_manifest_extras_keep_what_only_the_standard_library_writes(tmp_path: Path) -> None:
    """An integer beyond 64 bits and non-ASCII text in extras are written and read back exactly."""
    manifest = write(tmp_path, extras={"big": 2**70, "note": "é ☃"})
    raw = (pdir(tmp_path) / MANIFEST_NAME).read_bytes()
    assert raw.isascii()
    assert read(tmp_path) == manifest
    assert read(tmp_path).extras["big"] == 2**70


# ------------------------------------------------------------- reading


def test_reading_a_manifest_allocates_about_what_it_reads(tmp_path: Path) -> None:
    """A manifest of a few hundred bytes is read without a buffer the size of the limit."""
    write(tmp_path)
    tracemalloc.start()
    try:
        read(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1024 * 1024


def test_a_manifest_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    """The limit holds though the manifest is read in chunks."""
    write(tmp_path, extras={"pad": "x" * 200_000})
    with pytest.raises(ManifestTooLarge, match="over its cap of 100000 bytes") as caught:
        read_manifest(tmp_path, kind=KIND, instance=INSTANCE, max_bytes=100_000)
    assert caught.value.limit == 100_000 and caught.value.unit == "bytes"
    assert read_manifest(tmp_path, kind=KIND, instance=INSTANCE, max_bytes=300_000).extras


def test_a_huge_manifest_is_refused_by_its_size_before_it_is_read(tmp_path: Path) -> None:
    """A 4 GiB (sparse) manifest is refused from its size alone: nothing near it is allocated."""
    write(tmp_path)
    path = pdir(tmp_path) / MANIFEST_NAME
    with open(path, "r+b") as stream:
        stream.truncate(4 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(ManifestTooLarge) as caught:
            read(tmp_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert caught.value.found == 4 << 30 and caught.value.limit == DEFAULT_MAX_MANIFEST_BYTES
    assert peak < 256 * 1024


def test_a_manifest_of_too_many_values_is_refused(tmp_path: Path) -> None:
    """Small in bytes but many JSON values (extras of empty lists) is refused by the value cap."""
    write(tmp_path, extras={"pad": [[] for _ in range(300)]})
    with pytest.raises(ManifestTooLarge, match="lists 3") as caught:
        read_manifest(tmp_path, kind=KIND, instance=INSTANCE, max_values=300)
    assert caught.value.unit == "entries" and caught.value.limit == 300
    assert read_manifest(tmp_path, kind=KIND, instance=INSTANCE, max_values=400).extras


def test_a_deeply_nested_manifest_is_refused_not_crashed_on(tmp_path: Path) -> None:
    """Nesting past the parser's recursion limit is CorruptCheckpoint, not RecursionError."""
    write(tmp_path)
    (pdir(tmp_path) / MANIFEST_NAME).write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(CorruptCheckpoint, match="nested too deeply"):
        read(tmp_path)


def test_a_fifo_named_manifest_is_refused_without_blocking(tmp_path: Path) -> None:
    """A FIFO in the manifest's place is not a regular file: refused at once, no reader hangs."""
    write(tmp_path)
    path = pdir(tmp_path) / MANIFEST_NAME
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(CorruptCheckpoint, match="not a regular file"):
        read(tmp_path)
