"""What the security tests attack: a real ``python -m envckpt.sim.server`` process, and a
trainer rows endpoint, both on 127.0.0.1, with tokens passed the way envckpt passes them.

    target.urls["policy_model"], target.control_token, target.rows_url, target.root
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from envckpt.http.apps import new_app
from envckpt.http.serve import serve_in_thread
from envckpt.http.tokens import new_token
from envckpt.sim.data_routes import rows_router

from helpers.server_process import stop, wait_ready

READY_SECONDS = 60.0


@dataclass
class Target:
    """The servers under attack and what the corpus may name."""

    urls: dict[str, str]
    control_token: str
    rows_token: str
    rows_url: str
    root: Path
    outside: Path
    rows: list[tuple[str, str, str]] = field(default_factory=list)
    process: subprocess.Popen[bytes] | None = None


@pytest.fixture(scope="session")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    base = tmp_path_factory.mktemp("security")
    root, outside = base / "root", base / "outside"
    root.mkdir()
    outside.mkdir()
    # Paths through symlinks: one leading out of the root, one staying inside.
    (root / "escape").symlink_to(outside)
    (root / "inside").symlink_to(root / "real")
    (root / "real").mkdir()
    (root / "planted").mkdir()
    (root / "planted" / "gym").symlink_to(outside)
    control, rows_token = new_token(), new_token()
    received: list[tuple[str, str, str]] = []
    trainer = new_app()  # as the demo's trainer builds it
    trainer.include_router(rows_router(lambda *row: received.append(row), token=rows_token))
    ready, log = base / "urls.json", base / "server.log"
    env = {**os.environ, "ENVCKPT_GYM_TOKEN": control, "ENVCKPT_CHECKPOINT_ROOT": str(root)}
    command = [
        sys.executable,
        "-m",
        "envckpt.sim.server",
        "--seed",
        "5",
        "--ready-file",
        str(ready),
    ]
    with serve_in_thread(trainer) as trainer_url, log.open("wb") as output:
        process = subprocess.Popen(command, env=env, stdout=output, stderr=subprocess.STDOUT)
        try:
            urls = wait_ready(ready, process, seconds=READY_SECONDS, log=log)
            yield Target(
                urls=urls,
                control_token=control,
                rows_token=rows_token,
                rows_url=f"{trainer_url}/rows",
                root=root,
                outside=outside,
                rows=received,
                process=process,
            )
        finally:
            stop(process, seconds=15)


@pytest.fixture(scope="session")
def http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=60.0, trust_env=False) as client:
        yield client
