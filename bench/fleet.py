"""Start and stop many benchmark server processes (``bench/server_process.py``).

    with Fleet("floor", count=32, workdir=tmp, token=token, checkpoint_root=root) as fleet:
        fleet.urls[0]      # {"policy": "http://127.0.0.1:...", "agent": ..., "resources": ...}
        fleet.set_states(episodes=100, state_bytes=100_000)

``per_process=K`` packs K instances into each process (``count`` stays the
number of instances), as a large deployment does.

Processes start concurrently; each writes a ready file once it listens. On
exit every process gets SIGTERM, then SIGKILL if it lingers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from envckpt.closing import Closeable

REPO_ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_SECONDS = 120.0
_TICKS = os.sysconf("SC_CLK_TCK")


def child_env() -> dict[str, str]:
    """This environment with the checkout first on the path, so ``-m bench...`` resolves."""
    env = dict(os.environ)
    parts = [str(REPO_ROOT), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(parts))
    return env


class Fleet(Closeable):
    """``count`` Gym instances of one variant, ``per_process`` to a server process."""

    def __init__(
        self,
        variant: str,
        *,
        count: int,
        workdir: Path,
        token: str,
        checkpoint_root: Path,
        per_process: int = 1,
        episodes: int = 100,
        state_bytes: int = 1000,
        log: bool = True,
        profile_dir: Path | None = None,
    ) -> None:
        self.variant = variant
        self.count = count
        self.workdir = workdir / f"fleet-{variant}"
        self.token = token
        self.checkpoint_root = checkpoint_root
        self.per_process = per_process
        self.processes = -(-count // per_process)
        self.episodes = episodes
        self.state_bytes = state_bytes
        self.log = log
        self.profile_dir = profile_dir
        self.urls: list[dict[str, str]] = []
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> Fleet:
        self.workdir.mkdir(parents=True, exist_ok=True)
        ready = [self.workdir / f"ready-{index}.json" for index in range(self.processes)]
        try:
            for index, path in enumerate(ready):
                command = [
                    sys.executable,
                    "-m",
                    "bench.server_process",
                    "--variant",
                    self.variant,
                    "--token",
                    self.token,
                    "--ready-file",
                    str(path),
                    "--checkpoint-root",
                    str(self.checkpoint_root),
                    "--instances",
                    str(min(self.per_process, self.count - index * self.per_process)),
                    "--episodes",
                    str(self.episodes),
                    "--state-bytes",
                    str(self.state_bytes),
                ]
                if self.log and self.variant == "envckpt":
                    command += ["--log-file", str(self.workdir / f"transitions-{index}.jsonl")]
                if self.profile_dir is not None:
                    command += ["--profile", str(self.profile_dir / f"{self.variant}-{index}.prof")]
                self._procs.append(
                    subprocess.Popen(command, env=child_env(), stdin=subprocess.DEVNULL)
                )
            self.urls = [
                urls
                for path, proc in zip(ready, self._procs, strict=True)
                for urls in self._wait_ready(path, proc)
            ]
        except BaseException:
            self.close()
            raise
        return self

    def _wait_ready(self, path: Path, proc: subprocess.Popen[bytes]) -> list[dict[str, str]]:
        give_up = time.monotonic() + START_TIMEOUT_SECONDS
        while not path.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"{self.variant} server exited with {proc.returncode}")
            if time.monotonic() > give_up:
                raise RuntimeError(f"{self.variant} server did not start in time")
            time.sleep(0.02)
        urls: list[dict[str, str]] = json.loads(path.read_text())
        return urls

    def set_states(self, *, episodes: int, state_bytes: int, instances: int) -> None:
        """Replace the parked states of the first ``instances`` instances (between snapshots)."""
        body = json.dumps({"episodes": episodes, "state_bytes": state_bytes}).encode()
        # No proxy: the servers are on loopback whatever the environment says.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        for urls in self.urls[:instances]:
            for url in urls.values():
                request = urllib.request.Request(
                    f"{url}/bench/states",
                    data=body,
                    headers={"Content-Type": "application/json"},
                    method="POST",
                )
                with opener.open(request, timeout=60) as reply:
                    reply.read()
        self.episodes, self.state_bytes = episodes, state_bytes

    def cpu_seconds(self, instances: int) -> float:
        """User + system CPU seconds used so far by the processes of the first ``instances``."""
        total = 0
        for proc in self._procs[: -(-instances // self.per_process)]:
            with open(f"/proc/{proc.pid}/stat", encoding="ascii") as stat:
                # Fields after the command name (which may hold spaces): utime is
                # the 14th field of the line, stime the 15th.
                fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        return total / _TICKS

    def close(self) -> None:
        for proc in self._procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        give_up = time.monotonic() + 10.0
        for proc in self._procs:
            try:
                proc.wait(timeout=max(0.1, give_up - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._procs.clear()
