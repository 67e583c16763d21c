"""Tests of the forkserver's tie to the launcher that started it."""

from __future__ import annotations

import os
import subprocess
import sys

from envckpt.nemo_gym import forkserver_tie
from envckpt.nemo_gym.forkserver_tie import FORKSERVER_PARENT_ENV

PROBE = (
    "import os; from envckpt.nemo_gym import forkserver_tie; from envckpt import process_tie; "
    "print(forkserver_tie.FORKSERVER_PID == os.getpid(), process_tie.tied_parent())"
)


def test_imported_in_the_launcher_itself_nothing_is_tied() -> None:
    """In any process that did not start as a forkserver (this one), it does nothing."""
    assert forkserver_tie.FORKSERVER_PID is None


def test_imported_in_a_process_the_launcher_started_it_follows_the_launcher() -> None:
    """A process whose environment names its parent as the launcher: tied, and it names itself."""
    env = {**os.environ, FORKSERVER_PARENT_ENV: str(os.getpid())}
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["True", str(os.getpid())], done.stderr


def test_named_as_the_launcher_itself_it_does_nothing() -> None:
    """The variable names the importing process: that is the launcher, not its forkserver."""
    code = f"import os; os.environ[{FORKSERVER_PARENT_ENV!r}] = str(os.getpid()); " + PROBE
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "None"], done.stderr
