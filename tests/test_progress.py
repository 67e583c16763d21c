"""Tests for envckpt.progress: a rich bar on a terminal, plain lines in a log."""

from __future__ import annotations

import io

import pytest

from envckpt.progress import BYTES, ProgressBar


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_per_quarter_and_none_in_between() -> None:
    """40 updates of 1..40 write the first and then one line per quarter, with notes."""
    stream = io.StringIO()
    with ProgressBar("run 1", 40, stream=stream) as bar:
        for done in range(1, 41):
            bar.update(done, f"{done // 10} snapshots")
    lines = stream.getvalue().splitlines()
    assert lines == [
        "run 1: 1/40 (2%) 0 snapshots",
        "run 1: 10/40 (25%) 1 snapshots",
        "run 1: 20/40 (50%) 2 snapshots",
        "run 1: 30/40 (75%) 3 snapshots",
        "run 1: 40/40 (100%) 4 snapshots",
    ]
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_a_run_that_stops_early_says_where_it_stopped() -> None:
    """Closed at 60%: the last line says 24/40."""
    stream = io.StringIO()
    bar = ProgressBar("run 2", 40, stream=stream)
    bar.update(24, "killed")
    bar.close()
    bar.close()  # closing twice writes nothing more
    assert stream.getvalue().splitlines()[-1] == "run 2: 24/40 (60%) killed"
    assert len(stream.getvalue().splitlines()) == 1


def test_bytes_are_counted_in_readable_units() -> None:
    """A byte bar advanced by chunks reports kB, not a raw count."""
    stream = io.StringIO()
    with ProgressBar("verifying x", 4000, stream=stream, unit=BYTES) as bar:
        for _ in range(4):
            bar.advance(1000)
    assert stream.getvalue().splitlines()[-1] == "verifying x: 4.0 kB/4.0 kB (100%)"


def test_a_terminal_gets_a_rich_bar_that_redraws_in_place() -> None:
    """On a terminal the bar is drawn with terminal codes, not as plain lines."""
    stream = Terminal()
    with ProgressBar("run 1", 10, stream=stream) as bar:
        bar.update(5, "halfway")
    drawn = stream.getvalue()
    assert "\x1b[" in drawn and "run 1" in drawn and "5/10" in drawn
    assert "run 1: 5/10" not in drawn  # not the plain form


def test_an_unknown_unit_is_refused() -> None:
    """Only items and bytes are counted."""
    with pytest.raises(ValueError, match="unit must be"):
        ProgressBar("x", 1, unit="pages", stream=io.StringIO())
