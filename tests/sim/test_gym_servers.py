"""Tests for envckpt.sim.gym_servers: one Gym deployment on real HTTP servers in this process."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from envckpt.clock import FakeClock
from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.serve import ServerLimits
from envckpt.protocol import CHECKPOINT_ROUTE_PREFIX
from envckpt.sim.data_clients import CallbackStagingSink
from envckpt.sim.gym import (
    AGENT_SERVER,
    JUDGE_SERVER,
    MODEL_SERVER,
    RESOURCES_SERVER,
    GymConfig,
    expected_transcript,
)
from envckpt.sim.gym_servers import GymServers, Serving
from envckpt.sim.http_gym import HttpGym
from envckpt.sim.kinds.model import staging_payload

Ep = EnvironmentEpisode
TOKEN = "gym-token-0c4d9e"
TASK: dict[str, Any] = {"prompt": "plan the trip", "turns": 5}


async def status_of(url: str, *, token: str = TOKEN) -> httpx.Response:
    async with httpx.AsyncClient(trust_env=False) as client:
        return await client.get(
            f"{url}{CHECKPOINT_ROUTE_PREFIX}/status", headers={"Authorization": f"Bearer {token}"}
        )


async def test_a_rollout_over_http_equals_the_expected_transcript(tmp_path: Path) -> None:
    """The agent reaches the model and the tool over HTTP; the result is the scripted one."""
    async with (
        GymServers(seed=3, token=TOKEN, checkpoint_root=tmp_path) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        assert set(servers.urls) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER, JUDGE_SERVER}
        result = await gym.run(Ep("r1", 0), TASK)
        assert result["transcript"] == expected_transcript("r1", TASK, seed=3)
        assert result["transcript"] == servers.expected_transcript("r1", TASK)
        assert result["staging_keys"] == [f"r1/t{turn}" for turn in range(5)]
        assert servers.model.staging_ledger() == {} and servers.tool.sessions() == {}
        assert len(servers.tool.audit) == 5


async def test_discovery_finds_three_participants_and_the_judge_answers_404(tmp_path: Path) -> None:
    """The judge has data routes but no control routes: 404 on status, left out of discovery."""
    async with (
        GymServers(
            seed=1, token=TOKEN, checkpoint_root=tmp_path, resources_mode="stateless"
        ) as servers,
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


async def test_no_judge_means_three_servers(tmp_path: Path) -> None:
    """With judge=False only the three participants are served."""
    async with GymServers(token=TOKEN, checkpoint_root=tmp_path, judge=False) as servers:
        assert set(servers.urls) == {MODEL_SERVER, AGENT_SERVER, RESOURCES_SERVER}


async def test_a_staging_sink_receives_every_row(tmp_path: Path) -> None:
    """Every generation's row reaches the sink before the rollout ends, with its payload."""
    rows: dict[str, tuple[str, str]] = {}
    sink = CallbackStagingSink(
        lambda capture, key, payload: rows.__setitem__(key, (capture, payload))
    )
    async with (
        GymServers(seed=2, token=TOKEN, checkpoint_root=tmp_path, staging_sink=sink) as servers,
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


async def test_views_before_start_and_a_fresh_process(tmp_path: Path) -> None:
    """urls and the agent exist only while serving; fresh() is the same deployment, unstarted."""
    servers = GymServers(seed=6, token=TOKEN, checkpoint_root=tmp_path, tool_latency=0.001)
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


async def test_stopping_the_servers_fails_running_rollouts(tmp_path: Path) -> None:
    """Stopping ends every running rollout; its caller gets an error, as if the process died."""
    servers = GymServers(seed=1, token=TOKEN, checkpoint_root=tmp_path, tool_latency=0.01)
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


async def test_each_served_core_runs_its_lease_watchdog(tmp_path: Path) -> None:
    """A participant left prepared past its lease reopens on its own, with no further call."""
    clock = FakeClock()
    async with GymServers(
        token=TOKEN, checkpoint_root=tmp_path, clock=clock, lease_check_seconds=1.0
    ) as servers:
        for core in servers.cores.values():
            await core.prepare("abandoned", deadline_ts=clock.now() + 10)
        assert {core.phase for core in servers.cores.values()} == {"prepared"}
        clock.advance(servers.model.core.lease_grace + 60)
        end = time.monotonic() + 5
        while any(core.phase != "idle" for core in servers.cores.values()):
            assert time.monotonic() < end, "a lease watchdog did not run"
            await asyncio.sleep(0.01)


# ------------------------------------------------------------------ exposure


def test_serving_refuses_a_relative_root_and_a_bad_lease_check(tmp_path: Path) -> None:
    """A checkpoint root must be absolute; the lease check interval positive."""
    with pytest.raises(ValueError, match="absolute"):
        Serving(Path("relative/root"))
    with pytest.raises(ValueError, match="lease_check_seconds"):
        Serving(tmp_path, lease_check_seconds=0)
    with pytest.raises(ValueError, match="max_lease_seconds"):
        Serving(tmp_path, max_lease_seconds=-1)


async def test_servers_bind_loopback_and_serve_no_docs(tmp_path: Path) -> None:
    """Every server binds 127.0.0.1 and answers /docs, /redoc, /openapi.json with a 404 envelope."""
    async with (
        GymServers(token=TOKEN, checkpoint_root=tmp_path) as servers,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        for url in servers.urls.values():
            assert url.startswith("http://127.0.0.1:")
            for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect"):
                reply = await client.get(f"{url}{path}")
                assert reply.status_code == 404, (url, path, reply.text)
                assert reply.json()["error"]["code"] == "invalid_request"


async def test_docs_are_served_only_when_asked(tmp_path: Path) -> None:
    """expose_docs=True turns FastAPI's docs back on, on every server."""
    async with (
        GymServers(token=TOKEN, checkpoint_root=tmp_path, expose_docs=True) as servers,
        httpx.AsyncClient(trust_env=False) as client,
    ):
        for url in servers.urls.values():
            assert (await client.get(f"{url}/openapi.json")).status_code == 200


async def test_data_routes_refuse_a_body_over_their_limit(tmp_path: Path) -> None:
    """A body over the data-route limit is 413 in the envelope, on every data route."""
    serving = Serving(tmp_path, data_max_body_bytes=1024)
    servers = GymServers.from_config(GymConfig(token=TOKEN), serving=serving)
    async with servers, httpx.AsyncClient(trust_env=False) as client:
        padded = {"episode": {"rollout_id": "r", "attempt": 0}, "pad": "x" * 2000}
        routes = {
            JUDGE_SERVER: "generate",
            MODEL_SERVER: "generate",
            RESOURCES_SERVER: "call",
            AGENT_SERVER: "run",
        }
        for server, route in routes.items():
            reply = await client.post(f"{servers.urls[server]}/{route}", json=padded)
            assert reply.status_code == 413, (server, reply.text)
            assert reply.json()["error"]["code"] == "invalid_request"
        judged = await client.post(f"{servers.urls[JUDGE_SERVER]}/generate", json={"t": "x"})
        assert judged.status_code == 200


async def test_commit_outside_the_root_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    """Every participant is confined to the root: a commit naming another directory is 422."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    async with (
        GymServers(token=TOKEN, checkpoint_root=root, judge=False) as servers,
        HttpGym(servers.urls, token=TOKEN) as gym,
    ):
        participants = await gym.coordinator.discover()
        deadline = time.time() + 30
        assert (await gym.coordinator.prepare(participants, "c-1", deadline_ts=deadline)).prepared
        with pytest.raises(Exception, match="outside this participant's checkpoint root"):
            await gym.coordinator.commit(
                participants, "c-1", str(outside), [], deadline_ts=deadline
            )
        assert not outside.exists()
        assert {core.phase for core in servers.cores.values()} == {"prepared"}
        await gym.coordinator.commit(participants, "c-1", str(root / "s"), [], deadline_ts=deadline)
        assert {core.bounds.checkpoint_root for core in servers.cores.values()} == {root}


def test_the_default_limits_are_the_documented_ones(tmp_path: Path) -> None:
    """Serving defaults: loopback, 16 MiB data bodies, a 1 h longest lease, no docs."""
    serving = Serving(tmp_path)
    assert (serving.host, serving.data_max_body_bytes, serving.max_lease_seconds) == (
        "127.0.0.1",
        16 * 1024 * 1024,
        3600.0,
    )
    assert serving.limits == ServerLimits() and not serving.expose_docs
