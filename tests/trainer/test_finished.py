"""Tests of a snapshot root's record that its job finished."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import pytest

from envckpt.trainer.finished import (
    FINISHED_NAME,
    MAX_FINISHED_BYTES,
    FinishedRecordDamaged,
    read_finished,
    record_finished,
)
from envckpt.trainer.job_errors import StartRefused


def test_a_recorded_finish_reads_back(tmp_path: Path) -> None:
    """The record names the rollouts, the results' digest and when; its line says so."""
    written = record_finished(tmp_path, results=b'{"r": 1}', rollouts=1)
    read = read_finished(tmp_path)
    assert read == written
    assert read.rollouts == 1 and read.results_sha256 == hashlib.sha256(b'{"r": 1}').hexdigest()
    line = read.line(tmp_path)
    assert line.startswith("already finished: ") and "1 rollouts" in line


def test_no_record_is_none_and_reading_creates_nothing(tmp_path: Path) -> None:
    """A root without the record, or no root at all: None, and nothing is created."""
    assert read_finished(tmp_path) is None
    assert read_finished(tmp_path / "missing") is None
    assert not (tmp_path / "missing").exists() and list(tmp_path.iterdir()) == []
    (tmp_path / "file").write_text("x")
    assert read_finished(tmp_path / "file") is None


@pytest.mark.parametrize(
    "content",
    [b"", b"{}", b'{"kind": "envckpt.finished", "schema_version": 1}', b"\xff\xfe"],
)
def test_a_damaged_record_refuses_the_start(tmp_path: Path, content: bytes) -> None:
    """Tampered: empty, foreign, incomplete or not text: a StartRefused naming the file."""
    (tmp_path / FINISHED_NAME).write_bytes(content)
    with pytest.raises(FinishedRecordDamaged, match=FINISHED_NAME) as caught:
        read_finished(tmp_path)
    assert isinstance(caught.value, StartRefused)
    assert pickle.loads(pickle.dumps(caught.value)).root == str(tmp_path)


def test_an_edited_record_fails_its_checksum(tmp_path: Path) -> None:
    """Tampered: one rollout count changed by hand is refused."""
    record_finished(tmp_path, results=b"{}", rollouts=3)
    path = tmp_path / FINISHED_NAME
    path.write_bytes(path.read_bytes().replace(b'"rollouts": 3', b'"rollouts": 4'))
    with pytest.raises(FinishedRecordDamaged, match="checksum"):
        read_finished(tmp_path)


def test_an_unreadable_record_refuses_the_start(tmp_path: Path) -> None:
    """A record this user cannot read: refused, not taken for 'not finished'."""
    record_finished(tmp_path, results=b"{}", rollouts=0)
    (tmp_path / FINISHED_NAME).chmod(0)
    try:
        if os.access(tmp_path / FINISHED_NAME, os.R_OK):
            pytest.skip("running as a user who reads any file")
        with pytest.raises(FinishedRecordDamaged, match="cannot read"):
            read_finished(tmp_path)
    finally:
        (tmp_path / FINISHED_NAME).chmod(0o600)


def test_a_linked_record_is_damage_not_a_record(tmp_path: Path) -> None:
    """A FINISHED.json linked to another root's record is not followed (O_NOFOLLOW):
    a requeue is refused, never silently turned into a no-op by someone else's file."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    record_finished(elsewhere, results=b"{}", rollouts=2)
    root = tmp_path / "root"
    root.mkdir()
    (root / FINISHED_NAME).symlink_to(elsewhere / FINISHED_NAME)
    with pytest.raises(FinishedRecordDamaged, match="symbolic link"):
        read_finished(root)


def test_a_record_over_its_cap_is_refused_without_being_read_whole(tmp_path: Path) -> None:
    """A record is a few hundred bytes; one over 64 KiB is damage (typed, naming the cap)."""
    (tmp_path / FINISHED_NAME).write_bytes(b" " * (MAX_FINISHED_BYTES + 1))
    with pytest.raises(FinishedRecordDamaged, match=f"cap of {MAX_FINISHED_BYTES} bytes"):
        read_finished(tmp_path)
