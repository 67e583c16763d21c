"""Tests of the checkpointable simple_agent against nemo-gym's own, on a real deployment."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest

pytest.importorskip("responses_api_agents.simple_agent.app")

from envckpt.ids import mint_checkpoint_id
from envckpt.nemo_gym import examples

from helpers.http_deployment import TOKEN
from helpers.nemo_gym_responses import without_ids

CONTROL = "/ng-control/v1/checkpoint"


async def run(
    client: httpx.AsyncClient, url: str, task: dict[str, Any], rollout_id: str, attempt: int = 0
) -> httpx.Response:
    body = {**task, "_ng_rollout_id": rollout_id, "_ng_attempt_index": attempt}
    return await client.post(f"{url}/run", json=body, timeout=120)


async def control(client: httpx.AsyncClient, url: str, route: str, cid: str) -> dict[str, Any]:
    reply = await client.post(
        f"{url}{CONTROL}/{route}",
        json={"checkpoint_id": cid, "deadline_ts": time.time() + 60},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert reply.status_code == 200, reply.text
    body: dict[str, Any] = reply.json()
    return body


async def test_checkpointable_run_matches_nemo_gyms_own(shared_deployment: Any) -> None:
    """Same tasks through upstream simple_agent and the fork: same reward, same response."""
    urls = shared_deployment.urls
    tasks = examples.counter_tasks(3)
    async with httpx.AsyncClient() as client:
        ours = await asyncio.gather(
            *(run(client, urls["counter_agent"], t, f"sa-ck-{i}") for i, t in enumerate(tasks))
        )
        theirs = await asyncio.gather(
            *(
                run(client, urls["plain_counter_agent"], t, f"sa-up-{i}")
                for i, t in enumerate(tasks)
            )
        )
    for mine, upstream in zip(ours, theirs, strict=True):
        assert mine.status_code == upstream.status_code == 200
        a, b = mine.json(), upstream.json()
        assert a["reward"] == b["reward"] == 1.0
        assert without_ids(a["response"]) == without_ids(b["response"])
        assert a["envckpt"]["continued"] == []
        assert len(a["staging_keys"]) == a["envckpt"]["steps"]


async def test_a_run_parks_while_the_model_is_closed_then_finishes(shared_deployment: Any) -> None:
    """With the model prepared the run stops at a turn boundary; after resume it finishes."""
    urls = shared_deployment.urls
    task = examples.counter_tasks(4)[3]
    async with httpx.AsyncClient() as client:
        running = asyncio.create_task(run(client, urls["counter_agent"], task, "sa-park"))
        await asyncio.sleep(0.15)  # into its first turns
        cid = mint_checkpoint_id("park")
        prepared = await control(client, urls["policy_model"], "prepare", cid)
        assert prepared["report"]["ready"]
        # The turn under way (a tool call, say) finishes; the next model call
        # is refused and the run parks. How long that takes depends on load,
        # so the status is polled (an absolute deadline) instead of slept on.
        deadline = time.monotonic() + 30
        while True:
            status = (
                await client.get(
                    f"{urls['counter_agent']}{CONTROL}/status",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                )
            ).json()
            if status["report"]["counts"]["in_flight"] == 0 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert not running.done()  # parked: the model refuses its next call
        assert status["report"]["counts"]["in_flight"] == 0
        assert status["report"]["counts"]["live"] >= 1
        await control(client, urls["policy_model"], "resume", cid)
        reply = await asyncio.wait_for(running, timeout=60)
    assert reply.status_code == 200
    assert reply.json()["reward"] == 1.0


async def test_a_run_without_rollout_identity_is_refused(shared_deployment: Any) -> None:
    """The checkpointable /run needs _ng_rollout_id: 400 rollout_id_required, nothing started."""
    async with httpx.AsyncClient() as client:
        reply = await client.post(
            f"{shared_deployment.urls['counter_agent']}/run", json=examples.counter_tasks(1)[0]
        )
    assert reply.status_code == 400
    assert reply.json()["error"]["code"] == "rollout_id_required"
