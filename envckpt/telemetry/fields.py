"""Checks of one JSON field of a telemetry record, shared by every record's ``from_json``.

Each returns the value in its Python type, or raises TypeError or ValueError
naming the field; the log reader turns those into one clear error per line.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, cast


def seconds(value: object, name: str) -> float:
    """A finite, non-negative number of seconds (bool refused)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be finite and not negative, got {value!r}")
    return float(value)


def timestamp(value: object, name: str) -> float:
    """Unix seconds: finite and not negative."""
    return seconds(value, name)


def optional_seconds(value: object, name: str) -> float | None:
    return None if value is None else seconds(value, name)


def count(value: object, name: str) -> int:
    """A non-negative int (bool refused)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return value


def optional_count(value: object, name: str) -> int | None:
    return None if value is None else count(value, name)


def string(value: object, name: str, *, empty: bool = False) -> str:
    """A string; a non-empty one unless ``empty``."""
    if not isinstance(value, str) or (not empty and not value):
        kind = "string" if empty else "non-empty string"
        raise TypeError(f"{name} must be a {kind}, got {value!r}")
    return value


def optional_string(value: object, name: str) -> str | None:
    return None if value is None else string(value, name)


def counts(value: object, name: str) -> tuple[tuple[str, int], ...]:
    """``{label: count}`` as sorted pairs (failures by code)."""
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be an object, got {value!r}")
    return tuple(sorted((string(k, name), count(v, name)) for k, v in value.items()))


def items(value: object, name: str) -> list[object]:
    """A JSON list."""
    if not isinstance(value, list):
        raise TypeError(f"{name} must be a list, got {type(value).__name__}")
    return value


def objects(value: object, name: str) -> list[Mapping[str, Any]]:
    """A JSON list of objects."""
    listed = items(value, name)
    for item in listed:
        if not isinstance(item, Mapping):
            raise TypeError(f"each of {name} must be an object, got {item!r}")
    return cast(list[Mapping[str, Any]], listed)
