"""Tests for envckpt.snapshots.cli: the snapshot verbs on a real demo's directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from envckpt.cli import main
from envckpt.trainer.catalog import SnapshotCatalog
from envckpt.trainer.layout import SnapshotLayout

from helpers.demo_cli import run_main
from helpers.root_holder import held_by_another_process
from helpers.snapshot_corruption import records_file
from helpers.snapshot_files import flip_byte, publish
from helpers.stepped_root import stepped_root
from helpers.tree_state import tree_state


def snapshots(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """``envckpt snapshots ARGS``: exit code, stdout, stderr (of this call only)."""
    capsys.readouterr()  # what building the root printed is not the command's
    with capture_logs():  # events go to the host's logging, never into the command's output
        code = main(["snapshots", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fits(text: str) -> bool:
    return all(len(line) <= 100 for line in text.splitlines())


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished in-process demo: its directory holds the snapshots it left."""
    directory = tmp_path_factory.mktemp("demo")
    code, out, err = run_main(
        ["--in-process", "--dir", str(directory), "--instances", "2", "--rollouts", "8"]
    )
    assert code == 0, out + err
    assert SnapshotCatalog(directory).all(), "the demo left no snapshot"
    return directory


def test_list_show_and_verify_read_a_demo_directory(
    demo_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's snapshots list, show and verify (exit 0), in tables within 100 columns."""
    [*_, newest] = SnapshotCatalog(demo_dir).all()
    code, out, _ = snapshots(capsys, "list", demo_dir)
    assert code == 0 and fits(out) and newest.checkpoint_id in out and "demo/replica" not in out
    code, out, _ = snapshots(capsys, "show", demo_dir, "latest")
    assert code == 0 and fits(out)
    assert newest.checkpoint_id in out and "demo/replica-1" in out and "agent/simple_agent" in out
    assert "continue at their saved turn" in out
    code, out, _ = snapshots(capsys, "verify", demo_dir)
    assert code == 0 and fits(out)
    assert f"{newest.checkpoint_id}: PASS" in out and "0 failed" in out


def test_every_verb_speaks_json(demo_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--json prints one JSON document per verb with the facts the tables show."""
    [*_, newest] = SnapshotCatalog(demo_dir).all()
    code, out, _ = snapshots(capsys, "list", demo_dir, "--json")
    listed = json.loads(out)
    assert code == 0 and listed["snapshots"][-1]["id"] == newest.checkpoint_id
    assert listed["snapshots"][-1]["episodes"] == newest.episodes and listed["refused"] == []
    code, out, _ = snapshots(capsys, "show", demo_dir, newest.checkpoint_id, "--json")
    shown = json.loads(out)
    assert code == 0 and shown["id"] == newest.checkpoint_id
    assert set(shown["instances"]) == {"demo/replica-0", "demo/replica-1"}
    assert len(shown["restore"]["continued"]) == newest.episodes
    code, out, _ = snapshots(capsys, "verify", demo_dir, newest.checkpoint_id, "--json")
    verified = json.loads(out)
    assert code == 0 and verified["passed"] is True
    assert all(check["passed"] for check in verified["snapshots"][0]["checks"])


async def test_verify_fails_on_a_corrupted_file_and_names_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One flipped byte in a participant's records: verify exits 1 and names the file."""
    root, ids = await stepped_root(tmp_path, steps=(1, 2))
    bad = SnapshotLayout(root).snapshots / ids[1]
    records = records_file(bad)
    flip_byte(records)
    code, out, _ = snapshots(capsys, "verify", root)
    assert code == 1 and fits(out)
    assert f"{ids[0]}: PASS" in out and f"{ids[1]}: FAIL" in out
    assert "checksum mismatch in" in out and "2 snapshot(s) verified, 1 failed" in out
    code, out, _ = snapshots(capsys, "verify", root, ids[1], "--json")
    document = json.loads(out)
    assert code == 1 and document["passed"] is False
    details = [c["detail"] for c in document["snapshots"][0]["checks"] if not c["passed"]]
    assert any(records.relative_to(bad).as_posix() in detail for detail in details)


async def test_verify_draws_a_progress_bar_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--progress always shows the hashing on stderr; never leaves stderr quiet."""
    root, _ = await stepped_root(tmp_path, steps=(4,))
    code, _, err = snapshots(capsys, "verify", root, "--progress", "always")
    assert code == 0 and "verifying rollouts-step0000000004-" in err and "kB" in err
    code, _, err = snapshots(capsys, "verify", root, "--progress", "never")
    assert code == 0 and err == ""


async def test_show_finds_snapshots_by_step_and_refuses_unknown_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """step:N shows that step's snapshot; an unknown id or step exits 1, a bad step 2."""
    root, ids = await stepped_root(tmp_path, steps=(7, 8))
    code, out, _ = snapshots(capsys, "show", root, "step:7", "--json")
    assert code == 0 and json.loads(out)["id"] == ids[0]
    for missing in ("step:9", "rollouts-nope"):
        code, _, err = snapshots(capsys, "show", root, missing)
        assert code == 1 and "no " in err
    code, _, err = snapshots(capsys, "show", root, "step:seven")
    assert code == 2 and "integer" in err


async def test_prune_and_delete_go_through_the_trash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """prune --keep 2 deletes the oldest; delete removes one; neither leaves a trash behind."""
    root, ids = await stepped_root(tmp_path, steps=(1, 2, 3))
    code, out, _ = snapshots(capsys, "prune", root, "--keep", "2", "--json")
    assert code == 0 and json.loads(out) == {
        "root": str(root),
        "removed": [ids[0]],
        "kept": [ids[2], ids[1]],
        "left": [],
    }
    code, out, _ = snapshots(capsys, "delete", root, ids[2])
    assert code == 0 and out == f"deleted {ids[2]}\n"
    assert [e.checkpoint_id for e in SnapshotCatalog(root).all()] == [ids[1]]
    assert not any(SnapshotLayout(root).trash.iterdir())
    code, _, err = snapshots(capsys, "prune", root, "--keep", "0")
    assert code == 2 and "at least 1" in err


async def test_prune_and_delete_refuse_while_a_trainer_holds_the_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With the root's lock held by another process both exit 3 and change nothing."""
    root, ids = await stepped_root(tmp_path, steps=(1, 2))
    with held_by_another_process(root) as pid:
        for verb in (["prune", root, "--keep", "1"], ["delete", root, ids[0]]):
            code, out, err = snapshots(capsys, *verb)
            assert code == 3 and out == ""
            assert f"a trainer holds {root} (pid {pid}" in err
    assert [e.checkpoint_id for e in SnapshotCatalog(root).all()] == ids
    code, _, _ = snapshots(capsys, "delete", root, ids[0])
    assert code == 0, "the lock was released with the process"


def test_a_root_that_is_none_is_refused_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A missing directory, or snapshots/ itself given as ROOT, exits 2 with the fix."""
    code, _, err = snapshots(capsys, "list", tmp_path / "missing")
    assert code == 2 and "is not a directory" in err
    (tmp_path / "run" / "snapshots").mkdir(parents=True)
    code, _, err = snapshots(capsys, "list", tmp_path / "run" / "snapshots")
    assert code == 2 and f"holds it: {tmp_path / 'run'}" in err
    code, out, _ = snapshots(capsys, "list", tmp_path / "run")
    assert code == 0 and out.startswith("no snapshots in ")
    code, _, err = snapshots(capsys, "show", tmp_path / "run", "latest")
    assert code == 1 and "no usable snapshot" in err


def test_the_console_script_runs_the_verbs(demo_dir: Path) -> None:
    """`python -m envckpt snapshots list ROOT --json` works as a process, exit code and all."""
    done = subprocess.run(
        [sys.executable, "-m", "envckpt", "snapshots", "list", str(demo_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["snapshots"]


@pytest.mark.parametrize("verb", ["list", "verify", "show", "prune", "delete"])
def test_a_directory_that_is_no_snapshot_root_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], verb: str
) -> None:
    """A directory without snapshots/ (a mistyped path, /) is not a root: exit 2, one line."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "results.json").write_text("{}")
    extra = {"show": ["latest"], "prune": ["--keep", "1"], "delete": ["ck-1"]}.get(verb, [])
    for root in (tmp_path / "data", Path("/")):
        code, out, err = snapshots(capsys, verb, root, *extra)
        assert code == 2 and out == ""
        assert err.splitlines() == [
            f"envckpt snapshots {verb}: {root} is not a snapshot root: it holds no snapshots/ "
            "directory (give the directory a trainer was given as its root)"
        ]


def test_verify_of_the_filesystem_root_exits_non_zero_as_a_process() -> None:
    """The red-team case, as a CI check would run it: `envckpt snapshots verify /` fails."""
    done = subprocess.run(
        [sys.executable, "-m", "envckpt", "snapshots", "verify", "/"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert "/ is not a snapshot root" in done.stderr


@pytest.mark.parametrize("linked", ["snapshots", ".tmp", ".trash", "refused"])
def test_a_root_with_a_linked_directory_is_refused_by_every_verb(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], linked: str
) -> None:
    """A snapshots/, .tmp, .trash or refused/ that is a link: exit 2 naming it; nothing
    where it points is read as a snapshot or touched."""
    layout = SnapshotLayout(tmp_path / "root")
    for index in range(2):
        publish(layout, f"ck-{index}", float(index + 1))
    layout.refused.mkdir()
    layout.trash.mkdir()
    elsewhere = tmp_path / "elsewhere"
    shutil.move(layout.root / linked, elsewhere)
    (layout.root / linked).symlink_to(elsewhere)
    if linked != "snapshots":
        (elsewhere / "envckpt-theirs").mkdir()
    before = tree_state(elsewhere)
    for verb in (["list"], ["verify"], ["prune", "--keep", "1"], ["delete", "ck-0"]):
        code, out, err = snapshots(capsys, verb[0], layout.root, *verb[1:])
        assert code == 2 and out == ""
        assert f"{layout.root / linked} is a symbolic link" in err
    assert tree_state(elsewhere) == before


def test_prune_with_a_stray_newer_file_keeps_the_newest_snapshot_and_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The red-team case: notes.txt newer than 3 snapshots; --keep 1 deletes the two older
    snapshots only, leaves the file and says so."""
    layout = SnapshotLayout(tmp_path / "root")
    ids = [f"rollouts-step000000000{i}-abc" for i in range(3)]
    for index, checkpoint_id in enumerate(ids):
        publish(layout, checkpoint_id, float(index + 1))
    notes = layout.snapshots / "notes.txt"
    notes.write_text("my notes")
    os.utime(notes, (1e10, 1e10))
    code, out, _ = snapshots(capsys, "prune", layout.root, "--keep", "1")
    assert code == 0 and fits(out)
    assert out.splitlines() == [
        f"deleted {ids[1]}",
        f"deleted {ids[0]}",
        "left snapshots/notes.txt: a regular file, not a snapshot",
        "kept 1 snapshot(s), deleted 2, left 1 entry envckpt did not make",
    ]
    assert notes.read_text() == "my notes"
    assert [e.checkpoint_id for e in SnapshotCatalog(layout.root).all()] == [ids[2]]
    code, out, _ = snapshots(capsys, "prune", layout.root, "--keep", "1", "--json")
    assert json.loads(out)["left"] == [
        {"path": str(notes), "why": "a regular file, not a snapshot"}
    ]


def test_list_names_foreign_entries_and_delete_refuses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """list prints what is not a snapshot (and --json lists it); delete of an id-named
    directory without a verifying manifest exits 1 and leaves it."""
    layout = SnapshotLayout(tmp_path / "root")
    publish(layout, "ck-1", 1.0)
    mine = layout.snapshots / "ck-mine"
    mine.mkdir()
    (mine / "weights.bin").write_bytes(b"w")
    (layout.snapshots / "notes.txt").write_text("x")
    code, out, _ = snapshots(capsys, "list", layout.root)
    assert code == 0
    assert "not a snapshot, left alone: snapshots/notes.txt: a regular file" in out
    code, out, _ = snapshots(capsys, "list", layout.root, "--json")
    assert sorted(Path(e["path"]).name for e in json.loads(out)["foreign"]) == [
        "ck-mine",
        "notes.txt",
    ]
    code, out, err = snapshots(capsys, "delete", layout.root, "ck-mine")
    assert code == 1 and out == ""
    assert f"refused to delete {mine}" in err and "MANIFEST.json does not verify" in err
    assert (mine / "weights.bin").read_bytes() == b"w"
