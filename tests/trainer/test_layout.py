"""Tests for envckpt.trainer.layout: publish, listing, prune through the trash, quarantine,
and that nothing but envckpt's own entries is ever removed, never through a link."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from envckpt import crashpoints
from envckpt.crashpoints import SimulatedCrash
from envckpt.trainer import layout as layout_module
from envckpt.trainer.job_errors import SnapshotNotOwned, SnapshotRootUnsafe
from envckpt.trainer.layout import SnapshotLayout
from envckpt.trainer.snapshot_manifest import (
    MANIFEST_KIND,
    MANIFEST_NAME,
    SCHEMA_VERSION,
    build_snapshot_manifest,
    verify_snapshot,
)

from helpers.examples import examples
from helpers.snapshot_files import FILES, fill, publish
from helpers.tree_state import changed_outside, tree_state


@pytest.fixture
def layout(tmp_path: Path) -> SnapshotLayout:
    return SnapshotLayout(tmp_path / "root")


def test_publish_writes_the_manifest_then_renames_the_directory_into_place(
    layout: SnapshotLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the rename the temporary directory already verifies; the same directory is moved."""
    temporary = layout.new_temporary("ck-1")
    assert temporary == layout.temporary / "envckpt-ck-1"
    fill(temporary)
    inode = temporary.stat().st_ino
    manifest = build_snapshot_manifest(
        temporary, checkpoint_id="ck-1", created_at=100.0, metrics={"snapshot_bytes": 42.0}
    )
    assert not (temporary / MANIFEST_NAME).exists()
    renames: list[tuple[str, str]] = []
    real_rename = os.rename

    def spy(source: str, target: str, **fds: Any) -> None:
        written = json.loads((temporary / MANIFEST_NAME).read_bytes())
        assert written["checkpoint_id"] == "ck-1" and len(written["files"]) == len(FILES)
        assert not (layout.snapshots / target).exists()
        renames.append((source, target))
        real_rename(source, target, **fds)

    monkeypatch.setattr(os, "rename", spy)
    final = layout.publish(temporary, manifest)
    assert renames == [("envckpt-ck-1", "ck-1")]
    assert final == layout.snapshots / "ck-1"
    assert final.stat().st_ino == inode and verify_snapshot(final) == manifest
    assert not temporary.exists()
    document = json.loads((final / MANIFEST_NAME).read_bytes())
    assert document["kind"] == MANIFEST_KIND and document["schema_version"] == SCHEMA_VERSION
    assert document["checkpoint_id"] == "ck-1" and document["created_at"] == 100.0


def test_no_latest_pointer_is_written(layout: SnapshotLayout) -> None:
    """The newest snapshot comes from listing verified manifests; no LATEST file goes stale."""
    assert layout.newest() is None
    publish(layout, "ck-1", 1.0)
    publish(layout, "ck-2", 2.0)
    assert layout.newest() == "ck-2"
    assert not (layout.root / "LATEST").exists()


def test_a_failed_rename_publishes_nothing(
    layout: SnapshotLayout, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the rename fails the snapshot stays unpublished debris; the newest is unchanged."""
    publish(layout, "ck-1", 1.0)
    temporary = layout.new_temporary("ck-2")
    fill(temporary)
    manifest = build_snapshot_manifest(temporary, checkpoint_id="ck-2", created_at=2.0, metrics={})

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("EXDEV")

    monkeypatch.setattr(os, "rename", refuse)
    with pytest.raises(OSError, match="EXDEV"):
        layout.publish(temporary, manifest)
    monkeypatch.undo()
    assert [path.name for path in layout.published()] == ["ck-1"]
    assert layout.newest() == "ck-1"
    assert layout.clean_debris().removed == (".tmp/envckpt-ck-2",)
    assert not temporary.exists()


def test_published_lists_newest_first_by_manifest_time_then_name(layout: SnapshotLayout) -> None:
    """Order is by created_at, ties by name; a directory without a valid manifest by its mtime;
    files, links and probe leftovers are no snapshots."""
    assert layout.published() == []
    for checkpoint_id, created_at in (("b", 30.0), ("c", 10.0), ("a", 20.0), ("x", 40.0)):
        publish(layout, checkpoint_id, created_at)
    publish(layout, "y", 40.0)
    (layout.snapshots / "no-manifest").mkdir()
    (layout.snapshots / "garbage").mkdir()
    (layout.snapshots / "garbage" / MANIFEST_NAME).write_text("{not json")
    os.utime(layout.snapshots / "no-manifest", (50.0, 50.0))
    os.utime(layout.snapshots / "garbage", (15.0, 15.0))
    (layout.snapshots / ".envckpt-probe-left-behind").mkdir()
    (layout.snapshots / "notes.txt").write_text("a stray file named like an id")
    (layout.snapshots / "linked").symlink_to(layout.snapshots / "x")
    assert [path.name for path in layout.published()] == [
        "no-manifest",
        "y",
        "x",
        "b",
        "a",
        "garbage",
        "c",
    ]
    listing = layout.scan()
    assert [entry.path.name for entry in listing.foreign] == ["linked", "notes.txt"]
    assert [s.name for s in listing.owned()] == ["y", "x", "b", "a", "c"]


def test_an_edited_created_at_does_not_reorder_the_candidates(layout: SnapshotLayout) -> None:
    """A manifest whose created_at was edited fails its own checksum: ordered by mtime, refused."""
    publish(layout, "ck-old", 1.0)
    newer = publish(layout, "ck-new", 2.0)
    path = layout.snapshots / "ck-old" / MANIFEST_NAME
    path.write_text(path.read_text().replace('"created_at": 1.0', '"created_at": 9.0'))
    os.utime(layout.snapshots / "ck-old", (0.5, 0.5))
    assert [p.name for p in layout.published()] == ["ck-new", "ck-old"]
    verify_snapshot(newer)


def test_prune_keeps_the_newest_k(layout: SnapshotLayout) -> None:
    """prune removes all but the newest K and returns them; K < 1 keeps one; the trash empties."""
    for index in range(4):
        publish(layout, f"ck-{index}", float(index))
    assert layout.prune(2).removed == ("ck-1", "ck-0")
    assert [path.name for path in layout.published()] == ["ck-3", "ck-2"]
    assert layout.prune(5).removed == ()
    assert layout.prune(0).removed == ("ck-2",)
    assert [path.name for path in layout.published()] == ["ck-3"]
    assert list(layout.trash.iterdir()) == []


def test_a_newer_stray_file_neither_counts_nor_goes(layout: SnapshotLayout) -> None:
    """The red-team case: a stray notes.txt newer than every snapshot; --keep 1 keeps the
    newest real snapshot, removes the two older ones, and leaves and reports the file."""
    for index in range(3):
        publish(layout, f"rollouts-step000000000{index}-abc", float(index + 1))
    stray = layout.snapshots / "notes.txt"
    stray.write_text("my notes")
    os.utime(stray, (1e10, 1e10))
    with capture_logs() as logs:
        removal = layout.prune(1)
    assert removal.removed == ("rollouts-step0000000001-abc", "rollouts-step0000000000-abc")
    assert [path.name for path in layout.published()] == ["rollouts-step0000000002-abc"]
    assert stray.read_text() == "my notes"
    assert [(entry.path, entry.why) for entry in removal.left] == [
        (stray, "a regular file, not a snapshot")
    ]
    assert [(e["event"], e["path"]) for e in logs] == [("left a foreign entry", str(stray))]
    with capture_logs() as logs:
        assert layout.prune(1).left == removal.left  # still listed, not logged again
    assert logs == []


def test_prune_orders_by_the_manifests_not_by_mtime(layout: SnapshotLayout) -> None:
    """An old snapshot whose directory mtime is the newest is still the one pruned."""
    old = publish(layout, "ck-old", 1.0)
    publish(layout, "ck-new", 2.0)
    os.utime(old, (1e10, 1e10))
    assert layout.prune(1).removed == ("ck-old",)


def test_prune_never_removes_a_directory_whose_manifest_does_not_verify(
    layout: SnapshotLayout,
) -> None:
    """A snapshot-named directory without a valid manifest is not provably envckpt's:
    it does not count toward K, is not removed, and is reported."""
    publish(layout, "ck-1", 1.0)
    publish(layout, "ck-2", 2.0)
    mine = layout.snapshots / "my-data"
    mine.mkdir()
    (mine / "weights.bin").write_bytes(b"\0" * 10)
    copied = layout.snapshots / "copied"
    shutil.copytree(layout.snapshots / "ck-1", copied)  # a valid manifest naming ck-1, not it
    removal = layout.prune(1)
    assert removal.removed == ("ck-1",)
    assert (mine / "weights.bin").exists() and (copied / MANIFEST_NAME).exists()
    assert sorted(entry.path.name for entry in removal.left) == ["copied", "my-data"]
    assert all("MANIFEST.json does not verify" in entry.why for entry in removal.left)


def test_a_crash_mid_prune_never_leaves_half_a_snapshot_among_the_published(
    layout: SnapshotLayout,
) -> None:
    """The pruned snapshot leaves snapshots/ by a rename before any delete; a restart clears it."""
    for index in range(3):
        publish(layout, f"ck-{index}", float(index))
    crashpoints.install(crashpoints.raise_at("prune.in_trash"))
    try:
        with pytest.raises(SimulatedCrash):
            layout.prune(2)
    finally:
        crashpoints.install(None)
    assert [path.name for path in layout.published()] == ["ck-2", "ck-1"]
    for path in layout.published():
        verify_snapshot(path)
    assert [path.name for path in layout.trash.iterdir()] == ["envckpt-ck-0"]
    assert layout.clean_debris().removed == (".trash/envckpt-ck-0",)
    assert list(layout.trash.iterdir()) == []


def test_quarantine_moves_a_refused_snapshot_aside_with_its_reason(layout: SnapshotLayout) -> None:
    """A refused snapshot leaves the published ones (no keep-K slot) and keeps its files."""
    publish(layout, "ck-1", 1.0)
    bad = publish(layout, "ck-2", 2.0)
    moved = layout.quarantine(bad, "ledger.json: checksum mismatch")
    assert [path.name for path in layout.published()] == ["ck-1"]
    assert moved == layout.refused / "ck-2"
    assert (moved / "ledger.json").read_bytes() == FILES["ledger.json"]
    assert (layout.refused / "ck-2.reason.txt").read_text() == "ledger.json: checksum mismatch\n"
    assert layout.refused_entries() == [("ck-2", "ledger.json: checksum mismatch")]


def test_clean_debris_removes_envckpts_leftovers_and_nothing_else(
    layout: SnapshotLayout, tmp_path: Path
) -> None:
    """envckpt-prefixed directories of .tmp and .trash and probe leftovers go; a stray file,
    an unprefixed directory and prefixed links (in or out of the root) stay, reported."""
    assert layout.clean_debris().removed == ()
    publish(layout, "ck-1", 1.0)
    for name in ("ck-2", "ck-3"):
        fill(layout.new_temporary(name))
    layout.trash.mkdir()
    shutil.copytree(layout.snapshots / "ck-1", layout.trash / "envckpt-ck-0")
    (layout.snapshots / ".envckpt-probe-abc").mkdir()
    stray = layout.temporary / ".ledger.json.tmp-1234"
    stray.write_bytes(b"half a file")
    (layout.trash / "my-backup").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("keep me")
    (layout.temporary / "envckpt-link-out").symlink_to(outside)
    (layout.trash / "envckpt-link-in").symlink_to(layout.snapshots / "ck-1")
    removal = layout.clean_debris()
    assert sorted(removal.removed) == [
        ".tmp/envckpt-ck-2",
        ".tmp/envckpt-ck-3",
        ".trash/envckpt-ck-0",
        "snapshots/.envckpt-probe-abc",
    ]
    assert sorted(str(entry.path.relative_to(layout.root)) for entry in removal.left) == [
        ".tmp/.ledger.json.tmp-1234",
        ".tmp/envckpt-link-out",
        ".trash/envckpt-link-in",
        ".trash/my-backup",
    ]
    assert stray.read_bytes() == b"half a file" and (outside / "precious").exists()
    assert [path.name for path in layout.published()] == ["ck-1"]
    verify_snapshot(layout.snapshots / "ck-1")


def test_a_link_inside_a_removed_directory_is_unlinked_not_followed(
    layout: SnapshotLayout, tmp_path: Path
) -> None:
    """Links planted in a temporary and in a pruned snapshot go with them; their targets stay."""
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "precious").write_text("keep me")
    temporary = layout.new_temporary("ck-9")
    (temporary / "to-dir").symlink_to(outside)
    (temporary / "nested").mkdir()
    (temporary / "nested" / "to-file").symlink_to(outside / "deep" / "precious")
    old = publish(layout, "ck-1", 1.0)
    publish(layout, "ck-2", 2.0)
    (old / "sidecars" / "escape").symlink_to(outside / "deep")
    os.mkfifo(old / "a-fifo")
    assert layout.clean_debris().removed == (".tmp/envckpt-ck-9",)
    assert layout.prune(1).removed == ("ck-1",)
    assert (outside / "deep" / "precious").read_text() == "keep me"
    assert not old.exists() and list(layout.trash.iterdir()) == []


@pytest.mark.parametrize("linked", ["snapshots", ".tmp", ".trash", "refused"])
def test_a_symlinked_root_directory_is_refused_and_its_target_untouched(
    layout: SnapshotLayout, tmp_path: Path, linked: str
) -> None:
    """With snapshots/, .tmp, .trash or refused/ a link, every operation that would go through
    it raises SnapshotRootUnsafe naming it; nothing where it points changes."""
    for index in range(3):
        publish(layout, f"ck-{index}", float(index))
    fill(layout.new_temporary("ck-tmp"))
    layout.trash.mkdir()
    shutil.copytree(layout.snapshots / "ck-0", layout.trash / "envckpt-ck-old")
    layout.refused.mkdir()
    elsewhere = tmp_path / "elsewhere"
    shutil.move(layout.root / linked, elsewhere)
    (layout.root / linked).symlink_to(elsewhere, target_is_directory=True)
    before = tree_state(tmp_path)
    operations = {
        "check_safe": layout.check_safe,
        "clean_debris": layout.clean_debris,
        "prune": lambda: layout.prune(1),
        "delete": lambda: layout.delete("ck-0"),
        "quarantine": lambda: layout.quarantine(layout.snapshots / "ck-0", "bad"),
        "new_temporary": lambda: layout.new_temporary("ck-new"),
    }
    refused = []
    for name, operation in operations.items():
        try:
            operation()
        except SnapshotRootUnsafe as error:
            assert error.path == str(layout.root / linked) and "symbolic link" in str(error)
            refused.append(name)
        except FileNotFoundError:
            pass  # an earlier operation legitimately removed or moved ck-0
    assert "check_safe" in refused
    if linked in ("snapshots", ".trash"):
        assert {"prune", "delete"} <= set(refused)
    if linked in (".tmp", ".trash"):
        assert "clean_debris" in refused
    assert changed_outside(before, tree_state(tmp_path), inside=[layout.root]) == []


def test_delete_removes_one_snapshot_through_the_trash(layout: SnapshotLayout) -> None:
    """delete(id) renames the snapshot into .trash, then removes it; the others stay."""
    publish(layout, "ck-1", 1.0)
    publish(layout, "ck-2", 2.0)
    layout.delete("ck-1")
    assert [path.name for path in layout.published()] == ["ck-2"]
    assert list(layout.trash.iterdir()) == []
    with pytest.raises(FileNotFoundError, match="ck-1"):
        layout.delete("ck-1")
    with pytest.raises(ValueError):
        layout.delete("../ck-2")


@pytest.mark.parametrize("kind", ["no manifest", "a file", "a link to a snapshot"])
def test_delete_refuses_what_envckpt_did_not_publish(
    layout: SnapshotLayout, kind: str, tmp_path: Path
) -> None:
    """An id-named entry without a verifying manifest, a file or a link is not deleted."""
    real = publish(layout, "ck-1", 1.0)
    target = layout.snapshots / "ck-x"
    if kind == "no manifest":
        target.mkdir()
        (target / "data").write_text("mine")
    elif kind == "a file":
        target.write_text("mine")
    else:
        target.symlink_to(real)
    before = tree_state(tmp_path)
    with pytest.raises(SnapshotNotOwned) as caught:
        layout.delete("ck-x")
    assert caught.value.path == str(target) and caught.value.why
    assert tree_state(tmp_path) == before


def test_new_temporary_refuses_unsafe_or_reused_ids(layout: SnapshotLayout) -> None:
    """A checkpoint id must be one safe path component and not already in use."""
    for bad in ("../escape", "", "a/b", ".hidden"):
        with pytest.raises(ValueError):
            layout.new_temporary(bad)
    layout.new_temporary("ck-1")
    with pytest.raises(FileExistsError):
        layout.new_temporary("ck-1")


def test_a_crash_inside_delete_leaves_the_snapshot_out_of_the_published_ones(
    layout: SnapshotLayout,
) -> None:
    """Killed between the rename and the removal, the snapshot is only in .trash."""
    publish(layout, "ck-1", 1.0)
    crashpoints.install(crashpoints.raise_at("prune.in_trash"))
    try:
        with pytest.raises(SimulatedCrash):
            layout.delete("ck-1")
    finally:
        crashpoints.install(None)
    assert layout.published() == [] and (layout.trash / "envckpt-ck-1").is_dir()
    assert layout.clean_debris().removed == (".trash/envckpt-ck-1",)
    assert not (layout.trash / "envckpt-ck-1").exists()


# ---- property: over hostile trees, nothing but envckpt's own entries is ever removed ----

HOSTILE_NAMES = st.sampled_from(
    [
        "notes.txt",
        "rollouts-step0000000099-abcdef123456",
        "ck-0",
        "ck-2",
        "ck-9",
        "envckpt-ck-7",
        "envckpt-rollouts-x",
        ".envckpt-probe-x",
        ".envckpt-probe-y.txt",
        "backup",
        ".hidden",
        "MANIFEST.json",
    ]
) | st.text(alphabet="abk-._0", min_size=1, max_size=6).filter(lambda n: n not in {".", ".."})
HOSTILE_KINDS = st.sampled_from(
    [
        "file",
        "dir",
        "dir with a copied manifest",
        "link to a directory outside",
        "link to a file outside",
        "link into the root",
        "dangling link",
        "fifo",
    ]
)
HOSTILE_PLACES = st.sampled_from(
    ["snapshots", ".tmp", ".trash", "refused", "root", "inside a snapshot", "inside a temporary"]
)
OPERATIONS = st.lists(
    st.one_of(
        st.just(("clean", "")),
        st.tuples(st.just("prune"), st.sampled_from(["1", "2", "3"])),
        st.tuples(st.just("delete"), HOSTILE_NAMES),
    ),
    min_size=1,
    max_size=4,
)


@dataclass
class HostileRoot:
    top: Path
    layout: SnapshotLayout
    owned: list[str]  # envckpt's published snapshots, newest first
    linked: str | None

    def removable(self, state: dict[Path, tuple[object, ...]]) -> list[Path]:
        """The oracle: the subtrees the rules let envckpt remove, from the tree before."""
        layout = self.layout
        allowed = [layout.snapshots / name for name in self.owned]
        for directory, prefixes in (
            (layout.temporary, ("envckpt-", ".envckpt-probe-")),
            (layout.trash, ("envckpt-", ".envckpt-probe-")),
            (layout.snapshots, (".envckpt-probe-",)),
        ):
            allowed += [
                path
                for path, was in state.items()
                if path.parent == directory and was[0] == "dir" and path.name.startswith(prefixes)
            ]
        return allowed


def _hostile_root(
    top: Path,
    *,
    snapshots: int,
    temporaries: int,
    trash: int,
    hostile: list[tuple[str, str, str]],
    linked: str | None,
) -> HostileRoot:
    outside = top / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "dir" / "inner.txt").write_text("outside, in a directory")
    (outside / "file.txt").write_text("outside")
    layout = SnapshotLayout(top / "root")
    published = [publish(layout, f"ck-{i}", float(i + 1)) for i in range(snapshots)]
    temps = []
    for index in range(temporaries):
        temps.append(layout.new_temporary(f"t-{index}"))
        fill(temps[-1])
    layout.trash.mkdir()
    layout.refused.mkdir()
    for index in range(trash):
        (layout.trash / f"envckpt-old-{index}").mkdir()
        (layout.trash / f"envckpt-old-{index}" / "data").write_text("half pruned")
    places = {
        "snapshots": layout.snapshots,
        ".tmp": layout.temporary,
        ".trash": layout.trash,
        "refused": layout.refused,
        "root": layout.root,
        "inside a snapshot": published[0],
        "inside a temporary": temps[0] if temps else layout.temporary,
    }
    for place, name, kind in hostile:
        target = places[place] / name
        if os.path.lexists(target) or (place == "root" and name.startswith(".")):
            continue
        if kind == "file":
            target.write_text("not envckpt's")
        elif kind == "dir":
            target.mkdir()
            (target / "mine.txt").write_text("not envckpt's")
        elif kind == "dir with a copied manifest":
            target.mkdir()
            shutil.copy(published[-1] / MANIFEST_NAME, target / MANIFEST_NAME)
        elif kind == "link to a directory outside":
            target.symlink_to(outside / "dir")
        elif kind == "link to a file outside":
            target.symlink_to(outside / "file.txt")
        elif kind == "link into the root":
            target.symlink_to(published[-1])
        elif kind == "dangling link":
            target.symlink_to(top / "nowhere")
        else:
            os.mkfifo(target)
    if linked is not None:
        real = outside / f"{linked}-real"
        shutil.move(layout.root / linked, real)
        (layout.root / linked).symlink_to(real, target_is_directory=True)
    owned = [f"ck-{i}" for i in reversed(range(snapshots))]
    return HostileRoot(top, layout, owned if linked != "snapshots" else [], linked)


def _run(root: HostileRoot, operation: tuple[str, str]) -> None:
    """One operation; the refusals the rules allow are fine, and the owned list follows it."""
    verb, argument = operation
    layout = root.layout
    try:
        if verb == "clean":
            layout.clean_debris()
        elif verb == "prune":
            removed = layout.prune(int(argument)).removed
            assert list(removed) == root.owned[max(1, int(argument)) :]
            root.owned = root.owned[: max(1, int(argument))]
        else:
            layout.delete(argument)
            root.owned.remove(argument)
    except (SnapshotRootUnsafe, SnapshotNotOwned, FileNotFoundError, ValueError):
        return


@settings(max_examples=examples(25), deadline=None)
@given(
    snapshots=st.integers(1, 4),
    temporaries=st.integers(0, 2),
    trash=st.integers(0, 2),
    hostile=st.lists(st.tuples(HOSTILE_PLACES, HOSTILE_NAMES, HOSTILE_KINDS), max_size=10),
    linked=st.sampled_from([None, None, "snapshots", ".tmp", ".trash"]),
    operations=OPERATIONS,
)
def test_over_hostile_trees_only_envckpts_own_entries_are_ever_removed(
    snapshots: int,
    temporaries: int,
    trash: int,
    hostile: list[tuple[str, str, str]],
    linked: str | None,
    operations: list[tuple[str, str]],
) -> None:
    """Stray files and directories, links in and out of the root, id-shaped and prefix-shaped
    names, dangling links, FIFOs, a linked snapshots/, .tmp or .trash: after any cleanup,
    prunes and deletes, every entry the rules do not make envckpt's is exactly as it was
    (lstat before and after), and prunes removed exactly the oldest snapshots beyond K."""
    with tempfile.TemporaryDirectory() as directory:
        root = _hostile_root(
            Path(directory),
            snapshots=snapshots,
            temporaries=temporaries,
            trash=trash,
            hostile=hostile,
            linked=linked,
        )
        before = tree_state(root.top)
        allowed = root.removable(before)
        for operation in operations:
            _run(root, operation)
            if linked != "snapshots":
                assert [s.name for s in root.layout.scan().owned()] == root.owned
        assert changed_outside(before, tree_state(root.top), inside=allowed) == []


def _cleaned(root: HostileRoot) -> list[str]:
    """What a cleanup changed that the rules do not let it change."""
    before = tree_state(root.top)
    allowed = root.removable(before)
    with contextlib.suppress(SnapshotRootUnsafe):
        root.layout.clean_debris()
    return changed_outside(before, tree_state(root.top), inside=allowed)


def test_the_oracle_catches_a_cleanup_that_takes_foreign_entries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen failing: with the ownership rule removed (every .tmp entry is debris, as before),
    the stray file and the prefixed link are reported as removed."""
    hostile = [(".tmp", "notes.txt", "file"), (".tmp", "envckpt-x", "link to a directory outside")]
    with tempfile.TemporaryDirectory() as directory:
        top = Path(directory)
        root = _hostile_root(top, snapshots=1, temporaries=1, trash=0, hostile=hostile, linked=None)
        assert _cleaned(root) == []
    monkeypatch.setattr(layout_module, "is_owned_debris", lambda name, mode: True)
    with tempfile.TemporaryDirectory() as directory:
        top = Path(directory)
        root = _hostile_root(top, snapshots=1, temporaries=1, trash=0, hostile=hostile, linked=None)
        assert _cleaned(root) == [
            f"{root.layout.temporary}/envckpt-x: removed (was link)",
            f"{root.layout.temporary}/notes.txt: removed (was file)",
        ]


def test_the_oracle_catches_a_cleanup_that_follows_a_linked_tmp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Seen failing: opening the root's directories through links (no O_NOFOLLOW, no lstat)
    lets a cleanup empty what a linked .tmp points to; the oracle names what went."""
    with tempfile.TemporaryDirectory() as directory:
        root = _hostile_root(
            Path(directory), snapshots=1, temporaries=2, trash=0, hostile=[], linked=".tmp"
        )
        assert _cleaned(root) == []

    def following(name: str, *, dir_fd: int) -> int | None:
        try:
            return os.stat(name, dir_fd=dir_fd).st_mode
        except FileNotFoundError:
            return None

    monkeypatch.setattr(layout_module, "entry_mode", following)
    monkeypatch.setattr(
        layout_module,
        "open_directory",
        lambda name, *, dir_fd=None: os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=dir_fd),
    )
    with tempfile.TemporaryDirectory() as directory:
        top = Path(directory)
        root = _hostile_root(top, snapshots=1, temporaries=2, trash=0, hostile=[], linked=".tmp")
        problems = _cleaned(root)
    assert f"{top}/outside/.tmp-real/envckpt-t-0: removed (was dir)" in problems
    assert f"{top}/outside/.tmp-real/envckpt-t-1: removed (was dir)" in problems
