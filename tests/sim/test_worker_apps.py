"""Tests for envckpt.sim.worker_apps: each simulated server's app, built by one uvicorn worker
from its launcher's environment (the processes themselves: test_multiworker.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from envckpt.http.workers.slots import WORKER_DIR_ENV, WORKERS_ENV
from envckpt.participant.model_calls import ModelCallPolicy
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX
from envckpt.sim import worker_apps
from envckpt.sim.worker_apps import SETTINGS_ENV, WorkerSettings

TOKEN = "worker-apps-token-0123"


@pytest.fixture
def environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkerSettings:
    settings = WorkerSettings(
        config={"seed": 3, "resources_mode": "restart_only", "tool_latency": 0.25},
        checkpoint_root=str(tmp_path),
        model_url="http://127.0.0.1:1",
        tool_url="http://127.0.0.1:2",
    )
    monkeypatch.setenv(SETTINGS_ENV, settings.to_env()[SETTINGS_ENV])
    monkeypatch.setenv("ENVCKPT_GYM_TOKEN", TOKEN)
    monkeypatch.setenv(WORKER_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(WORKERS_ENV, "2")
    return settings


async def post(app: Any, path: str, body: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://worker") as client:
        return await client.post(path, json=body)


def test_settings_round_trip_through_the_environment(environment: WorkerSettings) -> None:
    """What the launcher wrote is what a worker reads; the token comes from its variable."""
    assert WorkerSettings.from_env() == environment
    config = environment.gym_config()
    assert (config.seed, config.resources_mode, config.token) == (3, "restart_only", TOKEN)
    assert TOKEN not in json.dumps(environment.to_env())


@pytest.mark.parametrize(
    ("factory", "route", "kind"),
    [
        ("policy_model_app", "/generate", "model"),
        ("tool_resources_app", "/call", "resources"),
        ("simple_agent_app", "/run", "agent"),
    ],
)
async def test_each_factory_builds_its_servers_app_for_n_workers(
    environment: WorkerSettings, factory: str, route: str, kind: str
) -> None:
    """Its data route and the control routes answer (before the worker started, so the
    routes themselves, not a sibling); the participant forwards rollouts by owner."""
    app = getattr(worker_apps, factory)()
    data = await post(app, route, {"turn": 0})
    assert data.json()["error"]["code"] in ("invalid_request", "rollout_id_required")
    control = await post(app, f"{CHECKPOINT_ROUTE_PREFIX}/prepare", {})
    assert control.status_code == 401
    assert "EpisodeAffinity" in {m.cls.__name__ for m in app.user_middleware}


def test_the_request_guard_reads_its_deadline_from_the_settings() -> None:
    """uvicorn imports the protocol class by name in each worker: it carries the setting."""
    assert worker_apps.WorkerH11Protocol.read_seconds == worker_apps._settings_read_seconds()


def test_a_supervisor_stops_when_its_launcher_is_killed(tmp_path: Path) -> None:
    """SIGKILL of whoever started the supervisor: the kernel SIGTERMs it, uvicorn stops its
    workers, nothing is left running."""
    import os
    import signal
    import socket
    import subprocess
    import sys
    import time

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = worker_apps.supervisor_command(
        "policy_model", host="127.0.0.1", port=port, workers=2, keep_alive=5
    )
    # A light app: only the supervisor's fate is under test.
    options = json.loads(command[-1])
    options["app"] = "envckpt.http.apps:new_app"
    command[-1] = json.dumps(options)
    launcher = subprocess.Popen(
        [sys.executable, "-c", "import subprocess, sys\n"
         "child = subprocess.Popen(sys.argv[1:])\nprint(child.pid, flush=True)\nchild.wait()",
         *command],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    assert launcher.stdout is not None
    supervisor = int(launcher.stdout.readline())
    give_up = time.monotonic() + 60
    while not _children(supervisor) and time.monotonic() < give_up:
        time.sleep(0.1)
    workers = [child for child in _children(supervisor) if _alive(child)]
    assert workers, "uvicorn started no worker"
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    left = [supervisor, *workers]
    while any(map(_alive, left)) and time.monotonic() < give_up + 60:
        time.sleep(0.1)
    assert not any(map(_alive, left))


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_worker_builds_its_model_and_tool_with_every_setting_of_the_deployment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model-call policy and the latencies reach every worker (a worker once built its
    model with the default policy, so ``--workers N --model-calls wait`` refused calls)."""
    config = {"seed": 5, "model_calls": "wait", "model_latency": 0.5, "tool_latency": 0.25}
    settings = WorkerSettings(config=config, checkpoint_root=str(tmp_path))
    monkeypatch.setenv(SETTINGS_ENV, settings.to_env()[SETTINGS_ENV])
    monkeypatch.setenv("ENVCKPT_GYM_TOKEN", TOKEN)
    monkeypatch.setenv(WORKER_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(WORKERS_ENV, "2")
    built: list[Any] = []

    def keeping(builder: Any) -> Any:
        def build(*args: Any) -> Any:
            built.append(builder(*args))
            return built[-1]

        return build

    monkeypatch.setattr(worker_apps, "build_model", keeping(worker_apps.build_model))
    monkeypatch.setattr(worker_apps, "build_tool", keeping(worker_apps.build_tool))
    worker_apps.policy_model_app()
    worker_apps.tool_resources_app()
    model, tool = built
    assert (model.calls.policy, model.latency) == (ModelCallPolicy.WAIT, 0.5)
    assert (tool.latency, tool.mode) == (0.25, "export_restore")
