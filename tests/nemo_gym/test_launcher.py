"""Tests of the Ray-free launcher: real server processes on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

pytest.importorskip("resources_servers.example_session_state_mgmt.app")

from envckpt.nemo_gym import launcher
from envckpt.nemo_gym.launcher import launch, resolve, server_names
from envckpt.nemo_gym.settings import write_token_file

from helpers.http_deployment import TOKEN

COUNTER = {
    "counter": {
        "resources_servers": {
            "example_session_state_mgmt": {"entrypoint": "app.py", "domain": "agent"}
        }
    },
    "envckpt": {"checkpoint_root": tempfile.gettempdir()},
}


def test_resolve_fills_hosts_ports_and_what_nemo_gym_reads() -> None:
    """Every server gets 127.0.0.1 and a free port; an explicit port is kept; head_server is set."""
    config = {
        **COUNTER,
        "other": {"resources_servers": {"x": {"entrypoint": "app.py", "port": 12345}}},
    }
    resolved = resolve(config)
    inner = resolved["counter"]["resources_servers"]["example_session_state_mgmt"]
    assert inner["host"] == "127.0.0.1" and inner["port"] > 0
    assert resolved["other"]["resources_servers"]["x"]["port"] == 12345
    assert set(resolved["head_server"]) == {"host", "port"}
    assert resolved["dry_run"] is False
    assert server_names(resolved) == ["counter", "other"]


@pytest.mark.parametrize("preload", [False, True])
def test_a_yaml_config_starts_and_sigterm_stops_it(tmp_path: Path, preload: bool) -> None:
    """From a YAML file: the server answers with its control routes; SIGTERM stops it cleanly."""
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(COUNTER))
    token_file = write_token_file(tmp_path / "token", TOKEN)
    deployment = launch(
        config_file, run_dir=tmp_path / "run", token_file=token_file, preload=preload
    )
    try:
        url = deployment.urls["counter"]
        status = httpx.get(
            f"{url}/ng-control/v1/checkpoint/status", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert status.json()["server_name"] == "counter"
        pid = deployment.pids()["counter"]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert TOKEN.encode() not in cmdline  # secrets never on a command line
    finally:
        codes = deployment.stop()
    assert codes["counter"] in (0, -signal.SIGTERM)  # stopped by SIGTERM, not killed
    assert not any(deployment.alive().values())


def test_a_server_that_cannot_start_fails_the_launch(tmp_path: Path) -> None:
    """A token file others can read makes the server refuse to start, and launch says so."""
    token_file = write_token_file(tmp_path / "token", TOKEN)
    os.chmod(token_file, 0o644)
    with pytest.raises(RuntimeError, match="exited during startup"):
        launch(COUNTER, run_dir=tmp_path / "run", token_file=token_file, startup_timeout=60)
    assert "chmod 600" in (tmp_path / "run" / "counter.log").read_text()


@pytest.fixture(params=["bound", "listening"])
def held_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port another socket holds while the test runs: bound, as an outgoing connection
    holds its local port, or listening, as another server would (it accepts the
    readiness probe's connection, and must not pass for the server)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        if request.param == "listening":
            holder.listen()
        yield int(holder.getsockname()[1])


def _picks(monkeypatch: pytest.MonkeyPatch, *ports: int) -> list[int]:
    """``free_port`` hands out ``ports`` first, then really free ones; what it handed out."""
    queue, handed = list(ports), []

    def pick(host: str = launcher.HOST) -> int:
        port = queue.pop(0) if queue else real_free_port(host)
        handed.append(port)
        return port

    real_free_port = launcher.free_port
    monkeypatch.setattr(launcher, "free_port", pick)
    return handed


def test_a_picked_port_taken_before_its_server_binds_is_picked_again(
    tmp_path: Path, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another socket takes the port the launcher picked: the attempt stops, and the
    deployment starts again on fresh ports and answers."""
    handed = _picks(monkeypatch, held_port)
    token_file = write_token_file(tmp_path / "token", TOKEN)
    deployment = launch(COUNTER, run_dir=tmp_path / "run", token_file=token_file)
    try:
        url = deployment.urls["counter"]
        status = httpx.get(
            f"{url}/ng-control/v1/checkpoint/status", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert status.json()["server_name"] == "counter"
    finally:
        deployment.stop()
    assert handed[0] == held_port and not url.endswith(f":{held_port}")
    log = (tmp_path / "run" / "counter.log").read_text().lower()
    assert log.count("address already in use") == 1


def test_a_picked_port_taken_every_time_fails_after_the_attempts(
    tmp_path: Path, held_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tampered: the launcher is handed the taken port every time; it gives up after
    PORT_ATTEMPTS starts and says why."""
    _picks(monkeypatch, *[held_port] * (2 * launcher.PORT_ATTEMPTS))
    token_file = write_token_file(tmp_path / "token", TOKEN)
    with pytest.raises(launcher.ServersExited, match="taken in each of 3 attempts"):
        launch(COUNTER, run_dir=tmp_path / "run", token_file=token_file)
    log = (tmp_path / "run" / "counter.log").read_text().lower()
    assert log.count("address already in use") == launcher.PORT_ATTEMPTS == 3


def test_a_taken_port_the_config_names_fails_at_once(
    tmp_path: Path, held_port: int, request: pytest.FixtureRequest
) -> None:
    """A port the config names is the operator's: no other is tried; the error names the
    port and, for a listening holder, its pid, before any server starts."""
    inner = dict(COUNTER["counter"]["resources_servers"]["example_session_state_mgmt"])
    config = {
        **COUNTER,
        "counter": {
            "resources_servers": {"example_session_state_mgmt": {**inner, "port": held_port}}
        },
    }
    token_file = write_token_file(tmp_path / "token", TOKEN)
    with pytest.raises(launcher.PortInUse) as failed:
        launch(config, run_dir=tmp_path / "run", token_file=token_file)
    error = failed.value
    assert "attempts" not in str(error) and error.names == ["counter"]
    assert error.port == held_port and f"port {held_port}" in str(error)
    log = tmp_path / "run" / "counter.log"
    if request.node.callspec.params["held_port"] == "listening":
        # Seen in /proc/net/tcp: refused before the server was started at all.
        assert f"pid {os.getpid()}" in error.holder and not log.exists()
    else:
        # Bound, not listening, is not in /proc/net/tcp: the server's bind names it.
        assert log.read_text().lower().count("address already in use") == 1
