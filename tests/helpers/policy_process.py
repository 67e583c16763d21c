"""The scripted policy as its own server process, on a port picked for it.

A picked port can be taken by another process before the server binds it
(tests run side by side): the server then exits with "address already in
use" and is started again on another port, as the launcher does. Imported
by tests, and by the launcher scripts they run in a subprocess::

    child = start_policy(tmp_path, "policy", preload=False)   # ready: tmp_path/policy.ready
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from envckpt.nemo_gym.launcher import free_port
from envckpt.nemo_gym.processes import ServerProcess, start_server

# How long a server process may take to write its ready file (importing
# nemo-gym alone can take tens of seconds on a loaded machine).
READY_SECONDS = 120.0
# Ports picked in turn before giving up: each is taken only by a rare race.
ATTEMPTS = 5
_PORT_TAKEN = b"address already in use"


def start_policy(directory: Path, name: str, *, preload: bool) -> ServerProcess:
    """A scripted-policy server that has written ``directory/<name>.ready``; its log is
    ``<name>.log``. AssertionError, naming the exit code and the log's end, otherwise."""
    ready, log = directory / f"{name}.ready", directory / f"{name}.log"
    for _ in range(ATTEMPTS):
        since = log.stat().st_size if log.exists() else 0
        child = start_server(
            "envckpt.nemo_gym.scripted_policy",
            ["--port", str(free_port()), "--ready-file", str(ready)],
            env=dict(os.environ),
            log=log,
            preload=preload,
        )
        give_up = time.monotonic() + READY_SECONDS
        while not ready.exists() and child.poll() is None and time.monotonic() < give_up:
            time.sleep(0.05)
        if ready.exists():
            return child
        if child.poll() is None or _PORT_TAKEN not in log.read_bytes()[since:]:
            break
    code = child.poll()
    if code is None:
        child.kill()
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise AssertionError(f"{name} not ready (exit code {code}): {tail}")
