"""Tests of child processes tied to their parent: real processes, SIGKILL of the parent alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envckpt import process_tie
from envckpt.process_tie import PARENT_MAIN_THREAD_ENV, PARENT_PID_ENV, child_env, tie_to_parent

from helpers.proc_tree import alive, descendants, outliving

GONE_SECONDS = 5.0  # the promise: a tied child is gone this long after its parent
START_SECONDS = 60.0

# A parent that starts a tied child (from its main thread or from a worker
# thread that then ends), prints the child's pid, then sleeps until killed.
PARENT = textwrap.dedent(
    """
    import os, subprocess, sys, threading, time
    from envckpt.process_tie import child_env
    CHILD = (
        "from envckpt.process_tie import tie_to_parent; tie_to_parent(); "
        "import time; time.sleep(600)"
    )
    box = []
    def start():
        command = [sys.executable, "-c", CHILD]
        box.append(subprocess.Popen(command, env=child_env(os.environ)))
    if sys.argv[1] == "thread":
        worker = threading.Thread(target=start)
        worker.start()
        worker.join()  # the thread that forked the child is gone now
    else:
        start()
    print(box[0].pid, flush=True)
    time.sleep(600)
    """
)


def start_parent(where: str) -> tuple[subprocess.Popen[bytes], int]:
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, where], stdout=subprocess.PIPE, cwd=Path.cwd()
    )
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    return parent, child


@pytest.mark.parametrize("where", ["main", "thread"])
def test_a_tied_child_dies_within_seconds_of_its_parent(where: str) -> None:
    """SIGKILL of the parent alone: the child it started is gone within 5 s."""
    parent, child = start_parent(where)
    try:
        assert descendants(parent.pid) == {child}
        # Started from a worker thread that ended: the child must still live.
        time.sleep(3 * process_tie.WATCH_SECONDS)
        assert alive({child}) == {child}
        assert outliving(parent, {child}, GONE_SECONDS) == set()
    finally:
        for pid in alive({child, parent.pid}):
            os.kill(pid, signal.SIGKILL)
        parent.wait()


def test_child_env_names_this_process_and_its_thread() -> None:
    """The variables name this pid and whether the main thread started the child."""
    env = child_env({"KEEP": "1"})
    assert env["KEEP"] == "1" and env[PARENT_PID_ENV] == str(os.getpid())
    assert env[PARENT_MAIN_THREAD_ENV] == "1"


def test_without_the_variables_nothing_is_tied() -> None:
    """A process started by hand (no variables) or the parent itself is never tied."""
    assert tie_to_parent({}) is None
    assert tie_to_parent({PARENT_PID_ENV: str(os.getpid())}) is None
    assert tie_to_parent({PARENT_PID_ENV: "not a pid"}) is None


def test_tying_removes_the_variables() -> None:
    """The variables are consumed, so this process's own children are not misled by them."""
    env = {PARENT_PID_ENV: str(os.getpid()), PARENT_MAIN_THREAD_ENV: "1", "OTHER": "x"}
    tie_to_parent(env)
    assert env == {"OTHER": "x"}


def test_a_child_whose_parent_is_already_gone_dies_at_once(tmp_path: Path) -> None:
    """Told to follow a pid that is not its parent (it died first), the child ends itself."""
    code = "from envckpt.process_tie import tie_to_parent; tie_to_parent(); print('survived')"
    env = {**os.environ, PARENT_PID_ENV: "1" if os.getpid() != 1 else "2"}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, timeout=START_SECONDS
    )
    assert done.returncode == -signal.SIGKILL and b"survived" not in done.stdout
