"""Tests for envckpt.sim.server: one Gym deployment on real HTTP servers, in process and as a
child process."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import envckpt
from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.serve import serve
from envckpt.machines.overlay import load_records, overlay
from envckpt.machines.tables import PARTICIPANT_PHASES
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX
from envckpt.sim.data_clients import CallbackStagingSink
from envckpt.sim.data_routes import rows_router
from envckpt.sim.gym import (
    AGENT_SERVER,
    JUDGE_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    expected_transcript,
)
from envckpt.sim.http_gym import HttpGym
from envckpt.sim.kinds.model import staging_payload
from envckpt.sim.server import GymServers, main, write_ready_file

Ep = EnvironmentEpisode
TOKEN = "gym-token-0c4d9e"
ROWS_TOKEN = "rows-token-81aa"
TASK: dict[str, Any] = {"prompt": "plan the trip", "turns": 5}
REPO = Path(envckpt.__file__).resolve().parent.parent


async def status_of(url: str, *, token: str = TOKEN) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.get(
            f"{url}{CHECKPOINT_ROUTE_PREFIX}/status", headers={"Authorization": f"Bearer {token}"}
        )


async def test_a_rollout_over_http_equals_the_expected_transcript() -> None:
    """The agent reaches the model and the tool over HTTP; the result is the scripted one."""
    async with (
        GymServers(seed=3, token=TOKEN) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        assert set(servers.urls) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER, JUDGE_SERVER}
        result = await gym.run(Ep("r1", 0), TASK)
        assert result["transcript"] == expected_transcript("r1", TASK, seed=3)
        assert result["transcript"] == servers.expected_transcript("r1", TASK)
        assert result["staging_keys"] == [f"r1/t{turn}" for turn in range(5)]
        assert servers.model.staging_ledger() == {} and servers.tool.sessions() == {}
        assert len(servers.tool.audit) == 5


async def test_discovery_finds_three_participants_and_the_judge_answers_404() -> None:
    """The judge has data routes but no control routes: 404 on status, left out of discovery."""
    async with (
        GymServers(seed=1, token=TOKEN, resources_mode="stateless") as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        judge = servers.urls[JUDGE_SERVER]
        assert (await status_of(judge)).status_code == 404
        async with httpx.AsyncClient(trust_env=False) as client:
            verdict = await client.post(f"{judge}/generate", json={"text": "x"})
        assert verdict.status_code == 200 and verdict.json()["text"].startswith("judge-")
        participants = await gym.coordinator.discover()
        assert {(m.server_name, m.kind, m.mode) for m in participants.members} == {
            (MODEL_SERVER, "model", "export_restore"),
            (AGENT_SERVER, "agent", "export_restore"),
            (RESOURCES_SERVER, "resources", "stateless"),
        }
        assert (await status_of(servers.urls[MODEL_SERVER], token="wrong")).status_code == 401


async def test_no_judge_means_three_servers() -> None:
    """With judge=False only the three participants are served."""
    async with GymServers(token=TOKEN, judge=False) as servers:
        assert set(servers.urls) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER}


async def test_a_staging_sink_receives_every_row() -> None:
    """Every generation's row reaches the sink before the rollout ends, with its payload."""
    rows: dict[str, tuple[str, str]] = {}
    sink = CallbackStagingSink(
        lambda capture, key, payload: rows.__setitem__(key, (capture, payload))
    )
    async with (
        GymServers(seed=2, token=TOKEN, staging_sink=sink) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        results = await asyncio.gather(gym.run(Ep("a", 0), TASK), gym.run(Ep("b", 2), TASK))
    expected = {
        key: (result["capture_key"], staging_payload(turn["turn"], turn["action"]))
        for result in results
        for key, turn in zip(result["staging_keys"], result["turns"], strict=True)
    }
    assert rows == expected
    assert len(rows) == 10 and "b-a2/t4" in rows


async def test_views_before_start_and_a_fresh_process() -> None:
    """urls and the agent exist only while serving; fresh() is the same deployment, unstarted."""
    servers = GymServers(seed=6, token=TOKEN, tool_latency=0.001)
    with pytest.raises(RuntimeError):
        servers.urls  # noqa: B018
    with pytest.raises(RuntimeError):
        servers.agent  # noqa: B018
    fresh = servers.fresh()
    assert fresh.config == servers.config and fresh.model is not servers.model
    assert TOKEN not in repr(servers)
    async with servers:
        with pytest.raises(RuntimeError):
            await servers.start()
        assert servers.cores[AGENT_SERVER] is servers.agent.core
    with pytest.raises(RuntimeError):
        servers.urls  # noqa: B018


async def test_stopping_the_servers_fails_running_rollouts() -> None:
    """Stopping ends every running rollout; its caller gets an error, as if the process died."""
    servers = GymServers(seed=1, token=TOKEN, tool_latency=0.01)
    await servers.start()
    gym = HttpGym(servers.urls, token=TOKEN)
    try:
        run = gym.start(Ep("r", 0), {"prompt": "p", "turns": 200})
        while not servers.agent.sessions():
            await asyncio.sleep(0.005)
        await servers.stop()
        with pytest.raises(ParticipantError) as stopped:
            await asyncio.wait_for(run, 10)
        assert stopped.value.code == "checkpoint_error"
    finally:
        await servers.stop()
        await gym.aclose()


async def test_each_served_core_runs_its_lease_watchdog() -> None:
    """A participant left prepared past its lease reopens on its own, with no further call."""
    clock = FakeClock()
    async with GymServers(token=TOKEN, clock=clock, lease_check_seconds=1.0) as servers:
        for core in servers.cores.values():
            await core.prepare("abandoned", deadline_ts=clock.now() + 10)
        assert {core.phase for core in servers.cores.values()} == {"prepared"}
        clock.advance(servers.model.core.lease_grace + 60)
        end = time.monotonic() + 5
        while any(core.phase != "idle" for core in servers.cores.values()):
            assert time.monotonic() < end, "a lease watchdog did not run"
            await asyncio.sleep(0.01)


def test_write_ready_file_is_plain_json(tmp_path: Path) -> None:
    """The ready file holds the server -> URL map as JSON."""
    path = tmp_path / "urls.json"
    write_ready_file(path, {"b": "http://127.0.0.1:2", "a": "http://127.0.0.1:1"})
    assert json.loads(path.read_text()) == {"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}


def test_main_refuses_missing_token_and_half_rows_options(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No token, or --rows-url without --rows-token, is a usage error (exit 2)."""
    monkeypatch.delenv("ENVCKPT_GYM_TOKEN", raising=False)
    ready = str(tmp_path / "urls.json")
    with pytest.raises(SystemExit) as no_token:
        main(["--ready-file", ready])
    with pytest.raises(SystemExit) as half_rows:
        main(["--token", TOKEN, "--ready-file", ready, "--rows-url", "http://127.0.0.1:1/rows"])
    assert no_token.value.code == half_rows.value.code == 2


async def wait_for_file(
    path: Path, process: asyncio.subprocess.Process, log: Path, timeout: float
) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert process.returncode is None, f"the server exited early: {log.read_text()[-2000:]}"
        assert time.monotonic() < end, f"the server never got ready: {log.read_text()[-2000:]}"
        await asyncio.sleep(0.05)


async def test_the_server_process_serves_and_exits_on_sigterm(tmp_path: Path) -> None:
    """python -m envckpt.sim.server writes its ready file, serves a rollout, ships its rows to
    the trainer endpoint, and exits 0 on SIGTERM."""
    rows: list[tuple[str, str, str]] = []
    trainer = FastAPI()
    trainer.include_router(rows_router(lambda *row: rows.append(row), token=ROWS_TOKEN))
    ready = tmp_path / "urls.json"
    audit = tmp_path / "audit.jsonl"
    log = tmp_path / "server.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), ENVCKPT_GYM_TOKEN=TOKEN)
    async with serve(trainer) as trainer_url:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "envckpt.sim.server", "--seed", "8"),
            *("--ready-file", str(ready), "--audit", str(audit)),
            *("--rows-url", f"{trainer_url}/rows", "--rows-token", ROWS_TOKEN),
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        try:
            await wait_for_file(ready, process, log, timeout=30)
            urls = json.loads(ready.read_text())
            assert set(urls) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER, JUDGE_SERVER}
            assert (await status_of(urls[MODEL_SERVER])).json()["kind"] == "model"
            async with HttpGym(urls, token=TOKEN) as gym:
                result = await gym.run(Ep("r", 0), TASK)
            assert result["transcript"] == expected_transcript("r", TASK, seed=8)
            assert sorted(key for _, key, _ in rows) == result["staging_keys"]
            assert len(audit.read_text().splitlines()) == 5
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 15) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()


async def serve_and_checkpoint(tmp_path: Path, *, args: list[str], env: dict[str, str]) -> None:
    """Start the server process, run a rollout, prepare and resume a checkpoint, stop it."""
    ready = tmp_path / "urls.json"
    stderr = tmp_path / "server.err"
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "envckpt.sim.server", "--seed", "4", "--ready-file", str(ready)),
        *args,
        env=dict(os.environ, PYTHONPATH=str(REPO), ENVCKPT_GYM_TOKEN=TOKEN, **env),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr.open("wb"),
    )
    try:
        await wait_for_file(ready, process, stderr, timeout=30)
        async with HttpGym(json.loads(ready.read_text()), token=TOKEN) as gym:
            await gym.run(Ep("r", 0), TASK)
            participants = await gym.coordinator.discover()
            prepared = await gym.coordinator.prepare(
                participants, "ckpt-log", deadline_ts=time.time() + 20
            )
            assert prepared.prepared
            await gym.coordinator.resume(participants, "ckpt-log", deadline_ts=time.time() + 20)
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_log_json_records_every_participant_transition_as_json_lines(tmp_path: Path) -> None:
    """--log-json writes only JSON lines naming server and --instance-id; they overlay the chart."""
    log = tmp_path / "gym.jsonl"
    args = ["--log-json", str(log), "--instance-id", "shard/replica-4"]
    await serve_and_checkpoint(tmp_path, args=args, env={})
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    assert entries and all(isinstance(entry, dict) and "timestamp" in entry for entry in entries)
    assert not [entry for entry in entries if entry.get("logger", "").startswith("transitions")]
    phases = [
        (e["instance_id"], e["trigger"])
        for e in entries
        if e.get("machine") == "participant_phases"
    ]
    named = {(e["server"], e["gym_instance_id"]) for e in entries if e.get("machine")}
    assert named == {
        (name, "shard/replica-4") for name in (MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER)
    }
    for server in (MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER):
        assert [trigger for name, trigger in phases if name == server] == [
            "prepare",
            "ready",
            "resume",
        ]
    chart = overlay(PARTICIPANT_PHASES, load_records(log))
    assert '    s_preparing ==>|"ready \u00d73"| s_prepared' in chart
    assert "    class s_committed,s_restored unvisited" in chart


async def test_the_log_file_may_come_from_the_environment(tmp_path: Path) -> None:
    """ENVCKPT_GYM_LOG names the JSON-lines log when --log-json is not given."""
    log = tmp_path / "from-env.jsonl"
    await serve_and_checkpoint(tmp_path, args=[], env={"ENVCKPT_GYM_LOG": str(log)})
    records = load_records(log)
    assert {record.machine for record in records} == {"participant_phases"}
    assert len(records) == 9
