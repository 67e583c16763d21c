"""Tests of the session participant on real nemo-gym resources servers served over HTTP."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest

pytest.importorskip("resources_servers.example_session_state_mgmt.app")

from fastapi import Request
from nemo_gym.base_resources_server import (
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.server_utils import SESSION_ID_KEY
from pydantic import Field
from resources_servers.example_multi_turn_gymnasium.app import ExampleMultiTurnEnv
from resources_servers.example_session_state_mgmt.app import StatefulCounterResourcesServer

from envckpt.episodes import EnvironmentEpisode
from envckpt.http.serve import serve
from envckpt.ids import mint_checkpoint_id
from envckpt.nemo_gym.resources import APPLICATION_HEADER, SavedSession
from envckpt.nemo_gym.settings import CONFIG_BLOCK

from helpers.http_deployment import TOKEN
from helpers.nemo_gym_responses import EMPTY_RESPONSE
from helpers.nemo_gym_servers import global_config, hosted

PARAMS = {"input": [{"role": "user", "content": "add 2"}]}


def deadline() -> float:
    return time.time() + 30


async def restored_in(
    server: Any, directory: Path, episode: EnvironmentEpisode, prefix: str
) -> dict[str, Any]:
    """``server``'s restore of ``episode`` from ``directory`` under a fresh ``prefix`` id."""
    reply: dict[str, Any] = await server.envckpt.core.restore(
        mint_checkpoint_id(prefix),
        deadline_ts=deadline(),
        checkpoint_dir=str(directory),
        episode_ids=[episode],
    )
    return reply


def counter(**extra: Any) -> tuple[Any, Any]:
    return hosted(StatefulCounterResourcesServer, "counter", **extra)


async def seed(client: httpx.AsyncClient, url: str, key: str, initial: int = 3) -> httpx.Response:
    reply = await client.post(
        f"{url}/ng-rollout/{key}/seed_session", json={"initial_count": initial}
    )
    assert reply.status_code == 200, reply.text
    return reply


async def test_seed_links_the_session_and_tool_calls_are_admitted() -> None:
    """A prefixed seed links the cookie's session to the episode; tool calls run as that episode."""
    server, app = counter()
    participant = server.envckpt
    async with serve(app) as url, httpx.AsyncClient() as client:
        await seed(client, url, "r1")
        (session_id,) = participant.linked_sessions()
        assert participant.linked_sessions() == {session_id: "r1"}
        reply = await client.post(f"{url}/increment_counter", json={"count": 2})
        assert reply.json() == {"success": True}
        assert reply.headers[APPLICATION_HEADER].startswith(participant.process_tag)
        assert server.session_id_to_counter[session_id] == 5
        assert participant.core.counters.admitted == 2
    async with serve(app) as url, httpx.AsyncClient() as stranger:
        # No prefix and no linked session: not rollout work, passed through unadmitted.
        assert (await stranger.get(f"{url}/reverify_mode")).status_code == 200
        assert participant.core.counters.admitted == 2


async def test_closed_admission_refuses_with_the_envelope() -> None:
    """While a checkpoint is open a tool call is refused with 409 and changes nothing."""
    server, app = counter()
    core = server.envckpt.core
    async with serve(app) as url, httpx.AsyncClient() as client:
        await seed(client, url, "r1")
        cid = mint_checkpoint_id("t")
        assert (await core.prepare(cid, deadline_ts=deadline()))["report"]["ready"]
        refused = await client.post(f"{url}/increment_counter", json={"count": 2})
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "admission_closed"
        assert list(server.session_id_to_counter.values()) == [3]
        await core.resume(cid, deadline_ts=deadline())
        assert (await client.post(f"{url}/increment_counter", json={"count": 2})).status_code == 200


async def test_verify_ends_the_session_and_the_rollout_can_be_forgotten() -> None:
    """After verify the episode holds nothing live, so forget is accepted."""
    server, app = counter()
    core = server.envckpt.core
    async with serve(app) as url, httpx.AsyncClient() as client:
        await seed(client, url, "r1")
        body = {"responses_create_params": PARAMS, "response": EMPTY_RESPONSE, "expected_count": 3}
        verified = await client.post(f"{url}/ng-rollout/r1/verify", json=body)
        assert verified.json()["reward"] == 1.0
        assert server.envckpt.live_episodes() == frozenset()
        while core.fence.in_flight():  # the handler returns just after its reply left
            await asyncio.sleep(0.01)
        assert await core.forget(
            mint_checkpoint_id("f"), deadline_ts=deadline(), rollout_ids=["r1"]
        )


async def test_a_retired_attempt_is_refused_and_its_state_dropped() -> None:
    """Retire drops the session's state; a late tool call of that attempt gets stale_attempt."""
    server, app = counter()
    core = server.envckpt.core
    async with serve(app) as url, httpx.AsyncClient() as client:
        await seed(client, url, "r1")
        await core.retire(
            mint_checkpoint_id("r"),
            deadline_ts=deadline(),
            episode_ids=[EnvironmentEpisode("r1", 0)],
        )
        assert server.session_id_to_counter == {}
        late = await client.post(f"{url}/increment_counter", json={"count": 2})
        assert late.status_code == 409
        assert late.json()["error"]["code"] == "stale_attempt"
        assert server.session_id_to_counter == {}


async def test_commit_then_restore_in_a_fresh_server_continues_the_session(tmp_path: Path) -> None:
    """A committed session restores in a fresh server as the next attempt; its cookie works."""
    first, first_app = counter()
    episode = EnvironmentEpisode("r1", 0)
    async with serve(first_app) as url, httpx.AsyncClient() as client:
        await seed(client, url, "r1")
        await client.post(f"{url}/increment_counter", json={"count": 2})
        cookies = dict(client.cookies)
        cid = mint_checkpoint_id("c")
        core = first.envckpt.core
        await core.prepare(cid, deadline_ts=deadline())
        reply = await core.commit(
            cid, deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=[episode]
        )
        assert reply["episode_ids"] == ["r1"]
    second, second_app = counter()
    restored = await restored_in(second, tmp_path, episode, "restore")
    assert restored["restored"] == ["r1-a1"]
    assert list(second.session_id_to_counter.values()) == [5]
    await second.envckpt.core.resume(restored["checkpoint_id"], deadline_ts=deadline())
    async with serve(second_app) as url, httpx.AsyncClient(cookies=cookies) as client:
        reply = await client.post(f"{url}/increment_counter", json={"count": 1})
        assert reply.status_code == 200
        assert list(second.session_id_to_counter.values()) == [6]
        body = {"responses_create_params": PARAMS, "response": EMPTY_RESPONSE, "expected_count": 6}
        assert (await client.post(f"{url}/ng-rollout/r1-a1/verify", json=body)).json()[
            "reward"
        ] == 1.0


async def test_a_renamed_class_would_not_read_the_saved_cookie() -> None:
    """The cookie secret derives from the class name: a renamed subclass starts a new session."""
    server, _ = counter()
    assert type(server).__name__ == "StatefulCounterResourcesServer"
    renamed = type("Renamed", (StatefulCounterResourcesServer,), {"ray_enabled": False})
    assert server.get_session_middleware_key() == "StatefulCounterResourcesServer___counter"
    from helpers.nemo_gym_servers import build

    assert (
        build(renamed, "counter").get_session_middleware_key()
        != server.get_session_middleware_key()
    )


class KeepsStateWithoutProtocol(SimpleResourcesServer):
    ray_enabled = False
    notes: dict[str, int] = Field(default_factory=dict)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


async def test_a_server_without_the_protocol_reports_restarts() -> None:
    """No protocol and no adapter: restart_only, and a seeded rollout is reported as a restart."""
    server, app = hosted(KeepsStateWithoutProtocol, "notes")
    core = server.envckpt.core
    assert core.mode == "restart_only"
    async with serve(app) as url, httpx.AsyncClient() as client:
        await client.post(f"{url}/ng-rollout/r7/seed_session", json={})
        report = (await core.prepare(mint_checkpoint_id("p"), deadline_ts=deadline()))["report"]
    assert report["restarts"] == ["r7"]


async def test_every_admitted_application_is_audited_before_its_reply(tmp_path: Path) -> None:
    """Each successful admitted request leaves one audit line with the header's id and the state."""
    config = global_config("counter", "resources_servers", "test", domain="other")
    config[CONFIG_BLOCK] = {"audit_dir": str(tmp_path)}
    _, app = counter(config=config)
    async with serve(app) as url, httpx.AsyncClient() as client:
        await seed(client, url, "r1")
        reply = await client.post(f"{url}/increment_counter", json={"count": 4})
    lines = [
        json.loads(line) for line in (tmp_path / "counter.audit.jsonl").read_text().splitlines()
    ]
    assert [line["route"] for line in lines] == ["/seed_session", "/increment_counter"]
    assert lines[1]["application"] == reply.headers[APPLICATION_HEADER]
    assert lines[1]["request"] == {"count": 4}
    assert lines[1]["state"] == {"counter": 7}
    assert {line["capture_key"] for line in lines} == {"r1"}


async def test_a_terminated_gymnasium_step_ends_the_session() -> None:
    """A /step reply that says terminated ends the session (the server already dropped it)."""
    server, app = hosted(ExampleMultiTurnEnv, "multi")
    body = {"responses_create_params": PARAMS, "follow_ups": [], "expected_answer": "x"}
    async with serve(app) as url, httpx.AsyncClient() as client:
        assert (await client.post(f"{url}/ng-rollout/r1/reset", json=body)).status_code == 200
        assert server.envckpt.live_episodes() == {EnvironmentEpisode("r1", 0)}
        step = await client.post(f"{url}/step", json={**body, "response": EMPTY_RESPONSE})
        assert step.json()["terminated"] is True
        assert server.envckpt.live_episodes() == frozenset()


@pytest.mark.parametrize(
    "state",
    [
        {"session_id": "s", "state": {"counter": "x"}},
        {"session_id": "", "state": {"counter": 1}},
        {"session_id": "s"},
        {"session_id": "s", "state": [1]},
    ],
)
def test_tampered_saved_sessions_are_refused(state: dict[str, Any]) -> None:
    """A saved session that is malformed, or whose server state the adapter refuses, is invalid."""
    server, _ = counter()
    with pytest.raises(ValueError):
        server.envckpt.validate(EnvironmentEpisode("r1", 0), state)
    valid = server.envckpt.validate(
        EnvironmentEpisode("r1", 0), {"session_id": "s", "state": {"counter": 1}}
    )
    assert valid == SavedSession("s", {"counter": 1})


async def test_a_blackjack_hand_continues_with_the_same_cards_after_restore(tmp_path: Path) -> None:
    """Hands and generator go through commit and restore: the restored hand plays out the same."""
    from resources_servers.blackjack.app import BlackjackEnv

    hit = {
        **EMPTY_RESPONSE,
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "<action>hit</action>", "annotations": []}
                ],
            }
        ],
    }
    body = {"responses_create_params": PARAMS}
    first, first_app = hosted(BlackjackEnv, "blackjack")
    episode = EnvironmentEpisode("b1", 0)
    async with serve(first_app) as url, httpx.AsyncClient() as client:
        assert (await client.post(f"{url}/ng-rollout/b1/reset", json=body)).status_code == 200
        cookies = dict(client.cookies)
        cid = mint_checkpoint_id("c")
        await first.envckpt.core.prepare(cid, deadline_ts=deadline())
        await first.envckpt.core.commit(
            cid, deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=[episode]
        )
        await first.envckpt.core.resume(cid, deadline_ts=deadline())
        original = [(await client.post(f"{url}/step", json={**body, "response": hit})).json()]
    second, second_app = hosted(BlackjackEnv, "blackjack")
    restored = await restored_in(second, tmp_path, episode, "r")
    await second.envckpt.core.resume(restored["checkpoint_id"], deadline_ts=deadline())
    async with serve(second_app) as url, httpx.AsyncClient(cookies=cookies) as client:
        again = [(await client.post(f"{url}/step", json={**body, "response": hit})).json()]
    assert again == original


class PriceTables(SimpleResourcesServer):
    """Per-session prices, as a pandas-backed tool keeps them: a missing one is NaN."""

    ray_enabled = False
    checkpoint_mode: ClassVar[str] = "export_restore"
    prices: dict[str, list[float]] = Field(default_factory=dict)

    async def seed_session(
        self, request: Request, body: BaseSeedSessionRequest
    ) -> BaseSeedSessionResponse:
        self.prices[request.session[SESSION_ID_KEY]] = [1.5, float("nan")]
        return BaseSeedSessionResponse()

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)

    def export_session(self, session_id: str) -> dict[str, Any] | None:
        prices = self.prices.get(session_id)
        return None if prices is None else {"prices": list(prices)}

    def restore_session(self, session_id: str, state: dict[str, Any]) -> None:
        self.prices[session_id] = list(state["prices"])


def tables(non_finite: str | None) -> tuple[Any, Any]:
    config = global_config("tables", "resources_servers", "test", domain="other")
    if non_finite is not None:
        config[CONFIG_BLOCK] = {"non_finite": non_finite}
    return hosted(PriceTables, "tables", config=config)


async def test_a_nan_in_session_state_fails_the_commit_naming_server_session_and_key(
    tmp_path: Path,
) -> None:
    """Over HTTP: 500 checkpoint_error naming the server, the episode, the session and the key;
    nothing published. (The control calls carry the session's cookie: the gate must let the
    control plane through, not admit a prepare as the episode's work and wait for itself.)"""
    server, app = tables(None)
    core = server.envckpt.core
    async with serve(app) as url, httpx.AsyncClient() as client:
        await client.post(f"{url}/ng-rollout/r1/seed_session", json={})
        (session_id,) = server.prices
        cid = mint_checkpoint_id("c")
        headers = {"Authorization": f"Bearer {TOKEN}"}
        control = f"{url}/ng-control/v1/checkpoint"
        await client.post(
            f"{control}/prepare",
            json={"checkpoint_id": cid, "deadline_ts": deadline()},
            headers=headers,
        )
        reply = await client.post(
            f"{control}/commit",
            json={
                "checkpoint_id": cid,
                "deadline_ts": deadline(),
                "checkpoint_dir": str(tmp_path),
                "episode_ids": None,
            },
            headers=headers,
        )
    assert reply.status_code == 500, reply.text
    error = reply.json()["error"]
    assert error["code"] == "checkpoint_error"
    for named in ("server tables", "episode r1", f"session {session_id}", "state.prices[1]", "NaN"):
        assert named in error["detail"], error["detail"]
    assert not list(tmp_path.rglob("manifest.json"))
    assert core.phase == "prepared"  # the snapshot fails; the participant is unchanged


async def test_with_gyms_setting_a_nan_is_written_and_restored(tmp_path: Path) -> None:
    """envckpt.non_finite: gym: the NaN goes to disk as Gym writes it and comes back a NaN."""
    server, app = tables("gym")
    episode = EnvironmentEpisode("r1", 0)
    async with serve(app) as url, httpx.AsyncClient() as client:
        await client.post(f"{url}/ng-rollout/r1/seed_session", json={})
        cid = mint_checkpoint_id("c")
        core = server.envckpt.core
        await core.prepare(cid, deadline_ts=deadline())
        await core.commit(
            cid, deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=[episode]
        )
    (records,) = tmp_path.rglob("records-*.jsonl")
    assert b"NaN" in records.read_bytes()
    fresh, _ = tables("gym")
    restored = await restored_in(fresh, tmp_path, episode, "r")
    assert restored["restored"] == ["r1-a1"]
    (prices,) = fresh.prices.values()
    assert prices[0] == 1.5 and prices[1] != prices[1]
