"""Tests for envckpt.trainer.dataplane."""

from __future__ import annotations

import asyncio
import pickle
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from envckpt.errors import CorruptCheckpoint
from envckpt.trainer.barrier import CutExpired, DataPlaneBarrier
from envckpt.trainer.dataplane import DataPlaneCorrupt, SqliteDataPlane, StagingRow

from helpers.cuts import dead_cut, live_cut


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[SqliteDataPlane]:
    with SqliteDataPlane(tmp_path / "live" / "dataplane.sqlite") as opened:
        yield opened


@pytest.fixture(autouse=True)
def _live_dir(tmp_path: Path) -> None:
    (tmp_path / "live").mkdir()
    (tmp_path / "snap").mkdir()


def test_database_runs_in_wal_mode(plane: SqliteDataPlane) -> None:
    """The live data plane is a real file in WAL journal mode."""
    plane.put(live_cut(), "k1", "task-1", b"x")
    assert plane.journal_mode() == "wal"
    assert plane.path.is_file()
    assert Path(f"{plane.path}-wal").exists()


def test_in_memory_database_is_refused(tmp_path: Path) -> None:
    """The data plane must live in a database file, not in memory."""
    with pytest.raises(ValueError):
        SqliteDataPlane(":memory:")


def test_put_get_delete_round_trip(plane: SqliteDataPlane) -> None:
    """Rows can be stored, read back, replaced and deleted."""
    cut = live_cut()
    plane.put(cut, "k1", "task-1", b"one")
    plane.put(cut, "k2", "task-1-a1", b"two")
    assert plane.get("k1") == StagingRow("k1", "task-1", b"one")
    assert plane.keys() == {"k1", "k2"}
    plane.put(cut, "k1", "task-1-a2", b"uno")
    assert plane.get("k1") == StagingRow("k1", "task-1-a2", b"uno")
    assert plane.delete(cut, ["k1", "absent"]) == 1
    assert plane.get("k1") is None
    assert plane.keys() == {"k2"}


def test_missing_keys_reports_absent_rows(plane: SqliteDataPlane) -> None:
    """missing_keys returns exactly the keys without a row, across many keys."""
    cut = live_cut()
    for index in range(0, 1200, 2):
        plane.put(cut, f"k{index}", "task", b"")
    wanted = {f"k{index}" for index in range(1200)}
    assert plane.missing_keys(wanted) == {f"k{index}" for index in range(1, 1200, 2)}
    assert plane.missing_keys([]) == frozenset()


def test_put_rejects_invalid_values(plane: SqliteDataPlane) -> None:
    """Empty keys and non-bytes payloads are refused."""
    with pytest.raises(ValueError):
        plane.put(live_cut(), "", "task", b"")
    with pytest.raises(ValueError):
        plane.put(live_cut(), "k", "", b"")
    with pytest.raises(ValueError):
        plane.put(live_cut(), "k", "task", "text")  # type: ignore[arg-type]


async def test_writes_with_an_expired_cut_fail(plane: SqliteDataPlane, tmp_path: Path) -> None:
    """Every write refuses an expired cut and changes nothing."""
    plane.put(live_cut(), "k1", "task-1", b"one")
    cut = dead_cut()
    with pytest.raises(CutExpired):
        plane.put(cut, "k2", "task-2", b"two")
    with pytest.raises(CutExpired):
        plane.delete(cut, ["k1"])
    with pytest.raises(CutExpired):
        plane.clear_orphans(cut, keep=set())
    with pytest.raises(CutExpired):
        await plane.snapshot_to(cut, tmp_path / "snap" / "copy.sqlite")
    assert plane.keys() == {"k1"}
    assert list((tmp_path / "snap").iterdir()) == []


async def test_snapshot_under_cut_is_consistent_and_restorable(
    plane: SqliteDataPlane, tmp_path: Path
) -> None:
    """A copy taken under the checkpoint cut holds exactly the rows at the cut and restores."""
    barrier = DataPlaneBarrier()
    async with barrier.mutation() as cut:
        for index in range(50):
            plane.put(cut, f"k{index}", f"task-{index}", bytes([index]) * 100)
    copy = tmp_path / "snap" / "dataplane.sqlite"
    late_written = asyncio.Event()

    async def late_writer() -> None:
        async with barrier.mutation() as cut:
            plane.put(cut, "late", "task-late", b"late")
            plane.delete(cut, ["k0"])
            late_written.set()

    async with barrier.checkpoint() as cut:
        writer = asyncio.create_task(late_writer())
        written = await plane.snapshot_to(cut, copy)
        assert not late_written.is_set()
    await asyncio.wait_for(writer, 5)
    assert written == copy.stat().st_size
    assert sorted(path.name for path in copy.parent.iterdir()) == ["dataplane.sqlite"]
    assert plane.get("late") is not None

    target = tmp_path / "restored" / "dataplane.sqlite"
    target.parent.mkdir()
    with SqliteDataPlane.restore_from(copy, target) as restored:
        assert restored.journal_mode() == "wal"
        assert restored.keys() == {f"k{index}" for index in range(50)}
        assert restored.get("k7") == StagingRow("k7", "task-7", bytes([7]) * 100)


async def test_restore_replaces_the_live_file(plane: SqliteDataPlane, tmp_path: Path) -> None:
    """Restoring onto an existing live path replaces its contents with the snapshot's."""
    plane.put(live_cut(), "before", "task", b"")
    copy = tmp_path / "snap" / "dataplane.sqlite"
    await plane.snapshot_to(live_cut(), copy)
    plane.put(live_cut(), "after", "task", b"")
    target = plane.path
    plane.close()
    with SqliteDataPlane.restore_from(copy, target) as restored:
        assert restored.keys() == {"before"}
    leftovers = [path.name for path in target.parent.iterdir() if ".restore-" in path.name]
    assert leftovers == []


def test_restore_refuses_a_foreign_database(tmp_path: Path) -> None:
    """A valid SQLite file that is not an envckpt data plane is refused."""
    foreign = tmp_path / "snap" / "foreign.sqlite"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE other (x)")
    conn.commit()
    conn.close()
    with pytest.raises(DataPlaneCorrupt, match="foreign"):
        SqliteDataPlane.restore_from(foreign, tmp_path / "live" / "dataplane.sqlite")
    assert not (tmp_path / "live" / "dataplane.sqlite").exists()


async def test_restore_refuses_another_kind_or_schema(
    plane: SqliteDataPlane, tmp_path: Path
) -> None:
    """A data plane whose meta names another kind or schema version is refused."""
    for key, value, match in [("kind", "other.kind", "kind"), ("schema_version", "2", "schema")]:
        copy = tmp_path / "snap" / f"{key}.sqlite"
        await plane.snapshot_to(live_cut(), copy)
        conn = sqlite3.connect(copy)
        conn.execute("UPDATE envckpt_meta SET value = ? WHERE key = ?", (value, key))
        conn.commit()
        conn.close()
        with pytest.raises(DataPlaneCorrupt, match=match):
            SqliteDataPlane.restore_from(copy, tmp_path / "restored.sqlite")


@pytest.mark.parametrize("damage", ["garbage", "truncated", "missing"])
async def test_restore_refuses_a_corrupt_copy_and_keeps_the_target(
    plane: SqliteDataPlane, tmp_path: Path, damage: str
) -> None:
    """A corrupt, truncated or missing copy is refused and the live target stays as it was."""
    for index in range(200):
        plane.put(live_cut(), f"k{index}", "task", b"x" * 200)
    copy = tmp_path / "snap" / "dataplane.sqlite"
    await plane.snapshot_to(live_cut(), copy)
    data = copy.read_bytes()
    if damage == "garbage":
        copy.write_bytes(b"not a database" * 100)
    elif damage == "truncated":
        copy.write_bytes(data[: len(data) // 2])
    else:
        copy.unlink()
    target = tmp_path / "target.sqlite"
    with SqliteDataPlane(target) as existing:
        existing.put(live_cut(), "keep-me", "task", b"")
    with pytest.raises(DataPlaneCorrupt) as info:
        SqliteDataPlane.restore_from(copy, target)
    assert isinstance(info.value, CorruptCheckpoint)
    assert info.value.path == str(copy)
    with SqliteDataPlane(target) as existing:
        assert existing.keys() == {"keep-me"}
    assert sorted(path.name for path in tmp_path.iterdir() if ".restore-" in path.name) == []


def test_opening_a_foreign_file_as_live_plane_is_refused(tmp_path: Path) -> None:
    """Opening a file that is not an envckpt data plane raises DataPlaneCorrupt."""
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"junk" * 1000)
    with pytest.raises(DataPlaneCorrupt):
        SqliteDataPlane(garbage)


def test_clear_orphans_keeps_only_the_given_keys(plane: SqliteDataPlane) -> None:
    """clear_orphans deletes every row outside keep and reports how many."""
    cut = live_cut()
    for key in ["restored-1", "restored-2", "orphan-1", "orphan-2", "orphan-3"]:
        plane.put(cut, key, "task", b"")
    assert plane.clear_orphans(cut, keep={"restored-1", "restored-2", "never-written"}) == 3
    assert plane.keys() == {"restored-1", "restored-2"}
    assert plane.clear_orphans(cut, keep={"restored-1", "restored-2"}) == 0
    assert plane.clear_orphans(cut, keep=set()) == 2
    assert plane.keys() == frozenset()


def test_corrupt_error_survives_pickle() -> None:
    """DataPlaneCorrupt round-trips through pickle with its fields."""
    error = DataPlaneCorrupt("bad", path="/x/dataplane.sqlite")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is DataPlaneCorrupt
    assert (copy.message, copy.path, str(copy)) == (error.message, error.path, str(error))
