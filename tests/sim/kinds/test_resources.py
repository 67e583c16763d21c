"""Tests for envckpt.sim.kinds.resources: tool effects in each mode."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.sim.kinds.resources import (
    ToolServer,
    effect_key,
    effect_value,
    tool_observation,
)

Ep = EnvironmentEpisode


def deadline() -> float:
    return time.time() + 10


def call(episode: Ep, turn: int, action: str = "act-abcdef") -> dict[str, Any]:
    return {"episode": episode.to_wire(), "turn": turn, "action": action}


async def test_call_applies_an_effect_and_audits_it(tmp_path: Path) -> None:
    """An effect updates the session, answers a pure observation and lands in both audit logs."""
    audit = tmp_path / "audit.jsonl"
    tool = ToolServer(seed=5, audit_path=audit)
    reply = await tool.call(call(Ep("r", 0), 0, "act-123456"))
    value = effect_value(5, "act-123456")
    assert reply == {
        "observation": tool_observation(0, "act-123456", value),
        "value": value,
        "applied": True,
        "effect": "r/t0",
        "application": f"{tool.process_id}/0",
    }
    entry = {
        "rollout_id": "r",
        "attempt": 0,
        "turn": 0,
        "effect": "r/t0",
        "value": value,
        "application": f"{tool.process_id}/0",
    }
    assert tool.audit == [entry]
    assert [json.loads(line) for line in audit.read_text().splitlines()] == [entry]
    assert tool.sessions() == {
        "r": {"counter": value, "effects": [{"key": "r/t0", "turn": 0, "value": value}]}
    }


async def test_a_repeated_effect_is_not_applied_twice() -> None:
    """The same (rollout, turn) answers the same observation but changes nothing."""
    tool = ToolServer()
    first = await tool.call(call(Ep("r", 0), 0))
    again = await tool.call(call(Ep("r", 0), 0))
    assert again["observation"] == first["observation"] and again["applied"] is False
    assert len(tool.audit) == 1
    assert tool.sessions()["r"]["counter"] == first["value"]


@pytest.mark.parametrize(
    ("request_body", "code"),
    [
        ({"turn": 0, "action": "a"}, "rollout_id_required"),
        (
            {"episode": {"rollout_id": "r", "attempt": -1}, "turn": 0, "action": "a"},
            "invalid_request",
        ),
        (
            {"episode": {"rollout_id": "r", "attempt": 0}, "turn": "0", "action": "a"},
            "invalid_request",
        ),
        (
            {"episode": {"rollout_id": "r", "attempt": 0}, "turn": 0, "action": None},
            "invalid_request",
        ),
        ({"episode": {"rollout_id": "r", "attempt": 0}, "turn": 0}, "invalid_request"),
    ],
)
async def test_call_refuses_malformed_requests(request_body: dict[str, Any], code: str) -> None:
    """Malformed calls are refused before any effect is applied."""
    tool = ToolServer()
    with pytest.raises(ParticipantError) as caught:
        await tool.call(request_body)
    assert caught.value.code == code
    assert tool.audit == []


async def test_restore_installs_tool_state_as_the_next_attempt(tmp_path: Path) -> None:
    """After a restore, saved effects are not re-applied and only new ones are."""
    tool = ToolServer()
    for turn in range(3):
        await tool.call(call(Ep("r", 0), turn))
    await tool.core.prepare("c1", deadline_ts=deadline())
    reply = await tool.core.commit(
        "c1", deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=None
    )
    assert reply["episode_ids"] == ["r"]
    fresh = ToolServer()
    restored = await fresh.core.restore(
        "c2", deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=[Ep("r", 0)]
    )
    assert restored["restored"] == ["r-a1"]
    assert fresh.sessions()["r-a1"] == tool.sessions()["r"]
    await fresh.core.resume("c2", deadline_ts=deadline())
    assert (await fresh.call(call(Ep("r", 1), 2)))["applied"] is False
    assert (await fresh.call(call(Ep("r", 1), 3)))["applied"] is True
    assert [entry["turn"] for entry in fresh.audit] == [3]
    with pytest.raises(ParticipantError) as caught:
        await fresh.call(call(Ep("r", 0), 4))
    assert caught.value.code == "stale_attempt"


async def test_restart_only_reports_its_sessions_as_restarts_and_saves_nothing(
    tmp_path: Path,
) -> None:
    """A restart_only tool never blocks prepare, names its sessions as restarts, exports none."""
    tool = ToolServer(mode="restart_only")
    await tool.call(call(Ep("r", 0), 0))
    reply = await tool.core.prepare("c1", deadline_ts=deadline())
    assert reply["report"]["ready"] and reply["report"]["restarts"] == ["r"]
    assert list(tool.export(frozenset({Ep("r", 0)}))) == []
    committed = await tool.core.commit(
        "c1", deadline_ts=deadline(), checkpoint_dir=str(tmp_path), episode_ids=[]
    )
    assert committed["episode_ids"] == []
    with pytest.raises(ValueError):
        tool.validate(Ep("r", 0), {"counter": 0, "effects": []})


async def test_stateless_holds_nothing() -> None:
    """A stateless tool keeps no session, so it reports nothing live and cannot deduplicate."""
    tool = ToolServer(mode="stateless")
    await tool.call(call(Ep("r", 0), 0))
    assert (await tool.call(call(Ep("r", 0), 0)))["applied"] is True
    assert tool.live_episodes() == frozenset() and tool.sessions() == {}
    reply = await tool.core.prepare("c1", deadline_ts=deadline())
    assert reply["report"]["restarts"] == [] and reply["report"]["counts"]["live"] == 0


def test_an_unknown_mode_is_refused() -> None:
    """Only the protocol's three modes exist."""
    with pytest.raises(ValueError):
        ToolServer(mode="sometimes")


@pytest.mark.parametrize(
    "state",
    [
        {"counter": 0},
        {"counter": 0, "effects": [], "more": 1},
        {"counter": -1, "effects": []},
        {"counter": True, "effects": []},
        {"counter": 0, "effects": {}},
        {"counter": 3, "effects": [{"key": "r/t0", "turn": 0, "value": 2}]},
        {"counter": 2, "effects": [{"key": "r/t1", "turn": 0, "value": 2}]},
        {"counter": 2, "effects": [{"key": "x/t0", "turn": 0, "value": 2}]},
        {"counter": 2, "effects": [{"key": "r/t0", "turn": False, "value": 2}]},
        {"counter": 2, "effects": [{"key": "r/t0", "turn": 0, "value": 2, "x": 0}]},
        {"counter": 4, "effects": [{"key": "r/t0", "turn": 0, "value": 2}] * 2},
    ],
)
def test_validate_rejects_corrupt_state(state: dict[str, Any]) -> None:
    """Wrong shapes, inconsistent counters, foreign or repeated effects raise ValueError."""
    with pytest.raises(ValueError):
        ToolServer().validate(Ep("r", 1), state)


def test_validate_returns_the_session_it_describes() -> None:
    """A consistent state parses into the same counter and effects."""
    state = {"counter": 5, "effects": [{"key": effect_key("r", 0), "turn": 0, "value": 5}]}
    assert ToolServer().validate(Ep("r", 0), state).to_state() == state


async def test_retire_and_finish_free_sessions() -> None:
    """Retire drops that attempt's session and earlier ones; finish drops and reports one."""
    tool = ToolServer()
    await tool.call(call(Ep("r", 0), 0))
    await tool.call(call(Ep("s", 0), 0))
    await tool.core.retire("x1", deadline_ts=deadline(), episode_ids=[Ep("r", 0)])
    assert set(tool.sessions()) == {"s"}
    reply = await tool.finish({"episode": Ep("s", 0).to_wire()})
    assert reply["released"] == "s" and isinstance(reply["counter"], int)
    assert tool.sessions() == {}
    with pytest.raises(ParticipantError) as caught:
        await tool.finish({"episode": Ep("r", 0).to_wire()})
    assert caught.value.code == "stale_attempt"
