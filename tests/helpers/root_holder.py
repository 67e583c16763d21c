"""Another process holding a snapshot root's lock, as a second trainer would."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

_HOLD = """
import sys
from envckpt.trainer.root_guard import RootLock
RootLock.acquire(sys.argv[1])
print("held", flush=True)
sys.stdin.read()
"""


@contextlib.contextmanager
def held_by_another_process(root: Path) -> Iterator[int]:
    """Yield the pid of a child process that holds ``root``'s lock until the block ends."""
    child = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        yield child.pid
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(timeout=30)
