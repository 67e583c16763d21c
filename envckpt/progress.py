"""Progress on long work: a rich bar on a terminal, plain lines otherwise.

``envckpt demo`` follows each run of its job with one, ``envckpt snapshots
verify`` the bytes it hashes. On a terminal the bar redraws in place (rich);
anywhere else (a CI log, a pipe) it writes a plain line each time another
quarter is done, and one when it closes, so a log shows progress without a
wall of redraws::

    with ProgressBar("run 1", total=40) as bar:          # on stderr
        bar.update(12, "3 snapshots")                    # 12 of 40 done
    with ProgressBar("verifying X", total=size, unit=BYTES) as bar:
        bar.advance(len(chunk))
"""

from __future__ import annotations

import sys
from typing import TextIO

from rich import filesize
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from envckpt.closing import Closeable

ITEMS = "items"
BYTES = "bytes"
# A plain line each time another quarter is done.
PLAIN_STEPS = 4


class ProgressBar(Closeable):
    """One task's progress on ``stream`` (stderr by default): drawn, or told in lines."""

    def __init__(
        self,
        label: str,
        total: int,
        *,
        stream: TextIO | None = None,
        unit: str = ITEMS,
        terminal: bool | None = None,
    ) -> None:
        if unit not in (ITEMS, BYTES):
            raise ValueError(f"unit must be {ITEMS!r} or {BYTES!r}, got {unit!r}")
        self.label = label
        self.total = max(1, total)
        self.unit = unit
        self.done = 0
        self.note = ""
        self.stream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self._told = -1
        self._last_line = ""
        self._closed = False
        self._rich: Progress | None = None
        if self.terminal:
            count = DownloadColumn() if unit == BYTES else MofNCompleteColumn()
            self._rich = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                count,
                TextColumn("{task.fields[note]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream, force_terminal=True),
            )
            self._task = self._rich.add_task(label, total=self.total, note="")
            self._rich.start()

    def update(self, done: int, note: str = "") -> None:
        """``done`` of ``total`` finished now; ``note`` says more (``3 snapshots``)."""
        self.done = max(0, min(done, self.total))
        self.note = note
        if self._rich is not None:
            self._rich.update(self._task, completed=self.done, note=note)
            return
        step = PLAIN_STEPS * self.done // self.total
        if step != self._told:
            self._told = step
            self._line()

    def advance(self, amount: int) -> None:
        """``amount`` more finished."""
        self.update(self.done + amount, self.note)

    def close(self) -> None:
        """Finish the bar (a terminal's last frame stays); a plain last line if needed."""
        if self._closed:
            return
        self._closed = True
        if self._rich is not None:
            self._rich.stop()
        else:
            self._line()

    def _line(self) -> None:
        """Write where the work stands, unless that is the line written last."""
        percent = 100 * self.done // self.total
        if self.unit == BYTES:
            amount = f"{filesize.decimal(self.done)}/{filesize.decimal(self.total)}"
        else:
            amount = f"{self.done}/{self.total}"
        note = f" {self.note}" if self.note else ""
        line = f"{self.label}: {amount} ({percent}%){note}"
        if line != self._last_line:
            self._last_line = line
            self.stream.write(line + "\n")
            self.stream.flush()
