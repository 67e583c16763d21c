"""Tests for envckpt.sim.kinds.model: the scripted policy and its staging ledger."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.sim.kinds.model import PolicyModelServer, policy_action

Ep = EnvironmentEpisode


def deadline() -> float:
    return time.time() + 10


def gen(episode: Ep, turn: int, observation: str = "obs") -> dict[str, Any]:
    return {"episode": episode.to_wire(), "turn": turn, "observation": observation}


async def test_generate_is_a_pure_function_of_rollout_turn_and_observation() -> None:
    """Two servers with one seed answer alike, whatever the attempt; the seed matters."""
    first, second = PolicyModelServer(seed=3), PolicyModelServer(seed=3)
    a = await first.generate(gen(Ep("r", 0), 2, "hello"))
    b = await second.generate(gen(Ep("r", 1), 2, "hello"))
    assert a["text"] == b["text"] == policy_action(3, "r", 2, "hello")
    assert policy_action(4, "r", 2, "hello") != a["text"]
    assert policy_action(3, "r", 2, "hullo") != a["text"]


async def test_generate_records_one_staging_row_per_attempt_and_turn() -> None:
    """A turn re-run by the same attempt keeps one row; a later attempt gets a distinct key."""
    model = PolicyModelServer()
    assert (await model.generate(gen(Ep("r", 0), 0)))["staging_key"] == "r/t0"
    await model.generate(gen(Ep("r", 0), 0))
    await model.generate(gen(Ep("r", 0), 1))
    assert model.staging_ledger() == {"r": ("r/t0", "r/t1")}
    assert (await model.generate(gen(Ep("r", 1), 1)))["staging_key"] == "r-a1/t1"


@pytest.mark.parametrize(
    ("request_body", "code"),
    [
        ({"turn": 0, "observation": "o"}, "rollout_id_required"),
        ({"episode": None, "turn": 0, "observation": "o"}, "rollout_id_required"),
        ({"episode": {"rollout_id": "r"}, "turn": 0, "observation": "o"}, "invalid_request"),
        (
            {"episode": {"rollout_id": "r", "attempt": 0}, "turn": -1, "observation": "o"},
            "invalid_request",
        ),
        (
            {"episode": {"rollout_id": "r", "attempt": 0}, "turn": True, "observation": "o"},
            "invalid_request",
        ),
        (
            {"episode": {"rollout_id": "r", "attempt": 0}, "turn": 0, "observation": 5},
            "invalid_request",
        ),
        (
            {"episode": {"rollout_id": "r", "attempt": 0}, "turn": 0, "observation": "o", "x": 1},
            "invalid_request",
        ),
        ([], "invalid_request"),
    ],
)
async def test_generate_refuses_malformed_requests(request_body: Any, code: str) -> None:
    """Missing identity is rollout_id_required; anything else malformed is invalid_request."""
    model = PolicyModelServer()
    with pytest.raises(ParticipantError) as caught:
        await model.generate(request_body)
    assert caught.value.code == code
    assert model.staging_ledger() == {}


async def test_close_admission_is_counted_and_refuses_new_generations() -> None:
    """Prepare closes admission (counted); a generation then is refused until resume."""
    model = PolicyModelServer()
    reply = await model.core.prepare("c1", deadline_ts=deadline())
    assert reply["phase"] == "prepared"
    assert (model.admission_closes, model.in_flight_at_close) == (1, 0)
    with pytest.raises(ParticipantError) as caught:
        await model.generate(gen(Ep("r", 0), 0))
    assert caught.value.code == "admission_closed"
    await model.core.resume("c1", deadline_ts=deadline())
    await model.generate(gen(Ep("r", 0), 0))


async def test_prepare_waits_for_a_generation_in_flight() -> None:
    """A generation running when admission closes finishes and records its row first."""
    model = PolicyModelServer(latency=0.05)
    running = asyncio.create_task(model.generate(gen(Ep("r", 0), 0)))
    await asyncio.sleep(0.01)
    reply = await model.core.prepare("c1", deadline_ts=deadline())
    assert reply["report"]["ready"] and model.in_flight_at_close == 1
    assert (await running)["staging_key"] == "r/t0"
    assert model.staging_ledger() == {"r": ("r/t0",)}


async def test_commit_replies_with_staging_keys_attributed_per_episode(tmp_path: Path) -> None:
    """Commit exports the scope and attributes exactly its staging keys to episodes."""
    model = PolicyModelServer()
    for rollout in ("a", "b", "c"):
        for turn in range(2):
            await model.generate(gen(Ep(rollout, 0), turn))
    await model.core.prepare("c1", deadline_ts=deadline())
    reply = await model.core.commit(
        "c1",
        deadline_ts=deadline(),
        checkpoint_dir=str(tmp_path),
        episode_ids=[Ep("a", 0), Ep("b", 0), Ep("zz", 0)],
    )
    assert reply["episode_ids"] == ["a", "b"]
    assert reply["staging_keys"] == ["a/t0", "a/t1", "b/t0", "b/t1"]
    assert reply["staging_keys_by_episode"] == {"a": ["a/t0", "a/t1"], "b": ["b/t0", "b/t1"]}
    attributed = {k for keys in reply["staging_keys_by_episode"].values() for k in keys}
    assert attributed == set(reply["staging_keys"])


async def test_restore_installs_rows_as_the_next_attempt(tmp_path: Path) -> None:
    """Restored rows belong to attempt N+1, whose new rows join them under distinct keys."""
    model = PolicyModelServer()
    await model.generate(gen(Ep("r", 0), 0))
    await model.generate(gen(Ep("r", 0), 1))
    await model.core.prepare("c1", deadline_ts=deadline())
    await model.core.commit(
        "c1", deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=[Ep("r", 0)]
    )
    fresh = PolicyModelServer()
    reply = await fresh.core.restore(
        "c2", deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=[Ep("r", 0)]
    )
    assert reply["restored"] == ["r-a1"] and reply["source_checkpoint_id"] == "c1"
    assert fresh.staging_ledger() == {"r-a1": ("r/t0", "r/t1")}
    await fresh.core.resume("c2", deadline_ts=deadline())
    await fresh.generate(gen(Ep("r", 1), 2))
    assert fresh.commit_extras((Ep("r", 1),))["staging_keys_by_episode"] == {
        "r-a1": ["r-a1/t2", "r/t0", "r/t1"]
    }
    with pytest.raises(ParticipantError) as caught:
        await fresh.generate(gen(Ep("r", 0), 2))
    assert caught.value.code == "stale_attempt"


@pytest.mark.parametrize(
    "state",
    [
        {},
        {"staging_keys": "r/t0"},
        {"staging_keys": ["r/t0"], "extra": 1},
        {"staging_keys": [7]},
        {"staging_keys": ["r/tx"]},
        {"staging_keys": ["r/t01"]},
        {"staging_keys": ["r"]},
        {"staging_keys": ["other/t0"]},
        {"staging_keys": ["r-a2/t0"]},
        {"staging_keys": ["r/t0", "r/t0"]},
    ],
)
def test_validate_rejects_corrupt_or_foreign_state(state: dict[str, Any]) -> None:
    """Malformed, duplicated, foreign or future-attempt rows are refused with ValueError."""
    with pytest.raises(ValueError):
        PolicyModelServer().validate(Ep("r", 1), state)


def test_validate_accepts_rows_of_this_and_earlier_attempts() -> None:
    """Rows carried over from an earlier attempt are legal in a later one's state."""
    state = PolicyModelServer().validate(Ep("r", 1), {"staging_keys": ["r/t0", "r-a1/t1"]})
    assert state == ["r/t0", "r-a1/t1"]


async def test_retire_frees_rows_of_that_attempt_and_earlier_ones() -> None:
    """Retire drops the ledger of the attempt and earlier ones, and fences them."""
    model = PolicyModelServer()
    await model.generate(gen(Ep("r", 0), 0))
    await model.generate(gen(Ep("s", 0), 0))
    await model.core.retire("x1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    assert model.staging_ledger() == {"s": ("s/t0",)}
    with pytest.raises(ParticipantError) as caught:
        await model.generate(gen(Ep("r", 0), 1))
    assert caught.value.code == "stale_attempt"


async def test_a_generation_retired_while_decoding_records_nothing() -> None:
    """A generation whose attempt is retired mid-decode is refused and leaves no row."""
    model = PolicyModelServer(latency=0.05)
    running = asyncio.create_task(model.generate(gen(Ep("r", 0), 0)))
    await asyncio.sleep(0.01)
    await model.core.retire("x1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    with pytest.raises(ParticipantError) as caught:
        await running
    assert caught.value.code == "stale_attempt"
    assert model.staging_ledger() == {}


async def test_finish_hands_back_the_rows_and_forgets_the_episode() -> None:
    """Finish returns the episode's rows, drops them, and refuses a stale attempt."""
    model = PolicyModelServer()
    await model.generate(gen(Ep("r", 0), 0))
    reply = await model.finish({"episode": Ep("r", 0).to_wire()})
    assert reply == {"released": "r", "staging_keys": ["r/t0"]}
    assert model.live_episodes() == frozenset()
    await model.generate(gen(Ep("r", 1), 0))
    with pytest.raises(ParticipantError) as caught:
        await model.finish({"episode": Ep("r", 0).to_wire()})
    assert caught.value.code == "stale_attempt"
