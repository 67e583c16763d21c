"""Tests for envckpt.participant.store.layout: the participant directory and the names in it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envckpt.errors import CorruptCheckpoint
from envckpt.participant.store import MANIFEST_NAME, participant_dir, records_path

from helpers.store_files import move_behind_symlink, pdir, read, rewrite_manifest, write


def test_participant_dir_layout_and_validation(tmp_path: Path) -> None:
    """participant_dir is <dir>/gym/<kind>/<instance> and refuses unsafe components."""
    assert participant_dir(tmp_path, "agent", "a1") == tmp_path / "gym" / "agent" / "a1"
    for bad in ("..", "a/b", "", "."):
        with pytest.raises(ValueError):
            participant_dir(tmp_path, bad, "a1")
        with pytest.raises(ValueError):
            participant_dir(tmp_path, "agent", bad)


@pytest.mark.parametrize(
    "records_file",
    ["../x", "/etc/passwd", "../records-" + "0" * 64 + ".jsonl", "sub/records.jsonl", ".."],
)
def test_records_file_outside_directory_is_corrupt(tmp_path: Path, records_file: str) -> None:
    """A records_file that names a path outside the participant directory is refused."""
    write(tmp_path)
    rewrite_manifest(tmp_path, records_file=records_file)
    with pytest.raises(CorruptCheckpoint, match="escapes"):
        read(tmp_path)


def test_records_file_symlink_outside_directory_is_corrupt(tmp_path: Path) -> None:
    """A records file that is a symlink leading out of the directory is refused."""
    manifest = write(tmp_path)
    move_behind_symlink(records_path(tmp_path, manifest), tmp_path / "outside.jsonl")
    with pytest.raises(CorruptCheckpoint, match="escapes"):
        read(tmp_path)


def test_records_file_not_matching_digest_is_corrupt(tmp_path: Path) -> None:
    """A records_file name that is not records-<records_sha256>.jsonl is refused."""
    write(tmp_path)
    rewrite_manifest(tmp_path, records_file="records-" + "a" * 64 + ".jsonl")
    with pytest.raises(CorruptCheckpoint, match="does not match"):
        read(tmp_path)
    rewrite_manifest(tmp_path, records_file="records.jsonl")
    with pytest.raises(CorruptCheckpoint, match="not a records-<sha256>"):
        read(tmp_path)


def test_temp_files_do_not_survive_a_publish(tmp_path: Path) -> None:
    """After a successful write only manifest.json and the records file remain."""
    manifest = write(tmp_path)
    assert sorted(os.listdir(pdir(tmp_path))) == sorted([MANIFEST_NAME, manifest.records_file])
