"""A server process the tests start: wait for its ready file, stop it with SIGTERM.

process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
urls = wait_ready(ready, process, seconds=60, log=log_path)   # the file's JSON
...
stop(process, seconds=15)   # SIGTERM, then SIGKILL if it has not ended
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any


def wait_ready(ready: Path, process: subprocess.Popen[bytes], *, seconds: float, log: Path) -> Any:
    """The JSON ``process`` writes to ``ready`` once it serves; RuntimeError (with the end of
    its ``log``) if it exits first, or if ``seconds`` pass."""
    give_up = time.monotonic() + seconds
    while not ready.exists():
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
        if time.monotonic() > give_up:
            raise RuntimeError(f"the server was not ready in {seconds:g} s ({log})")
        time.sleep(0.05)
    return json.loads(ready.read_text())


def stop(process: subprocess.Popen[bytes], *, seconds: float) -> None:
    """SIGTERM, up to ``seconds`` for it to end, then SIGKILL; nothing if it already ended."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(seconds)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(seconds)
