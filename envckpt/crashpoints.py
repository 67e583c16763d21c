"""Named points where a test or the demo may kill the whole job.

The snapshot and restore code calls ``crashpoint(name)`` at each step a crash
can fall between; by default that does nothing. The end-to-end tests and
``envckpt demo`` install a handler that SIGKILLs the process group at a chosen
point, so "a crash right there" is a real crash, not a simulation.

    install(kill_at("snapshot.under_cut", nth=2))
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

SNAPSHOT_POINTS: tuple[str, ...] = (
    "snapshot.before_prepare",
    "snapshot.after_prepare",
    "snapshot.mid_commit",
    "snapshot.after_commit",
    "snapshot.under_cut",
    "snapshot.after_publish",
)
RESTORE_POINTS: tuple[str, ...] = ("restore.after",)
POINTS: tuple[str, ...] = SNAPSHOT_POINTS + RESTORE_POINTS

_handler: Callable[[str], None] | None = None


def crashpoint(name: str) -> None:
    """Mark that execution reached ``name``."""
    if _handler is not None:
        _handler(name)


def install(handler: Callable[[str], None] | None) -> None:
    """Install (or with None, remove) the process-wide crash handler."""
    global _handler
    _handler = handler


def kill_at(point: str, *, nth: int = 1) -> Callable[[str], None]:
    """A handler that SIGKILLs this process group the ``nth`` time ``point`` is reached."""
    if point not in POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(POINTS)}")
    seen = 0

    def handler(name: str) -> None:
        nonlocal seen
        if name != point:
            return
        seen += 1
        if seen == nth:
            # The whole job: this process and every child in its group (the
            # Gym servers), like a node failure.
            os.killpg(os.getpgid(0), signal.SIGKILL)

    return handler
