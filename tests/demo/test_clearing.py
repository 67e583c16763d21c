"""Tests of what ``envckpt demo --force`` clears: a demo's own entries, nothing else."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from envckpt.demo.clearing import clear_demo_directory, is_demo_entry


def test_a_previous_runs_entries_go_and_the_operators_files_stay(tmp_path: Path) -> None:
    """The red-team case: --force on a directory that also holds the operator's files."""
    for name in ("events.jsonl", "verdict.json", "trainer-2.out", "live.sqlite-wal"):
        (tmp_path / name).write_text("old run")
    (tmp_path / "snapshots" / "20250101-x").mkdir(parents=True)
    (tmp_path / "thesis.tex").write_text("keep")
    (tmp_path / "photos").mkdir()
    cleared = clear_demo_directory(tmp_path)
    assert sorted(cleared.removed) == sorted(
        ["events.jsonl", "verdict.json", "trainer-2.out", "live.sqlite-wal", "snapshots"]
    )
    assert [name for name, _ in cleared.left] == ["photos", "thesis.tex"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos", "thesis.tex"]


@pytest.mark.parametrize("name", ["snapshots", "events.jsonl", "run-1", "elsewhere"])
def test_a_link_is_left_and_what_it_points_to_untouched(tmp_path: Path, name: str) -> None:
    """A link at the top, even one with a demo's name, is neither followed nor removed."""
    outside = tmp_path / "outside"
    (outside / "events.jsonl").mkdir(parents=True)
    directory = tmp_path / "demo"
    directory.mkdir()
    (directory / name).symlink_to(outside)
    cleared = clear_demo_directory(directory)
    assert cleared.removed == () and cleared.left[0][0] == name
    assert "symbolic link" in cleared.left[0][1]
    assert (directory / name).is_symlink() and (outside / "events.jsonl").is_dir()


def test_a_link_inside_a_demo_entry_is_unlinked_not_followed(tmp_path: Path) -> None:
    """run-1/ of a previous run holding a link out: the link goes, its target stays."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    directory = tmp_path / "demo"
    (directory / "run-1").mkdir(parents=True)
    (directory / "run-1" / "out").symlink_to(outside)
    assert clear_demo_directory(directory).removed == ("run-1",)
    assert (outside / "keep.txt").read_text() == "keep"


def test_a_directory_that_is_a_link_is_refused(tmp_path: Path) -> None:
    """The caller resolves the operator's path; a link here was swapped in: OSError."""
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        clear_demo_directory(tmp_path / "link")


_NAMES = st.sampled_from(
    [
        "events.jsonl",
        "snapshots",
        "run-3",
        "trainer-1.out",
        "notes.txt",
        "envckpt-x",
        "data",
        ".git",
    ]
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(entries=st.lists(st.tuples(_NAMES, st.sampled_from(["file", "dir", "link"])), max_size=6))
def test_over_generated_trees_only_demo_entries_are_ever_removed(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, str]]
) -> None:
    """Whatever the mix of files, directories and links, every entry that is not a
    demo's (and every link) is still there afterwards, and so is everything outside."""
    base = tmp_path_factory.mktemp("tree")
    outside = base / "outside"
    (outside / "inner").mkdir(parents=True)
    directory = base / "demo"
    directory.mkdir()
    made: dict[str, str] = {}
    for name, kind in entries:
        if name in made:
            continue
        made[name] = kind
        path = directory / name
        if kind == "file":
            path.write_text("x")
        elif kind == "dir":
            (path / "sub").mkdir(parents=True)
            (path / "sub" / "out").symlink_to(outside)
        else:
            path.symlink_to(outside)
    clear_demo_directory(directory)
    expected = {n for n, kind in made.items() if kind == "link" or not is_demo_entry(n)}
    assert set(os.listdir(directory)) == expected
    assert (outside / "inner").is_dir()
