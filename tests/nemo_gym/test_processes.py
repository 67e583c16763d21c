"""Tests of starting server processes: a fresh interpreter, or forked from a preloaded one."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from envckpt.nemo_gym.launcher import free_port
from envckpt.nemo_gym.readiness import read_ready_file

from helpers import policy_process
from helpers.policy_process import start_policy
from helpers.proc_tree import alive, command, descendants, outliving

# The tests' folder, so a launcher script can import helpers.policy_process.
TESTS = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("preload", [False, True])
def test_a_server_process_starts_serves_and_stops(tmp_path: Path, preload: bool) -> None:
    """The scripted policy runs as its own process, logs to its file and stops on SIGTERM."""
    ready = tmp_path / "policy.ready"
    child = start_policy(tmp_path, "policy", preload=preload)
    try:
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
    import sys, threading, time
    from pathlib import Path
    from helpers.policy_process import start_policy

    if __name__ == "__main__":
        directory, preload = Path(sys.argv[1]), sys.argv[2] == "1"
        failed = []

        def start_in_thread():
            try:
                start_policy(directory, "a", preload=preload)
            except BaseException as error:  # the launcher exits instead of waiting forever
                failed.append(error)

        worker = threading.Thread(target=start_in_thread)
        worker.start()
        worker.join()
        if failed:
            raise SystemExit(f"a: {failed[0]}")
        start_policy(directory, "b", preload=preload)
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
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")])),
        },
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


def test_a_picked_port_taken_before_the_server_binds_it_is_picked_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the helper absorbs: the first port picked is held by another socket; the
    server exits with "address already in use" and starts again on the next one."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        ports = iter([holder.getsockname()[1]])
        monkeypatch.setattr(policy_process, "free_port", lambda: next(ports, None) or free_port())
        child = start_policy(tmp_path, "policy", preload=False)
    try:
        assert b"address already in use" in (tmp_path / "policy.log").read_bytes()
        assert read_ready_file(tmp_path / "policy.ready")["pid"] == child.pid
    finally:
        child.terminate()
        child.wait(timeout=20)
