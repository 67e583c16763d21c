"""Tests of starting server processes: a fresh interpreter, or forked from a preloaded one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from envckpt.nemo_gym.launcher import free_port
from envckpt.nemo_gym.processes import start_server
from envckpt.nemo_gym.readiness import read_ready_file

from helpers.proc_tree import alive, command, descendants, outliving

# How long a server process may take to write its ready file.
READY_SECONDS = 120.0


@pytest.mark.parametrize("preload", [False, True])
def test_a_server_process_starts_serves_and_stops(tmp_path: Path, preload: bool) -> None:
    """The scripted policy runs as its own process, logs to its file and stops on SIGTERM."""
    ready = tmp_path / "policy.ready"
    child = start_server(
        "envckpt.nemo_gym.scripted_policy",
        ["--port", str(free_port()), "--ready-file", str(ready)],
        env=dict(os.environ),
        log=tmp_path / "policy.log",
        preload=preload,
    )
    try:
        # A deadline, not a count of sleeps: on a loaded machine importing
        # nemo-gym alone can take tens of seconds.
        give_up = time.monotonic() + READY_SECONDS
        while not ready.exists() and child.poll() is None and time.monotonic() < give_up:
            time.sleep(0.05)
        assert ready.exists(), (
            f"not ready (exit code {child.poll()}): {(tmp_path / 'policy.log').read_text()[-3000:]}"
        )
        record = read_ready_file(ready)
        assert record["pid"] == child.pid != os.getpid()
        models = httpx.get(f"{record['url']}/v1/models").json()
        assert models["data"][0]["id"] == "envckpt-scripted-policy"
    finally:
        child.terminate()
        code = child.wait(timeout=20)
    assert code in (0, -signal.SIGTERM)


# A launcher process: two scripted-policy servers, one started from a worker
# thread that then ends, one from the main thread; prints its tree's readiness.
LAUNCHER = textwrap.dedent(
    """
    import os, sys, threading, time
    from pathlib import Path
    from envckpt.nemo_gym.launcher import free_port
    from envckpt.nemo_gym.processes import start_server

    def start(directory, name, preload):
        args = ["--port", str(free_port()), "--ready-file", str(directory / f"{name}.ready")]
        return start_server("envckpt.nemo_gym.scripted_policy", args, env=dict(os.environ),
                            log=directory / f"{name}.log", preload=preload)

    if __name__ == "__main__":
        directory, preload = Path(sys.argv[1]), sys.argv[2] == "1"
        worker = threading.Thread(target=start, args=(directory, "a", preload))
        worker.start()
        worker.join()
        start(directory, "b", preload)
        while not all((directory / f"{n}.ready").exists() for n in "ab"):
            time.sleep(0.05)
        print("ready", flush=True)
        time.sleep(600)
    """
)
GONE_SECONDS = 5.0  # the promise: nothing a SIGKILLed launcher started outlives it longer


@pytest.mark.parametrize("preload", [False, True])
def test_sigkill_of_the_launcher_alone_leaves_no_process(tmp_path: Path, preload: bool) -> None:
    """Servers (from the main thread or an ended worker thread), forkserver and helpers:
    none is alive 5 s after the process that launched them was SIGKILLed on its own."""
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER)
    launcher = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), "1" if preload else "0"],
        stdout=subprocess.PIPE,
    )
    started: set[int] = set()
    try:
        assert launcher.stdout is not None
        assert launcher.stdout.readline().strip() == b"ready"
        started = descendants(launcher.pid)
        servers = {int(read_ready_file(tmp_path / f"{n}.ready")["pid"]) for n in "ab"}
        assert servers <= started and len(servers) == 2, [command(pid) for pid in started]
        if preload:  # the forkserver and the resource tracker are in the tree too
            helpers = {"forkserver", "resource_tracker"}
            assert all(any(h in command(pid) for pid in started) for h in helpers)
        left = outliving(launcher, started, GONE_SECONDS)
        assert not left, [command(pid) for pid in left]
    finally:
        for pid in alive(started | {launcher.pid}):
            os.kill(pid, signal.SIGKILL)
        launcher.wait()
