"""Tests of the policy model participant: the generation gate, token rows, export and restore."""

from __future__ import annotations

import contextlib
import copy
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("nemo_gym.token_id_capture")

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from nemo_gym.token_id_capture import (
    FileLineageStore,
    TokenCaptureStore,
    TokenEntry,
    stamp_continuation,
    stamp_lineage,
)
from nemo_gym.token_id_capture.records import ParentResolutionStatus

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.http.serve import serve
from envckpt.ids import mint_checkpoint_id
from envckpt.nemo_gym.model import RELEASE_PATH, GenerationGate, ModelParticipant, parse_rows

USER = {"role": "user", "content": "hello", "type": "message"}


def assistant(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": text}],
    }


def entry(
    capture_key: str,
    call_id: str,
    request: list[dict[str, Any]],
    text: str,
    *,
    parent: str | None = None,
) -> TokenEntry:
    prompt = list(range(len(request) * 10))
    made = TokenEntry(
        rollout_id=capture_key,
        model_call_id=call_id,
        prompt_token_ids=prompt,
        generation_token_ids=[7, 8, 9],
        generation_log_probs=[-0.1, -0.2, -0.3],
        output_items=[assistant(text)],
    )
    stamp_continuation(made, request)
    status = ParentResolutionStatus.ROOT if parent is None else ParentResolutionStatus.RESOLVED
    return stamp_lineage(made, parent, parent_resolution=status)


class Recorder:
    """Stands in for the trainer's row endpoint."""

    def __init__(self, fail: ParticipantError | None = None) -> None:
        self.rows: dict[str, tuple[str, str]] = {}
        self.fail = fail

    async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.rows[staging_key] = (capture_key, payload)

    async def aclose(self) -> None:
        return None


def model_app(participant: ModelParticipant, entries: dict[str, TokenEntry]) -> Any:
    """The gate in front of a handler that captures one prepared entry per call, like vllm_model."""
    app = FastAPI()

    @app.post("/ng-rollout/{key}/training-token-capture/v1/responses")
    async def responses(key: str) -> JSONResponse:
        # nemo-gym never fails a call for a capture error; the gate does.
        with contextlib.suppress(Exception):
            await participant.put(entries[key])
        return JSONResponse({"ok": key})

    @app.post("/v1/responses")
    async def unprefixed() -> JSONResponse:
        return JSONResponse({"ok": "unprefixed"})

    app.post(RELEASE_PATH)(participant.release_endpoint)
    app.add_middleware(GenerationGate, participant=participant)
    return app


def deadline() -> float:
    return time.time() + 30


def path(key: str) -> str:
    return f"/ng-rollout/{key}/training-token-capture/v1/responses"


async def test_gate_admits_prefixed_generations_and_records_their_rows(tmp_path: Path) -> None:
    """A prefixed call is admitted, its row staged, stored and recorded under its staging key."""
    recorder = Recorder()
    participant = ModelParticipant(
        server_name="policy", store=TokenCaptureStore(tmp_path), stager=recorder
    )
    first = entry("r1", "call-a", [USER], "hi")
    async with serve(model_app(participant, {"r1": first})) as url, httpx.AsyncClient() as client:
        assert (await client.post(f"{url}{path('r1')}", json={})).json() == {"ok": "r1"}
        unprefixed = await client.post(f"{url}/v1/responses", json={})
        assert unprefixed.status_code == 400
        assert unprefixed.json()["error"]["code"] == "rollout_id_required"
    assert list(recorder.rows) == ["r1/call-a"]
    assert [row.staging_key for row in participant.rows()["r1"]] == ["r1/call-a"]
    assert [e.model_call_id for e in TokenCaptureStore(tmp_path).read_entries("r1")] == ["call-a"]
    extras = participant.commit_extras((EnvironmentEpisode("r1", 0),))
    assert extras == {
        "staging_keys": ["r1/call-a"],
        "staging_keys_by_episode": {"r1": ["r1/call-a"]},
    }


async def test_closed_admission_and_stale_attempts_are_refused(tmp_path: Path) -> None:
    """While prepared a generation gets 409 admission_closed; a retired attempt stale_attempt."""
    participant = ModelParticipant(server_name="policy", store=TokenCaptureStore(tmp_path))
    entries = {"r1": entry("r1", "a", [USER], "hi"), "r2": entry("r2", "b", [USER], "hi")}
    async with serve(model_app(participant, entries)) as url, httpx.AsyncClient() as client:
        cid = mint_checkpoint_id("p")
        await participant.core.prepare(cid, deadline_ts=deadline())
        closed = await client.post(f"{url}{path('r1')}", json={})
        assert (closed.status_code, closed.json()["error"]["code"]) == (409, "admission_closed")
        await participant.core.resume(cid, deadline_ts=deadline())
        await participant.core.retire(
            mint_checkpoint_id("r"),
            deadline_ts=deadline(),
            episode_ids=[EnvironmentEpisode("r2", 0)],
        )
        stale = await client.post(f"{url}{path('r2')}", json={})
        assert (stale.status_code, stale.json()["error"]["code"]) == (409, "stale_attempt")
    assert participant.rows() == {}


async def test_a_refused_row_fails_its_generation(tmp_path: Path) -> None:
    """When the trainer refuses a row the call fails with that code and nothing is recorded."""
    recorder = Recorder(fail=ParticipantError("stale_attempt", "not the ledger's attempt"))
    participant = ModelParticipant(
        server_name="policy", store=TokenCaptureStore(tmp_path), stager=recorder
    )
    app = model_app(participant, {"r1": entry("r1", "a", [USER], "hi")})
    async with serve(app) as url, httpx.AsyncClient() as client:
        reply = await client.post(f"{url}{path('r1')}", json={})
    assert (reply.status_code, reply.json()["error"]["code"]) == (409, "stale_attempt")
    assert participant.rows() == {}
    assert TokenCaptureStore(tmp_path).read_entries("r1") == []


async def test_release_hands_over_the_staging_keys(tmp_path: Path) -> None:
    """The agent's release returns the episode's keys and the model stops holding it."""
    participant = ModelParticipant(server_name="policy", store=TokenCaptureStore(tmp_path))
    app = model_app(participant, {"r1": entry("r1", "a", [USER], "hi")})
    async with serve(app) as url, httpx.AsyncClient() as client:
        await client.post(f"{url}{path('r1')}", json={})
        released = await client.post(f"{url}{RELEASE_PATH}", json={"capture_key": "r1"})
        bad = await client.post(f"{url}{RELEASE_PATH}", json={"key": 1})
    assert released.json() == {"capture_key": "r1", "staging_keys": ["r1/a"]}
    assert participant.live_episodes() == frozenset()
    assert bad.json()["error"]["code"] == "invalid_request"


async def test_restore_keeps_lineage_under_the_next_attempts_key(tmp_path: Path) -> None:
    """Rows install under r1-a1 with their staging keys; the next call resolves its parent."""
    source = ModelParticipant(server_name="policy", store=TokenCaptureStore(tmp_path / "a"))
    first = entry("r1", "call-a", [USER], "hi")
    await source.put(first)
    (exported,) = list(source.export(frozenset({EnvironmentEpisode("r1", 0)})))
    target = ModelParticipant(server_name="policy", store=TokenCaptureStore(tmp_path / "b"))
    rows = target.validate(EnvironmentEpisode("r1", 0), exported[1])
    target.install([(EnvironmentEpisode("r1", 1), rows)])
    assert [r.staging_key for r in target.rows()["r1-a1"]] == ["r1/call-a"]
    stored = TokenCaptureStore(tmp_path / "b").read_entries("r1-a1")
    assert [(e.rollout_id, e.model_call_id, e.digest) for e in stored] == [
        ("r1-a1", "call-a", first.digest)
    ]
    continuation = [USER, assistant("hi"), {"role": "user", "content": "more", "type": "message"}]
    resolution = await FileLineageStore(tmp_path / "b").resolve("r1-a1", continuation)
    assert resolution.status == ParentResolutionStatus.RESOLVED
    assert resolution.match is not None and resolution.match.model_call_id == "call-a"


def _exported(tmp_path: Path) -> dict[str, Any]:
    source = ModelParticipant(server_name="policy", store=TokenCaptureStore(tmp_path))
    import asyncio

    asyncio.run(source.put(entry("r1-a1", "b", [USER], "hi")))
    source._rows[EnvironmentEpisode("r1", 1)].insert(
        0,
        parse_rows(
            EnvironmentEpisode("r1", 1),
            {
                "rows": [
                    {
                        "staging_key": "r1/a",
                        "entry": entry("r1-a1", "a", [USER], "x").model_dump(mode="json"),
                    }
                ]
            },
        )[0],
    )
    (exported,) = list(source.export(frozenset({EnvironmentEpisode("r1", 1)})))
    return exported[1]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s["rows"][0].update(staging_key="r2/a"),
        lambda s: s["rows"][0].update(staging_key="r1-a2/a"),
        lambda s: s["rows"][1].update(staging_key=s["rows"][0]["staging_key"]),
        lambda s: s["rows"][0]["entry"].update(model_call_id="other"),
        lambda s: s["rows"][0]["entry"].update(rollout_id="r1"),
        lambda s: s["rows"][0]["entry"].update(generation_log_probs=[]),
        lambda s: s.update(extra=1),
    ],
)
def test_tampered_rows_are_refused(tmp_path: Path, tamper: Any) -> None:
    """Rows of another rollout, a later attempt, a repeated key or a broken entry are refused."""
    state = _exported(tmp_path)
    assert len(parse_rows(EnvironmentEpisode("r1", 1), state)) == 2  # carried over + own
    broken = copy.deepcopy(state)
    tamper(broken)
    with pytest.raises(ValueError):
        parse_rows(EnvironmentEpisode("r1", 1), broken)
