"""Processes by /proc: the descendants of a pid, and which of them still live.

tree = descendants(pid)            # every pid below ``pid`` now (children first found)
alive(tree)                        # those still running (zombies count as gone)
wait_gone(tree, 5.0)               # those still running after up to 5 s of waiting
outliving(process, tree, 5.0)      # SIGKILL ``process`` alone: which of ``tree`` outlive it
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

PROC = Path("/proc")


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of ``pid``, None once it is gone."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[1])


def children_by_parent() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in os.scandir(PROC):
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                tree.setdefault(stat[1], []).append(int(entry.name))
    return tree


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` right now."""
    tree = children_by_parent()
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in tree.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pids: set[int]) -> set[int]:
    """The ``pids`` still running; a zombie (dead, not yet reaped) is not."""
    living = set()
    for pid in pids:
        stat = _stat(pid)
        if stat is not None and stat[0] not in ("Z", "X"):
            living.add(pid)
    return living


def wait_gone(pids: set[int], seconds: float) -> set[int]:
    """Wait up to ``seconds`` for every one of ``pids`` to end; the ones still running."""
    give_up = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < give_up:
        time.sleep(0.05)
    return alive(pids)


def outliving(process: subprocess.Popen[Any], tree: set[int], seconds: float) -> set[int]:
    """SIGKILL ``process`` alone (not its group) and reap it; those of ``tree`` still running
    ``seconds`` later."""
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return wait_gone(tree, seconds)


def command(pid: int) -> str:
    try:
        raw = (PROC / str(pid) / "cmdline").read_bytes()
    except OSError:
        return "?"
    return " ".join(part.decode("utf-8", "replace") for part in raw.split(b"\0") if part)
