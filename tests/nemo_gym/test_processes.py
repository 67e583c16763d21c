"""Tests of starting server processes: a fresh interpreter, or forked from a preloaded one."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest

from envckpt.nemo_gym.launcher import free_port
from envckpt.nemo_gym.processes import start_server
from envckpt.nemo_gym.readiness import read_ready_file


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
        for _ in range(600):
            if ready.exists() or child.poll() is not None:
                break
            time.sleep(0.05)
        record = read_ready_file(ready)
        assert record["pid"] == child.pid != os.getpid()
        models = httpx.get(f"{record['url']}/v1/models").json()
        assert models["data"][0]["id"] == "envckpt-scripted-policy"
    finally:
        child.terminate()
        code = child.wait(timeout=20)
    assert code in (0, -signal.SIGTERM)
