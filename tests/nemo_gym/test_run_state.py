"""Tests of the saved state of one agent /run."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from envckpt.nemo_gym.run_state import RunState, task_of


def state() -> dict[str, Any]:
    run = RunState(
        flavor="simple_agent", body={"_ng_rollout_id": "r1", "_ng_attempt_index": 0, "x": 1}
    )
    run.loop = {"step": 2}
    run.model_cookies = {"m": "v"}
    run.applications = ["p/1"]
    return run.to_json()


def test_round_trip_and_copies_share_nothing() -> None:
    """to_json/from_json round-trip; a copy's changes do not reach the original."""
    run = RunState.from_json(state())
    assert run.to_json() == state()
    clone = run.copy()
    clone.loop["step"] = 9
    clone.applications.append("p/2")
    assert run.loop["step"] == 2 and run.applications == ["p/1"]


def test_task_ignores_the_attempt() -> None:
    """Every attempt of a rollout carries the same task."""
    body = state()["body"]
    assert task_of(body) == task_of({**body, "_ng_attempt_index": 3})


@pytest.mark.parametrize(
    "tamper",
    [
        lambda s: s.pop("phase"),
        lambda s: s.update(phase="done"),
        lambda s: s["body"].pop("_ng_rollout_id"),
        lambda s: s.update(loop=[]),
        lambda s: s.update(applications=[1]),
        lambda s: s.update(model_cookies={"m": 1}),
        lambda s: s.update(continued=["x"]),
        lambda s: s.update(flavor=3),
    ],
)
def test_malformed_states_are_refused(tamper: Any) -> None:
    """Anything but a well-formed run state is a ValueError."""
    broken = copy.deepcopy(state())
    tamper(broken)
    with pytest.raises(ValueError):
        RunState.from_json(broken)
