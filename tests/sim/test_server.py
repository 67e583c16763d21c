"""Tests for envckpt.sim.server: one Gym deployment on real HTTP servers, in process and as a
child process."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

import envckpt
from envckpt.episodes import EnvironmentEpisode
from envckpt.http.serve import serve
from envckpt.machines.tables import PARTICIPANT_PHASES
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX
from envckpt.sim.data_routes import rows_router
from envckpt.sim.gym import (
    AGENT_SERVER,
    JUDGE_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    expected_transcript,
)
from envckpt.sim.http_gym import HttpGym
from envckpt.sim.server import main, write_ready_file
from envckpt.statecharts.overlay import load_records, overlay

Ep = EnvironmentEpisode
TOKEN = "gym-token-0c4d9e"
ROWS_TOKEN = "rows-token-81aa-e5b7"
TASK: dict[str, Any] = {"prompt": "plan the trip", "turns": 5}
REPO = Path(envckpt.__file__).resolve().parent.parent


async def status_of(url: str, *, token: str = TOKEN) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.get(
            f"{url}{CHECKPOINT_ROUTE_PREFIX}/status", headers={"Authorization": f"Bearer {token}"}
        )


def test_write_ready_file_is_plain_json(tmp_path: Path) -> None:
    """The ready file holds the server -> URL map as JSON."""
    path = tmp_path / "urls.json"
    write_ready_file(path, {"b": "http://127.0.0.1:2", "a": "http://127.0.0.1:1"})
    assert json.loads(path.read_text()) == {"a": "http://127.0.0.1:1", "b": "http://127.0.0.1:2"}


SECRET_ENVS = (
    "ENVCKPT_GYM_TOKEN",
    "ENVCKPT_GYM_TOKEN_FILE",
    "ENVCKPT_ROWS_TOKEN",
    "ENVCKPT_ROWS_TOKEN_FILE",
    "ENVCKPT_CHECKPOINT_ROOT",
)


@pytest.mark.parametrize(
    ("env", "argv", "says"),
    [
        ({}, [], "ENVCKPT_GYM_TOKEN"),
        ({"ENVCKPT_GYM_TOKEN": "short"}, [], "16"),
        ({"ENVCKPT_GYM_TOKEN": TOKEN}, ["--token", TOKEN], "never taken from the command line"),
        ({"ENVCKPT_GYM_TOKEN": TOKEN}, ["--rows-token", ROWS_TOKEN], "never taken from the"),
        ({"ENVCKPT_GYM_TOKEN": TOKEN}, ["--rows-url", "http://127.0.0.1:1/rows"], "ROWS_TOKEN"),
        (
            {"ENVCKPT_GYM_TOKEN": TOKEN, "ENVCKPT_ROWS_TOKEN": TOKEN},
            ["--rows-url", "http://127.0.0.1:1/rows"],
            "must differ",
        ),
        ({"ENVCKPT_GYM_TOKEN": TOKEN}, [], "checkpoint root is required"),
        ({"ENVCKPT_GYM_TOKEN": TOKEN}, ["--checkpoint-root", "relative"], "absolute"),
        ({"ENVCKPT_GYM_TOKEN": TOKEN, "ENVCKPT_CHECKPOINT_ROOT": "relative"}, [], "absolute"),
    ],
)
def test_main_refuses_unsafe_or_missing_settings(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    argv: list[str],
    says: str,
) -> None:
    """A missing or short token, one on the command line, or no checkpoint root: exit 2."""
    for name in SECRET_ENVS:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as refused:
        main(["--ready-file", str(tmp_path / "urls.json"), *argv])
    assert refused.value.code == 2
    error = capsys.readouterr().err
    assert says in error
    assert TOKEN not in error and ROWS_TOKEN not in error


def test_main_reads_the_token_from_an_owner_only_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """ENVCKPT_GYM_TOKEN_FILE is read only when no other user can read it."""
    for name in SECRET_ENVS:
        monkeypatch.delenv(name, raising=False)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    monkeypatch.setenv("ENVCKPT_GYM_TOKEN_FILE", str(token_file))
    with pytest.raises(SystemExit):
        main(["--ready-file", str(tmp_path / "urls.json")])
    assert "chmod 600" in capsys.readouterr().err


async def wait_for_file(
    path: Path, process: asyncio.subprocess.Process, log: Path, timeout: float
) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert process.returncode is None, f"the server exited early: {log.read_text()[-2000:]}"
        assert time.monotonic() < end, f"the server never got ready: {log.read_text()[-2000:]}"
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def serving(
    process: asyncio.subprocess.Process, ready: Path, log: Path
) -> AsyncIterator[dict[str, str]]:
    """The server URLs once ``process`` wrote ``ready``; on leaving, SIGTERM, which it must
    exit 0 from (killed if anything failed before)."""
    try:
        await wait_for_file(ready, process, log, timeout=30)
        yield json.loads(ready.read_text())
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 15) == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_the_server_process_serves_and_exits_on_sigterm(tmp_path: Path) -> None:
    """python -m envckpt.sim.server writes its ready file, serves a rollout, ships its rows to
    the trainer endpoint, and exits 0 on SIGTERM."""
    rows: list[tuple[str, str, str]] = []
    trainer = FastAPI()
    trainer.include_router(rows_router(lambda *row: rows.append(row), token=ROWS_TOKEN))
    ready = tmp_path / "urls.json"
    audit = tmp_path / "audit.jsonl"
    log = tmp_path / "server.log"
    env = dict(
        os.environ,
        PYTHONPATH=str(REPO),
        ENVCKPT_GYM_TOKEN=TOKEN,
        ENVCKPT_ROWS_TOKEN=ROWS_TOKEN,
        ENVCKPT_CHECKPOINT_ROOT=str(tmp_path),
    )
    async with serve(trainer) as trainer_url:
        process = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "envckpt.sim.server", "--seed", "8"),
            *("--ready-file", str(ready), "--audit", str(audit)),
            *("--rows-url", f"{trainer_url}/rows"),
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        async with serving(process, ready, log) as urls:
            assert set(urls) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER, JUDGE_SERVER}
            assert (await status_of(urls[MODEL_SERVER])).json()["kind"] == "model"
            async with HttpGym(urls, token=TOKEN) as gym:
                result = await gym.run(Ep("r", 0), TASK)
            assert result["transcript"] == expected_transcript("r", TASK, seed=8)
            assert sorted(key for _, key, _ in rows) == result["staging_keys"]
            assert len(audit.read_text().splitlines()) == 5


async def serve_and_checkpoint(tmp_path: Path, *, args: list[str], env: dict[str, str]) -> None:
    """Start the server process, run a rollout, prepare and resume a checkpoint, stop it."""
    ready = tmp_path / "urls.json"
    stderr = tmp_path / "server.err"
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "envckpt.sim.server", "--seed", "4", "--ready-file", str(ready)),
        *("--checkpoint-root", str(tmp_path), *args),
        env=dict(os.environ, PYTHONPATH=str(REPO), ENVCKPT_GYM_TOKEN=TOKEN, **env),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=stderr.open("wb"),
    )
    async with serving(process, ready, stderr) as urls, HttpGym(urls, token=TOKEN) as gym:
        await gym.run(Ep("r", 0), TASK)
        participants = await gym.coordinator.discover()
        prepared = await gym.coordinator.prepare(
            participants, "ckpt-log", deadline_ts=time.time() + 20
        )
        assert prepared.prepared
        await gym.coordinator.resume(participants, "ckpt-log", deadline_ts=time.time() + 20)


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
