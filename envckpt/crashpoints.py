"""Named points where a test or the demo may kill the whole job.

The snapshot and restore code calls ``crashpoint(name)`` at each step a crash
can fall between; by default that does nothing. The end-to-end tests and
``envckpt demo`` install a handler that SIGKILLs the process group at a chosen
point, so "a crash right there" is a real crash, not a simulation.

    install(kill_at("snapshot.under_cut", nth=2))     # a real crash (process group)
    install(raise_at("restore.validated"))            # in-process: SimulatedCrash
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
# A restore: its candidate validated (nothing sent yet), the environment
# restored (the ledger not yet matched), and done.
RESTORE_POINTS: tuple[str, ...] = (
    "restore.validated",
    "restore.environment_restored",
    "restore.after",
)
# A pruned snapshot moved out of the published ones, not yet deleted.
PRUNE_POINTS: tuple[str, ...] = ("prune.in_trash",)
POINTS: tuple[str, ...] = SNAPSHOT_POINTS + RESTORE_POINTS + PRUNE_POINTS

_handler: Callable[[str], None] | None = None


def crashpoint(name: str) -> None:
    """Mark that execution reached ``name``."""
    if _handler is not None:
        _handler(name)


def install(handler: Callable[[str], None] | None) -> None:
    """Install (or with None, remove) the process-wide crash handler."""
    global _handler
    _handler = handler


class SimulatedCrash(BaseException):
    """Raised by ``raise_at``: an in-process stand-in for a crash at a point.

    A ``BaseException`` so that no ``except Exception`` on the way mistakes
    it for an error to handle; whoever set it up throws the state away.
    """

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


def kill_at(point: str, *, nth: int = 1) -> Callable[[str], None]:
    """A handler that SIGKILLs this process group the ``nth`` time ``point`` is reached."""

    def kill(name: str) -> None:
        # The whole job: this process and every child in its group (the
        # Gym servers), like a node failure.
        del name
        os.killpg(os.getpgid(0), signal.SIGKILL)

    return _at(point, nth, kill)


def raise_at(point: str, *, nth: int = 1) -> Callable[[str], None]:
    """A handler that raises ``SimulatedCrash`` the ``nth`` time ``point`` is reached."""

    def crash(name: str) -> None:
        raise SimulatedCrash(name)

    return _at(point, nth, crash)


def _at(point: str, nth: int, action: Callable[[str], None]) -> Callable[[str], None]:
    if point not in POINTS:
        raise ValueError(f"unknown crash point {point!r}; known: {', '.join(POINTS)}")
    seen = 0

    def handler(name: str) -> None:
        nonlocal seen
        if name != point:
            return
        seen += 1
        if seen == nth:
            action(name)

    return handler
