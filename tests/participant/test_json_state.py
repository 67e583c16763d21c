"""Tests of naming exported state JSON cannot carry."""

from __future__ import annotations

import pickle

import pytest

from envckpt.participant.json_state import (
    NonFinite,
    UnencodableState,
    find_unencodable,
    parse_non_finite,
    unencodable_error,
)

from helpers.participant_doubles import ep


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ({"a": [1, {"b": 2.5}]}, None),
        ({"a": [1, {"b": float("nan")}]}, ("a[1].b", "NaN")),
        ({"a": float("inf")}, ("a", "Infinity")),
        ({"a": {"b": -float("inf")}}, ("a.b", "-Infinity")),
        ({"a": {1: "x"}}, ("a[1]", "a int key")),
        ({"a": {"when": object()}}, ("a.when", "a object, which JSON has no form for")),
        (float("nan"), ("", "NaN")),
    ],
)
def test_the_first_unencodable_key_is_named(value: object, found: tuple[str, str] | None) -> None:
    """Key paths read like the state: dots for objects, brackets for lists."""
    assert find_unencodable(value, allow_nan=False) == found


def test_with_nan_allowed_only_non_json_types_are_named() -> None:
    """Gym's setting: NaN passes; a key that is not a string still does not."""
    assert find_unencodable({"a": float("nan")}, allow_nan=True) is None
    assert find_unencodable({"a": {2: 1}}, allow_nan=True) == ("a[2]", "a int key")


def test_the_error_names_server_episode_session_and_key_and_pickles() -> None:
    """The first pair that cannot be written, with its session id when it has one."""
    pairs = [
        (ep("ok"), {"session_id": "s0", "state": {"n": 1}}),
        (ep("r", 1), {"session_id": "s1", "state": {"t": [float("nan")]}}),
    ]
    error = unencodable_error(server="tools", pairs=pairs, allow_nan=False)
    assert isinstance(error, UnencodableState) and isinstance(error, ValueError)
    assert (error.server, error.episode, error.session, error.key) == (
        "tools",
        "r-a1",
        "s1",
        "state.t[0]",
    )
    assert "server tools" in str(error) and "session s1" in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.key, copy.reason, str(copy)) == (error.key, error.reason, str(error))
    assert unencodable_error(server="tools", pairs=pairs[:1], allow_nan=False) is None


def test_the_setting_parses_its_two_values() -> None:
    """refuse (also when absent) or gym; anything else names the choices."""
    assert parse_non_finite(None) is NonFinite.REFUSE
    assert parse_non_finite("gym") is NonFinite.GYM
    with pytest.raises(ValueError, match="'refuse' or 'gym'"):
        parse_non_finite("write")
