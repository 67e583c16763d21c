"""Tests for envckpt.sim.kinds.common: request parsing and checks the simulated kinds share."""

from __future__ import annotations

from typing import Any

import pytest

from envckpt.episodes import EnvironmentEpisode
from envckpt.errors import ParticipantError
from envckpt.sim.kinds.common import (
    MAX_TURNS,
    STAGING_KEY,
    check_fields,
    checked_turn,
    episode_of,
    parse_task,
    require_int,
    require_keys,
    staging_key,
    text_of,
    turn_of,
)

E1 = EnvironmentEpisode("r1", 0)
FIELDS = ("episode", "turn", "observation")


def request(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"episode": E1.to_wire(), "turn": 3, "observation": "dark room"}
    body.update(changes)
    return {key: value for key, value in body.items() if value is not ...}


def test_a_well_formed_request_is_parsed() -> None:
    """Exactly the required fields: the episode, turn and text come back typed."""
    body = check_fields(request(), required=FIELDS)
    assert (episode_of(body), turn_of(body), text_of(body, "observation")) == (E1, 3, "dark room")


@pytest.mark.parametrize("body", [None, [], "text", 3], ids=repr)
def test_a_body_that_is_not_an_object_is_invalid(body: object) -> None:
    """Anything but a JSON object is invalid_request."""
    with pytest.raises(ParticipantError) as info:
        check_fields(body, required=FIELDS)
    assert info.value.code == "invalid_request"


@pytest.mark.parametrize("episode", [None, ...], ids=["null", "absent"])
def test_episode_work_without_an_episode_needs_a_rollout_id(episode: object) -> None:
    """A missing or null episode is rollout_id_required (HTTP 400), not a generic error."""
    with pytest.raises(ParticipantError) as info:
        check_fields(request(episode=episode), required=FIELDS)
    assert info.value.code == "rollout_id_required" and info.value.status == 400


def test_unknown_and_missing_fields_are_named() -> None:
    """An extra field and a missing one are both listed in the refusal."""
    with pytest.raises(ParticipantError) as info:
        check_fields(request(observation=..., mood="calm"), required=FIELDS)
    assert info.value.code == "invalid_request"
    assert "['mood']" in info.value.detail and "['observation']" in info.value.detail


def test_without_an_episode_field_a_null_episode_is_just_unknown() -> None:
    """Only requests that require an episode get rollout_id_required."""
    with pytest.raises(ParticipantError) as info:
        check_fields({"episode": None}, required=("turn",))
    assert info.value.code == "invalid_request"


@pytest.mark.parametrize(
    "episode",
    [{"rollout_id": "r1"}, {"rollout_id": "r1", "attempt": -1}, {"rollout_id": "", "attempt": 0}],
    ids=repr,
)
def test_a_malformed_episode_is_invalid(episode: object) -> None:
    """An episode that does not parse is invalid_request naming the episode."""
    with pytest.raises(ParticipantError) as info:
        episode_of(request(episode=episode))
    assert info.value.code == "invalid_request" and info.value.detail.startswith("episode:")


@pytest.mark.parametrize("turn", [-1, MAX_TURNS, True, 1.0, "2", None], ids=repr)
def test_a_turn_outside_the_range_is_invalid(turn: object) -> None:
    """Turns are ints in [0, MAX_TURNS): bools, floats and strings are refused."""
    with pytest.raises(ParticipantError) as info:
        turn_of(request(turn=turn))
    assert info.value.code == "invalid_request"
    with pytest.raises(ValueError):
        checked_turn(turn)


def test_the_turn_range_ends_are_accepted() -> None:
    """0 and MAX_TURNS - 1 are turns."""
    assert checked_turn(0) == 0 and checked_turn(MAX_TURNS - 1) == MAX_TURNS - 1


def test_a_text_field_must_be_a_string() -> None:
    """A non-string observation is invalid_request naming the field."""
    with pytest.raises(ParticipantError, match="observation must be a string"):
        text_of(request(observation=["dark"]), "observation")


def test_parse_task_returns_an_independent_copy_with_its_metadata() -> None:
    """Extra keys ride along; changing the copy leaves the caller's task alone."""
    task = {"prompt": "p", "turns": MAX_TURNS, "meta": {"tags": ["a"]}}
    copied = parse_task(task)
    assert copied == task
    copied["meta"]["tags"].append("b")
    assert task["meta"] == {"tags": ["a"]}


@pytest.mark.parametrize(
    "task",
    [
        None,
        ["prompt", "turns"],
        {"turns": 3},
        {"prompt": 7, "turns": 3},
        {"prompt": "p"},
        {"prompt": "p", "turns": 0},
        {"prompt": "p", "turns": MAX_TURNS + 1},
        {"prompt": "p", "turns": True},
        {"prompt": "p", "turns": 3.0},
        {"prompt": "p", "turns": 3, "weight": float("nan")},
        {"prompt": "p", "turns": 3, "tags": {"a"}},  # a set; one item: one id in every worker
    ],
    ids=repr,
)
def test_a_task_without_a_prompt_and_budget_or_not_plain_json_is_refused(task: object) -> None:
    """parse_task raises ValueError for a bad prompt, turn budget, or non-JSON metadata."""
    with pytest.raises(ValueError):
        parse_task(task)


def test_staging_keys_name_the_attempt_and_the_turn() -> None:
    """A staging key is ``<capture key>/t<turn>`` and parses back with STAGING_KEY."""
    key = staging_key(E1.next_attempt(), 12)
    assert key == "r1-a1/t12"
    match = STAGING_KEY.match(key)
    assert match is not None
    assert EnvironmentEpisode.from_capture_key(match["capture_key"]) == E1.next_attempt()
    assert int(match["turn"]) == 12


@pytest.mark.parametrize("key", ["r1/t01", "r1/t", "r1/x3", "a/b/t1", "/t1", "r1/t-1"])
def test_malformed_staging_keys_do_not_match(key: str) -> None:
    """Leading zeros, missing turns and extra slashes are not staging keys."""
    assert STAGING_KEY.match(key) is None


def test_require_int_refuses_bools_and_values_below_the_minimum() -> None:
    """require_int accepts ints >= minimum only, naming what it checked."""
    assert require_int(0, "count") == 0
    assert require_int(5, "count", minimum=5) == 5
    for value in (True, -1, 1.5, "3"):
        with pytest.raises(ValueError, match="count must be an integer >= 0"):
            require_int(value, "count")
    with pytest.raises(ValueError, match=">= 6"):
        require_int(5, "count", minimum=6)


def test_require_keys_wants_exactly_the_keys() -> None:
    """require_keys refuses extra, missing and non-mapping values, naming what it got."""
    assert require_keys({"a": 1, "b": 2}, ("a", "b"), "state") == {"a": 1, "b": 2}
    with pytest.raises(ValueError, match=r"got \['a'\]"):
        require_keys({"a": 1}, ("a", "b"), "state")
    with pytest.raises(ValueError, match=r"got \['a', 'b', 'c'\]"):
        require_keys({"a": 1, "b": 2, "c": 3}, ("a", "b"), "state")
    with pytest.raises(ValueError, match="got list"):
        require_keys(["a", "b"], ("a", "b"), "state")
