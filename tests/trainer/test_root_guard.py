"""Tests for envckpt.trainer.root_guard: one trainer per root, and a root proven usable
and safe (no link among its directories)."""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import pytest

from envckpt.trainer.job_errors import (
    JobExit,
    SnapshotRootLocked,
    SnapshotRootUnsafe,
    SnapshotRootUnusable,
    exit_code_for,
)
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.root_guard import RootLock, probe_root
from envckpt.trainer.startup import claim_root

from helpers.root_holder import held_by_another_process


def test_the_lock_names_its_holder_and_is_reentrant_within_a_process(tmp_path: Path) -> None:
    """The lock file says pid, host and since; a second acquire here shares the hold."""
    root = tmp_path / "root"
    lock = RootLock.acquire(root)
    again = RootLock.acquire(root)
    assert again is lock
    holder = json.loads((root / ".lock").read_text())
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    assert holder["since"]
    again.release()
    assert lock.held
    lock.release()
    assert not lock.held
    with RootLock.acquire(root) as fresh:
        assert fresh is not lock and fresh.held


def test_a_second_process_is_refused_with_the_holder_named(tmp_path: Path) -> None:
    """Another process's lock makes acquire raise SnapshotRootLocked with pid, host, since."""
    root = tmp_path / "root"
    with held_by_another_process(root) as pid:
        with pytest.raises(SnapshotRootLocked) as caught:
            RootLock.acquire(root)
        error = caught.value
        assert error.pid == pid and error.host == socket.gethostname() and error.since
        assert str(pid) in str(error) and "own root" in str(error)
    with RootLock.acquire(root) as lock:  # released when that process ended
        assert lock.held


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    """flock dies with its process: after a SIGKILL the root is free at once."""
    root = tmp_path / "root"
    with held_by_another_process(root) as pid:
        with pytest.raises(SnapshotRootLocked):
            RootLock.acquire(root)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)  # reaped: nothing of the holder is left
        with RootLock.acquire(root) as lock:
            assert lock.held


def test_a_root_that_cannot_be_created_is_unusable(tmp_path: Path) -> None:
    """A root below a file cannot even be created: the step is named, no traceback needed."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(SnapshotRootUnusable) as caught:
        RootLock.acquire(blocker / "root")
    assert caught.value.step == "create the snapshot root"
    assert str(blocker / "root") in str(caught.value)


@pytest.mark.parametrize(
    ("in_the_way", "step"),
    [(".tmp", "create a directory under .tmp"), ("snapshots", "create snapshots/")],
)
def test_the_probe_refuses_a_root_that_cannot_publish(
    tmp_path: Path, in_the_way: str, step: str
) -> None:
    """A file where a directory must be makes the probe fail at that step, leaving nothing."""
    layout = SnapshotLayout(tmp_path / "root")
    layout.root.mkdir()
    (layout.root / in_the_way).write_text("not a directory")
    with pytest.raises(SnapshotRootUnusable) as caught:
        probe_root(layout)
    assert caught.value.step == step and caught.value.root == str(layout.root)
    assert "cannot hold snapshots" in str(caught.value)
    if layout.temporary.is_dir():
        assert list(layout.temporary.iterdir()) == []


def test_a_usable_root_passes_the_probe_and_keeps_nothing_of_it(tmp_path: Path) -> None:
    """The probe creates, fsyncs, renames into snapshots/ and deletes; nothing is listed after."""
    layout = SnapshotLayout(tmp_path / "root")
    probe_root(layout)
    assert list(layout.snapshots.iterdir()) == []
    assert list(layout.temporary.iterdir()) == []
    assert layout.published() == []


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    """A .lock linked to another file would be truncated and written: SnapshotRootUnsafe."""
    root = tmp_path / "root"
    root.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (root / ".lock").symlink_to(victim)
    with pytest.raises(SnapshotRootUnsafe) as caught:
        RootLock.acquire(root)
    assert caught.value.path == str(root / ".lock") and "symbolic link" in str(caught.value)
    assert victim.read_text() == "precious"


@pytest.mark.parametrize("linked", ["snapshots", ".tmp", ".trash", "refused"])
def test_the_probe_refuses_a_root_whose_directory_is_a_link(tmp_path: Path, linked: str) -> None:
    """Before any write, a root directory that is a link is SnapshotRootUnsafe naming it;
    the directory it points to is left exactly as it was."""
    layout = SnapshotLayout(tmp_path / "root")
    layout.root.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "theirs").write_text("keep")
    (layout.root / linked).symlink_to(elsewhere)
    with pytest.raises(SnapshotRootUnsafe) as caught:
        probe_root(layout)
    assert caught.value.path == str(layout.root / linked)
    assert exit_code_for(caught.value) is JobExit.START_REFUSED
    assert [p.name for p in elsewhere.iterdir()] == ["theirs"]


@pytest.mark.parametrize("linked", [".lock", "FINISHED.json", "telemetry.jsonl"])
def test_the_probe_refuses_a_root_whose_own_file_is_a_link(tmp_path: Path, linked: str) -> None:
    """The root's files are envckpt's too: a link in their place (to a file of the
    operator's) is SnapshotRootUnsafe naming it, and the file it points to is untouched."""
    layout = SnapshotLayout(tmp_path / "root")
    layout.root.mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (layout.root / linked).symlink_to(victim)
    with pytest.raises(SnapshotRootUnsafe) as caught:
        probe_root(layout)
    assert caught.value.path == str(layout.root / linked) and "real file" in str(caught.value)
    assert victim.read_text() == "precious"


def test_claim_root_refuses_a_symlinked_tmp_before_anything_is_cleaned(tmp_path: Path) -> None:
    """The red-team case: .tmp linked to a directory of the operator's; the trainer's first
    step refuses, the lock is given back, and nothing there is deleted."""
    layout = SnapshotLayout(tmp_path / "root")
    layout.root.mkdir()
    theirs = tmp_path / "home-dir"
    (theirs / "envckpt-looks-ours").mkdir(parents=True)
    (theirs / "notes.txt").write_text("keep")
    (layout.root / ".tmp").symlink_to(theirs)
    with pytest.raises(SnapshotRootUnsafe):
        claim_root(layout.root)
    assert sorted(p.name for p in theirs.iterdir()) == ["envckpt-looks-ours", "notes.txt"]
    with RootLock.acquire(layout.root) as lock:  # released on the refusal
        assert lock.held
