"""Tests of the checkpointable gymnasium_agent against nemo-gym's own, on a real deployment."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

pytest.importorskip("responses_api_agents.gymnasium_agent.app")

from envckpt.nemo_gym import examples

from helpers.nemo_gym_deployment import AGENTS
from helpers.nemo_gym_responses import without_ids


async def test_checkpointable_run_matches_nemo_gyms_own(shared_deployment: Any) -> None:
    """Same multi-turn tasks through upstream gymnasium_agent and the fork: same result."""
    assert AGENTS["multi_agent"][0] == "gymnasium_agent"
    urls = shared_deployment.urls
    tasks = examples.multi_turn_tasks(3)

    async def run(agent: str, task: dict[str, Any], rollout_id: str) -> dict[str, Any]:
        body = {**task, "_ng_rollout_id": rollout_id}
        async with httpx.AsyncClient() as client:
            reply = await client.post(f"{urls[agent]}/run", json=body, timeout=120)
        assert reply.status_code == 200, reply.text
        result: dict[str, Any] = reply.json()
        return result

    ours = await asyncio.gather(*(run("multi_agent", t, f"ga-ck-{i}") for i, t in enumerate(tasks)))
    theirs = await asyncio.gather(
        *(run("plain_multi_agent", t, f"ga-up-{i}") for i, t in enumerate(tasks))
    )
    for task, mine, upstream in zip(tasks, ours, theirs, strict=True):
        assert mine["reward"] == upstream["reward"] == 1.0
        assert (mine["terminated"], mine["truncated"]) == (
            upstream["terminated"],
            upstream["truncated"],
        )
        assert without_ids(mine["response"]) == without_ids(upstream["response"])
        assert without_ids(mine["responses_create_params"]) == without_ids(
            upstream["responses_create_params"]
        )
        assert mine["envckpt"]["steps"] == len(task["follow_ups"]) + 1
