"""Tests of the session adapters of nemo-gym's stateful example resources servers."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest

pytest.importorskip("resources_servers.blackjack.app")

from resources_servers.blackjack.app import BlackjackEnv
from resources_servers.example_multi_turn_gymnasium.app import ExampleMultiTurnEnv
from resources_servers.example_session_state_mgmt.app import StatefulCounterResourcesServer

from envckpt.nemo_gym.adapters import BlackjackSessions, CounterSessions, MultiTurnSessions
from envckpt.nemo_gym.sessions import session_checkpoint_for

from helpers.nemo_gym_responses import EMPTY_RESPONSE
from helpers.nemo_gym_servers import build


def test_adapters_are_found_by_class() -> None:
    """Each example server gets its adapter; the state kinds declare export_restore."""
    for cls, adapter in (
        (StatefulCounterResourcesServer, CounterSessions),
        (ExampleMultiTurnEnv, MultiTurnSessions),
        (BlackjackEnv, BlackjackSessions),
    ):
        sessions = session_checkpoint_for(build(cls, "s"))
        assert isinstance(sessions, adapter)
        assert sessions.checkpoint_mode == "export_restore"


def test_counter_round_trip() -> None:
    """A counter exported from one server is restored in another, and dropped."""
    source, target = (
        build(StatefulCounterResourcesServer, "c"),
        build(StatefulCounterResourcesServer, "c"),
    )
    source.session_id_to_counter["sid"] = 7
    exported = CounterSessions(source).export_session("sid")
    assert exported == {"counter": 7}
    assert CounterSessions(source).export_session("other") is None
    sessions = CounterSessions(target)
    sessions.validate_session(json.loads(json.dumps(exported)))
    sessions.restore_session("sid", exported)
    assert target.session_id_to_counter == {"sid": 7}
    sessions.drop_session("sid")
    assert target.session_id_to_counter == {}


@pytest.mark.parametrize(
    "state", [{}, {"counter": "7"}, {"counter": True}, {"counter": 1, "x": 2}, {"turns": 1}]
)
def test_counter_refuses_tampered_state(state: dict[str, Any]) -> None:
    """A state that is not exactly an integer counter is refused before anything is installed."""
    with pytest.raises(ValueError):
        CounterSessions(build(StatefulCounterResourcesServer, "c")).validate_session(state)


async def test_multi_turn_round_trip() -> None:
    """The follow-up count survives, so the restored session sends the next follow-up."""
    source, target = build(ExampleMultiTurnEnv, "m"), build(ExampleMultiTurnEnv, "m")
    await source.reset({}, "sid")
    source.session_turns["sid"] = 1
    state = MultiTurnSessions(source).export_session("sid")
    assert state == {"turns": 1}
    MultiTurnSessions(target).validate_session(state)
    MultiTurnSessions(target).restore_session("sid", state)
    metadata = {"follow_ups": ["first", "second"], "expected_answer": "x"}
    from nemo_gym.openai_utils import NeMoGymResponse

    action = NeMoGymResponse.model_validate(EMPTY_RESPONSE)
    assert (await target.step(action, metadata, "sid"))[0] == "second"
    with pytest.raises(ValueError):
        MultiTurnSessions(target).validate_session({"turns": -1})


async def test_blackjack_continues_with_the_same_cards() -> None:
    """Hands and the generator state move together: the restored hand deals the same next cards."""
    source = build(BlackjackEnv, "b")
    await source.reset({}, "sid")
    state = BlackjackSessions(source).export_session("sid")
    assert state is not None
    restored = build(BlackjackEnv, "b")
    sessions = BlackjackSessions(restored)
    sessions.validate_session(json.loads(json.dumps(state)))
    sessions.restore_session("sid", json.loads(json.dumps(state)))
    original_rng = source.session_state["sid"]["rng"]
    restored_rng = restored.session_state["sid"]["rng"]
    assert [original_rng.random() for _ in range(5)] == [restored_rng.random() for _ in range(5)]
    assert restored.session_state["sid"]["player"] == source.session_state["sid"]["player"]


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s.update(player=["Z"]),
        lambda s: s["rng"].update(words=s["rng"]["words"][:-1]),
        lambda s: s["rng"].update(words=[-1] * 625),
        lambda s: s["rng"].update(gauss_next="x"),
        lambda s: s.pop("dealer"),
    ],
)
async def test_blackjack_refuses_tampered_state(tamper: Any) -> None:
    """Unknown cards or a broken generator state are refused."""
    source = build(BlackjackEnv, "b")
    await source.reset({}, "sid")
    state = copy.deepcopy(BlackjackSessions(source).export_session("sid"))
    tamper(state)
    with pytest.raises(ValueError):
        BlackjackSessions(build(BlackjackEnv, "b")).validate_session(state)


def test_generator_state_round_trips_through_json() -> None:
    """The generator's getstate() survives JSON exactly."""
    from envckpt.nemo_gym.adapters import rng_from_state, rng_state

    rng = random.Random(11)
    rng.random()
    clone = rng_from_state(json.loads(json.dumps(rng_state(rng))))
    assert [rng.random() for _ in range(3)] == [clone.random() for _ in range(3)]
