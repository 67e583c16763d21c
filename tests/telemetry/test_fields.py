"""Tests for envckpt.telemetry.fields: each JSON field check takes its type, names a bad one."""

from __future__ import annotations

import math

import pytest

from envckpt.telemetry import fields


def test_seconds_takes_finite_non_negative_numbers() -> None:
    """Ints and floats become floats; negatives, infinities, NaN and bools are refused."""
    assert fields.seconds(2, "x") == 2.0
    assert fields.seconds(0.5, "x") == 0.5
    for bad in (-0.1, math.inf, math.nan):
        with pytest.raises(ValueError, match="x must be finite"):
            fields.seconds(bad, "x")
    for bad in (True, "1", None):
        with pytest.raises(TypeError, match="x must be a number"):
            fields.seconds(bad, "x")


def test_counts_are_non_negative_ints() -> None:
    """A count refuses floats, bools and negatives, naming the field."""
    assert fields.count(3, "n") == 3
    for bad in (-1, 1.0, True):
        with pytest.raises(ValueError, match="n must be a non-negative integer"):
            fields.count(bad, "n")
    assert fields.optional_count(None, "n") is None


def test_strings_and_their_empty_form() -> None:
    """A string field refuses non-strings, and an empty string unless asked."""
    assert fields.string("a", "s") == "a"
    assert fields.string("", "s", empty=True) == ""
    with pytest.raises(TypeError, match="non-empty string"):
        fields.string("", "s")
    with pytest.raises(TypeError):
        fields.string(3, "s", empty=True)
    assert fields.optional_string(None, "s") is None


def test_counts_by_label_are_sorted_pairs() -> None:
    """``{code: n}`` becomes sorted pairs; a list or a negative count is refused."""
    assert fields.counts({"b": 1, "a": 2}, "f") == (("a", 2), ("b", 1))
    with pytest.raises(TypeError):
        fields.counts([["a", 1]], "f")
    with pytest.raises(ValueError):
        fields.counts({"a": -1}, "f")


def test_objects_are_a_list_of_json_objects() -> None:
    """A list of objects passes; an object among them that is not one names the field."""
    assert fields.objects([{"a": 1}], "xs") == [{"a": 1}]
    with pytest.raises(TypeError, match="xs must be a list"):
        fields.objects({"a": 1}, "xs")
    with pytest.raises(TypeError, match="each of xs must be an object"):
        fields.objects([{"a": 1}, 2], "xs")
