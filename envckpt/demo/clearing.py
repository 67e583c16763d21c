"""What ``envckpt demo --force`` clears from a reused directory: only what a demo writes.

    cleared = clear_demo_directory(directory)
    cleared.removed        # names of the demo's own entries, removed
    cleared.left           # (name, why) of everything else: left where it is

A reused ``--dir`` would mix two runs' events and results, so ``--force``
clears the previous run first. It is the operator's directory, though, and a
mistyped path must not cost them their files: only entries whose names a demo
run writes (``DEMO_ENTRIES``: its event log, verdict, plan, trainer output,
the snapshot root's directories and files) are removed, through
``fsutil.remove_tree`` on the directory's descriptor (a link below is
unlinked, never followed). A symbolic link at the top is left whatever its
name (removing it is harmless, but a demo never makes one: it is not ours),
and so is anything else; each is reported.
"""

from __future__ import annotations

import fnmatch
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from envckpt.fsutil import open_directory, remove_tree

# Every top-level name a demo run (in-process, processes, Ray, nemo-gym) writes.
DEMO_ENTRIES = (
    "events.jsonl",
    "plan.json",
    "job.json",
    "verdict.json",
    "results.json",
    "report.html",
    "control.json",
    "audit.jsonl",
    "audit",
    "live.sqlite",
    "live.sqlite-*",
    "trainer-*.out",
    "trainer-*.log",
    "run",
    "run-*",
    # The snapshot root's own entries (the demo directory is the root, or holds it).
    "snapshots",
    ".tmp",
    ".trash",
    "refused",
    ".lock",
    "FINISHED.json",
    "telemetry.jsonl",
)


@dataclass(frozen=True, slots=True)
class Cleared:
    """What a clear removed, and what it left (name, why) for the operator to see."""

    removed: tuple[str, ...]
    left: tuple[tuple[str, str], ...]


def is_demo_entry(name: str) -> bool:
    """Whether ``name`` is one a demo run writes at the top of its directory."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in DEMO_ENTRIES)


def clear_demo_directory(directory: Path) -> Cleared:
    """Remove the demo's own entries of ``directory``; leave and report the rest.

    ``OSError`` if the directory cannot be opened (or is a link: the caller
    resolved the operator's path already, so a link here was swapped in).
    """
    removed: list[str] = []
    left: list[tuple[str, str]] = []
    fd = open_directory(directory)
    try:
        for name in sorted(os.listdir(fd)):
            mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
            if stat.S_ISLNK(mode):
                left.append((name, "a symbolic link: a demo never makes one"))
            elif not is_demo_entry(name):
                left.append((name, "not something a demo writes"))
            else:
                remove_tree(name, dir_fd=fd)
                removed.append(name)
    finally:
        os.close(fd)
    return Cleared(removed=tuple(removed), left=tuple(left))
