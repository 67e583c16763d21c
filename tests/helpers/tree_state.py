"""Every entry of a directory tree as ``lstat`` sees it, to prove what an operation left alone.

    before = tree_state(tmp_path)
    ...                                    # prune, cleanup, delete
    assert changed_outside(before, tree_state(tmp_path), inside=owned) == []

Links are recorded, never followed (their target text is part of the state);
a regular file by inode, size and mtime; a FIFO or socket by inode; a
directory by inode (its mtime changes whenever an entry inside comes or goes,
which ``changed_outside`` judges entry by entry instead).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path

State = dict[Path, tuple[object, ...]]


def tree_state(top: Path) -> State:
    """``{path: what lstat says}`` for ``top`` and everything below it, links unfollowed."""
    state: State = {}
    pending = [top]
    while pending:
        path = pending.pop()
        info = os.lstat(path)
        mode = info.st_mode
        if stat.S_ISLNK(mode):
            state[path] = ("link", info.st_ino, os.readlink(path))
        elif stat.S_ISDIR(mode):
            state[path] = ("dir", info.st_ino)
            pending.extend(path / name for name in os.listdir(path))
        elif stat.S_ISREG(mode):
            state[path] = ("file", info.st_ino, info.st_size, info.st_mtime_ns)
        else:
            state[path] = ("special", stat.S_IFMT(mode), info.st_ino)
    return state


def changed_outside(
    before: Mapping[Path, tuple[object, ...]],
    after: Mapping[Path, tuple[object, ...]],
    *,
    inside: Iterable[Path],
) -> list[str]:
    """Each entry of ``before`` outside the ``inside`` subtrees that is gone or changed."""
    allowed = [Path(path) for path in inside]
    problems = []
    for path, was in sorted(before.items()):
        if any(path == top or path.is_relative_to(top) for top in allowed):
            continue
        now = after.get(path)
        if now is None:
            problems.append(f"{path}: removed (was {was[0]})")
        elif now != was:
            problems.append(f"{path}: changed from {was} to {now}")
    return problems
