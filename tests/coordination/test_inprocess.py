"""Tests for envckpt.coordination.inprocess: bodies and replies carried as JSON would carry them."""

from __future__ import annotations

import enum
import json
import math
from typing import Any

import pytest

from envckpt.coordination.inprocess import through_json


class Shade(enum.StrEnum):
    DARK = "dark"


def _typed(value: Any) -> Any:
    # The value with the type of every leaf, so 1 and 1.0 and True are told apart.
    if isinstance(value, dict):
        return {key: _typed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed(item) for item in value]
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, value)


@pytest.mark.parametrize(
    "value",
    [
        {"phase": "idle", "checkpoint_id": None, "lease": 1.5, "ok": True, "n": 1},
        {"kind": Shade.DARK, "values": (1, 2.0, "3")},
        {"lease": float("nan"), "other": [float("inf")]},
        {"big": 2**70, 1: "int key"},
        {"nested": {"list": [{"a": None}, [1, 2]]}, "text": "é ☃"},
    ],
)
def test_the_trip_is_the_standard_librarys(value: dict[Any, Any]) -> None:
    """Same values and same types as json.loads(json.dumps(value)), NaN and tuples included."""
    assert _typed(through_json(value)) == _typed(json.loads(json.dumps(value)))


def test_what_json_cannot_carry_is_refused_as_before() -> None:
    """A value neither encoder can write raises the standard library's TypeError."""
    with pytest.raises(TypeError):
        through_json({"x": object()})
