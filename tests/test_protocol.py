"""Tests for envckpt.protocol: request bodies validated at the edge."""

from __future__ import annotations

import math
from typing import Any

import pytest
from pydantic import ValidationError

from envckpt import protocol
from envckpt.episodes import EnvironmentEpisode
from envckpt.protocol import (
    REQUEST_MODELS,
    ROUTES,
    CommitRequest,
    ForgetRequest,
    PrepareRequest,
    RestoreRequest,
    RetireRequest,
    WireEpisode,
)

BASE: dict[str, Any] = {"checkpoint_id": "c1", "deadline_ts": 1_800_000_000.0}


def test_every_post_route_has_a_request_model() -> None:
    """REQUEST_MODELS covers every route but the GET status route."""
    assert set(REQUEST_MODELS) == set(ROUTES) - {"status"}


def test_a_wire_episode_becomes_an_episode() -> None:
    """A valid wire episode converts to the EnvironmentEpisode it names."""
    episode = WireEpisode.model_validate({"rollout_id": "task-7", "attempt": 2})
    assert episode.episode() == EnvironmentEpisode("task-7", 2)


@pytest.mark.parametrize(
    "body",
    [
        {"rollout_id": "task-7"},
        {"attempt": 0},
        {"rollout_id": "task-7", "attempt": 0, "extra": 1},
        {"rollout_id": "task-7", "attempt": -1},
        {"rollout_id": "task-7", "attempt": True},
        {"rollout_id": "task-7", "attempt": "1"},
        {"rollout_id": "task-7", "attempt": 1.0},
        {"rollout_id": "x-a1", "attempt": 0},
        {"rollout_id": "../x", "attempt": 0},
        {"rollout_id": "a/b", "attempt": 0},
        {"rollout_id": "", "attempt": 0},
        {"rollout_id": 7, "attempt": 0},
    ],
)
def test_bad_wire_episodes_are_refused(body: dict[str, Any]) -> None:
    """Missing or extra keys, bad attempts and bad rollout ids fail validation, both as a
    WireEpisode and inside every request that lists episodes."""
    with pytest.raises(ValidationError):
        WireEpisode.model_validate(body)
    for model, extra in ((CommitRequest, {"checkpoint_dir": "/d"}), (RetireRequest, {})):
        good = {"rollout_id": "ok", "attempt": 0}
        with pytest.raises(ValidationError, match="episode 1"):
            model.model_validate({**BASE, **extra, "episode_ids": [good, body]})


def test_request_episodes_arrive_as_episodes_in_order() -> None:
    """episode_ids become EnvironmentEpisode values in the order sent, duplicates kept."""
    wire = [{"rollout_id": "b", "attempt": 2}, {"rollout_id": "a", "attempt": 0}] * 2
    request = CommitRequest.model_validate({**BASE, "checkpoint_dir": "/d", "episode_ids": wire})
    assert request.episode_ids == [EnvironmentEpisode("b", 2), EnvironmentEpisode("a", 0)] * 2
    assert CommitRequest.model_validate({**BASE, "checkpoint_dir": "/d"}).episode_ids is None


def test_the_same_episode_is_one_object() -> None:
    """A valid episode is made once: every request naming it gets the same immutable value."""
    one = RestoreRequest.model_validate(
        {**BASE, "checkpoint_dir": "/d", "episode_ids": [{"rollout_id": "r9", "attempt": 1}]}
    )
    two = RetireRequest.model_validate(
        {**BASE, "episode_ids": [{"rollout_id": "r9", "attempt": 1}]}
    )
    assert one.episode_ids[0] is two.episode_ids[0]


@pytest.mark.parametrize("value", ["r1", {"rollout_id": "r1"}, 7])
def test_episode_ids_must_be_a_list(value: object) -> None:
    """A bare string, object or number where the list goes is refused."""
    with pytest.raises(ValidationError, match="list of episodes"):
        CommitRequest.model_validate({**BASE, "checkpoint_dir": "/d", "episode_ids": value})


def test_episode_counts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retire needs one episode at least; no list may exceed MAX_EPISODES_PER_REQUEST."""
    with pytest.raises(ValidationError, match="expected 1 to"):
        RetireRequest.model_validate({**BASE, "episode_ids": []})
    monkeypatch.setattr(protocol, "MAX_EPISODES_PER_REQUEST", 2)
    three = [{"rollout_id": f"r{i}", "attempt": 0} for i in range(3)]
    with pytest.raises(ValidationError, match="got 3"):
        CommitRequest.model_validate({**BASE, "checkpoint_dir": "/d", "episode_ids": three})


@pytest.mark.parametrize(
    "deadline", [math.nan, math.inf, -math.inf, True, False, "1800000000", None, [1.0]]
)
def test_deadlines_must_be_finite_numbers(deadline: object) -> None:
    """NaN, infinities, booleans, strings and other types are not deadlines."""
    with pytest.raises(ValidationError):
        PrepareRequest.model_validate({**BASE, "deadline_ts": deadline})


def test_integer_deadlines_are_accepted_as_floats() -> None:
    """An integer deadline is an absolute time in seconds like any float."""
    request = PrepareRequest.model_validate({**BASE, "deadline_ts": 1_800_000_000})
    assert request.deadline_ts == 1_800_000_000.0
    assert isinstance(request.deadline_ts, float)


@pytest.mark.parametrize("checkpoint_id", ["", "x" * 129, "../c", "a/b", ".hidden", "-dash", 5])
def test_bad_checkpoint_ids_are_refused(checkpoint_id: object) -> None:
    """Empty, 129-character, path-like or non-string checkpoint ids fail validation."""
    with pytest.raises(ValidationError):
        PrepareRequest.model_validate({**BASE, "checkpoint_id": checkpoint_id})


def test_a_128_character_checkpoint_id_is_accepted() -> None:
    """The longest legal checkpoint id is 128 characters."""
    assert PrepareRequest.model_validate({**BASE, "checkpoint_id": "c" * 128})


@pytest.mark.parametrize("missing", ["checkpoint_id", "deadline_ts"])
def test_common_fields_are_required(missing: str) -> None:
    """Every POST body carries checkpoint_id and deadline_ts."""
    body = {key: value for key, value in BASE.items() if key != missing}
    with pytest.raises(ValidationError):
        PrepareRequest.model_validate(body)


def test_unknown_fields_are_refused() -> None:
    """A field the route does not define fails validation."""
    with pytest.raises(ValidationError):
        PrepareRequest.model_validate({**BASE, "scope": []})


def test_commit_scope_defaults_to_everything_and_stop_to_false() -> None:
    """An absent or null commit scope means everything; stop defaults to false."""
    request = CommitRequest.model_validate({**BASE, "checkpoint_dir": "/ckpt"})
    assert request.episode_ids is None
    assert request.stop is False
    request = CommitRequest.model_validate({**BASE, "checkpoint_dir": "/ckpt", "episode_ids": None})
    assert request.episode_ids is None


@pytest.mark.parametrize("stop", ["yes", 1, "true", None])
def test_commit_stop_must_be_a_boolean(stop: object) -> None:
    """stop is a JSON boolean, not a truthy value."""
    with pytest.raises(ValidationError):
        CommitRequest.model_validate({**BASE, "checkpoint_dir": "/ckpt", "stop": stop})


@pytest.mark.parametrize("checkpoint_dir", ["", None, 3, "x" * 4097])
def test_checkpoint_dir_must_be_a_bounded_string(checkpoint_dir: object) -> None:
    """The checkpoint directory is a non-empty string of bounded length."""
    with pytest.raises(ValidationError):
        CommitRequest.model_validate({**BASE, "checkpoint_dir": checkpoint_dir})


def test_restore_requires_a_scope() -> None:
    """restore needs episode_ids (it may be empty)."""
    with pytest.raises(ValidationError):
        RestoreRequest.model_validate({**BASE, "checkpoint_dir": "/ckpt"})
    request = RestoreRequest.model_validate({**BASE, "checkpoint_dir": "/ckpt", "episode_ids": []})
    assert request.episode_ids == []


def test_retire_and_forget_need_at_least_one_item() -> None:
    """retire and forget refuse an empty list."""
    with pytest.raises(ValidationError):
        RetireRequest.model_validate({**BASE, "episode_ids": []})
    with pytest.raises(ValidationError):
        ForgetRequest.model_validate({**BASE, "rollout_ids": []})


@pytest.mark.parametrize("rollout_id", ["x-a1", "../x", "a/b", "", 5])
def test_forget_validates_rollout_ids(rollout_id: object) -> None:
    """forget refuses rollout ids outside the grammar."""
    with pytest.raises(ValidationError):
        ForgetRequest.model_validate({**BASE, "rollout_ids": ["ok", rollout_id]})


def test_attempts_and_rollout_ids_are_bounded() -> None:
    """Attempts up to 2**31 - 1 and rollout ids up to 200 characters; one more is refused."""
    from pydantic import ValidationError

    from envckpt.protocol import MAX_ATTEMPT, MAX_ROLLOUT_ID_LENGTH, ForgetRequest, WireEpisode

    assert MAX_ATTEMPT == 2**31 - 1 and MAX_ROLLOUT_ID_LENGTH == 200
    WireEpisode(rollout_id="r" * MAX_ROLLOUT_ID_LENGTH, attempt=MAX_ATTEMPT)
    for bad in ({"rollout_id": "r", "attempt": MAX_ATTEMPT + 1},
                {"rollout_id": "r" * (MAX_ROLLOUT_ID_LENGTH + 1), "attempt": 0}):  # fmt: skip
        with pytest.raises(ValidationError):
            WireEpisode.model_validate(bad)
    with pytest.raises(ValidationError):
        ForgetRequest.model_validate(
            {"checkpoint_id": "c", "deadline_ts": 1.0, "rollout_ids": ["r" * 201]}
        )


@pytest.mark.parametrize("model", ["CommitRequest", "RestoreRequest", "RetireRequest"])
def test_episode_lists_keep_the_wire_episodes_bounds(model: str) -> None:
    """The one-pass episode lists refuse what WireEpisode refuses, and accept its limits."""
    from pydantic import ValidationError

    from envckpt import protocol

    request = getattr(protocol, model)
    base = {"checkpoint_id": "c", "deadline_ts": 1.0}
    if model != "RetireRequest":
        base["checkpoint_dir"] = "/ckpt"
    edge = {"rollout_id": "r" * protocol.MAX_ROLLOUT_ID_LENGTH, "attempt": protocol.MAX_ATTEMPT}
    [episode] = request.model_validate({**base, "episode_ids": [edge]}).episode_ids
    assert episode.attempt == protocol.MAX_ATTEMPT
    for bad, reason in (
        ({"rollout_id": "r", "attempt": protocol.MAX_ATTEMPT + 1}, "attempt must be between"),
        ({"rollout_id": "r" * 201, "attempt": 0}, "longer than 200"),
    ):
        with pytest.raises(ValidationError, match=reason):
            request.model_validate({**base, "episode_ids": [edge, bad]})
