"""Tests for envckpt.closing: ``with`` for anything with ``close()``."""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest

from envckpt.closing import Closeable
from envckpt.progress import ProgressBar
from envckpt.trainer.dataplane import SqliteDataPlane


class Door(Closeable):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def close(self) -> None:
        self.log.append("closed")


def test_with_gives_the_object_and_closes_it_once_even_on_an_error() -> None:
    """The object itself is entered; leaving closes it once, and the body's error goes on."""
    log: list[str] = []
    door = Door(log)
    with door as entered:
        assert entered is door and log == []
    assert log == ["closed"]
    with pytest.raises(LookupError, match="inside"), Door(log):
        raise LookupError("inside")
    assert log == ["closed", "closed"]


def test_without_a_close_of_its_own_leaving_fails_loudly() -> None:
    """The mixin's close is abstract: a class that forgot one does not pass silently."""
    with pytest.raises(NotImplementedError), Closeable():
        pass


def test_the_data_plane_and_the_progress_bar_close_when_the_with_ends(tmp_path: Path) -> None:
    """The SQLite data plane's connection is closed; the bar writes its last plain line."""
    with SqliteDataPlane(tmp_path / "live.sqlite") as plane:
        assert plane.keys() == frozenset()
    with pytest.raises(sqlite3.ProgrammingError):
        plane.keys()
    stream = io.StringIO()
    with ProgressBar("rows", 100, stream=stream, terminal=False) as bar:
        bar.update(1)
        bar.update(2)  # within the same tenth: no line of its own
        assert stream.getvalue().splitlines() == ["rows: 1/100 (1%)"]
    assert stream.getvalue().splitlines() == ["rows: 1/100 (1%)", "rows: 2/100 (2%)"]
