"""Tests for envckpt.http.workers.affinity: a rollout's data requests reach the worker that
holds it (forwarded over its private socket), and a gone owner is an explicit error."""

from __future__ import annotations

from pathlib import Path

import httpx

from envckpt.episodes import EnvironmentEpisode

from helpers.worker_groups import Workers

Ep = EnvironmentEpisode


async def test_a_request_for_another_workers_rollout_is_served_by_that_worker(
    tmp_path: Path,
) -> None:
    """Sent to worker 0, a call of worker 1's rollout changes worker 1's state only, and the
    reply comes back unchanged."""
    async with Workers(tmp_path, count=2) as workers:
        theirs, ours = Ep(workers.owned(1), 0), Ep(workers.owned(0), 0)
        for episode in (theirs, ours):
            reply = await workers.data(0, "call", episode, turn=0)
            assert reply.status_code == 200 and reply.json()["effect"] == f"{episode.rollout_id}/t0"
        assert set(workers[1].tool.states) == {theirs}
        assert set(workers[0].tool.states) == {ours}


async def test_a_refusal_of_the_owner_comes_back_as_it_was_sent(tmp_path: Path) -> None:
    """The owner's protocol error (a retired attempt) reaches the caller with its status."""
    async with Workers(tmp_path, count=2) as workers:
        episode = Ep(workers.owned(1), 0)
        workers[1].tool.core.fence.retire([episode])
        reply = await workers.data(0, "call", episode, turn=0)
        assert reply.status_code == 409 and reply.json()["error"]["code"] == "stale_attempt"


async def test_requests_without_a_rollout_are_served_where_they_arrive(tmp_path: Path) -> None:
    """No episode, or a body that is not JSON: the receiving worker's route answers."""
    async with Workers(tmp_path, count=2) as workers:
        transport = httpx.ASGITransport(app=workers[0].app)
        async with httpx.AsyncClient(transport=transport, base_url="http://w") as client:
            missing = await client.post("/call", json={"turn": 0, "action": "a"})
            garbled = await client.post(
                "/call", content=b"{nope", headers={"content-type": "application/json"}
            )
        assert missing.json()["error"]["code"] == "rollout_id_required"
        assert garbled.status_code == 422


async def test_a_rollout_whose_worker_is_gone_gets_an_explicit_error(tmp_path: Path) -> None:
    """Its state died with its worker: 503 checkpoint_error naming it, never a fresh run."""
    async with Workers(tmp_path, count=2) as workers:
        episode = Ep(workers.owned(1), 0)
        await workers.kill(1)
        reply = await workers.data(0, "call", episode, turn=0)
        assert reply.status_code == 503
        assert reply.json()["error"]["code"] == "checkpoint_error"
        assert "worker-1" in reply.json()["error"]["detail"]
        assert workers[0].tool.states == {}


async def test_an_oversized_body_is_refused_where_it_arrives(tmp_path: Path) -> None:
    """A body over the data limit is not buffered for forwarding: the local route refuses it."""
    async with Workers(tmp_path, count=2) as workers:
        episode = Ep(workers.owned(1), 0)
        huge = "x" * (17 * 1024 * 1024)
        reply = await workers.data(0, "call", episode, turn=0, padding=huge)
        assert reply.status_code == 413
        assert workers[1].tool.states == {}
