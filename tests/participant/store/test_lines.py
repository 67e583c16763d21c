"""Tests for envckpt.participant.store.lines: one record line, encoded fast and decoded exactly."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import re
from typing import Any

import pytest

from envckpt.errors import CorruptCheckpoint
from envckpt.participant.store import lines
from envckpt.participant.store.lines import decode_record, encode_record


class Colour(enum.IntEnum):
    RED = 1


@dataclasses.dataclass
class Point:
    x: int


def _stdlib(record: dict[str, Any]) -> dict[str, Any]:
    # What the line means, as the standard library reads it back.
    decoded: dict[str, Any] = json.loads(json.dumps(record))
    return decoded


def test_a_record_is_one_compact_utf8_line_in_key_order() -> None:
    """Compact separators, keys in insertion order, text as UTF-8, no newline."""
    line = encode_record({"zeta": 1, "alpha": [1.5, None, "é\n☃"], "b": {"y": True, "a": 2}})
    assert line == '{"zeta":1,"alpha":[1.5,null,"é\\n☃"],"b":{"y":true,"a":2}}'.encode()
    assert b"\n" not in line


@pytest.mark.parametrize(
    "record",
    [
        {"x": float("nan")},
        {"x": float("inf")},
        {"x": -float("inf")},
        {"real": None, "x": [1, {"y": float("nan")}]},
        {"text": "null", "x": float("nan")},
    ],
)
def test_nan_and_infinity_are_refused_anywhere(record: dict[str, Any]) -> None:
    """Non-finite floats are not JSON: refused however deep, beside real nulls or not."""
    with pytest.raises(ValueError):
        encode_record(record)


def test_without_the_null_check_nan_would_be_written_as_null(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check is what refuses NaN: skipped, orjson's null would be written silently."""
    monkeypatch.setattr(lines, "_NULL", re.compile(rb"(?!)"))
    assert encode_record({"x": float("nan")}) == b'{"x":null}'


@pytest.mark.parametrize(
    "record",
    [
        {"big": 2**70, "small": -(2**64)},
        {"surrogate": "\ud800 alone"},
        {1: "int key", None: "none key"},
        {"colour": Colour.RED},
    ],
)
def test_what_orjson_refuses_is_written_by_the_standard_library(record: dict[Any, Any]) -> None:
    """Integers beyond 64 bits, lone surrogates and non-string keys read back as the
    standard library writes them."""
    line = encode_record(record)
    assert decode_record(line, line_no=1, where="x") == _stdlib(record)


@pytest.mark.parametrize("value", [datetime.datetime(2026, 1, 1), Point(1), object(), {1, 2}])
def test_what_a_restore_could_not_give_back_is_refused(value: object) -> None:
    """Datetimes, dataclasses and other non-JSON values are a TypeError, as before."""
    with pytest.raises(TypeError):
        encode_record({"x": value})


def test_decoding_refuses_what_is_not_one_json_object() -> None:
    """NaN, a list, bad UTF-8 and truncated JSON are CorruptCheckpoint naming the line."""
    for line in (b'{"a":NaN}', b"[1,2]", b'{"a":"\xff"}', b'{"a":'):
        with pytest.raises(CorruptCheckpoint, match="line 7"):
            decode_record(line, line_no=7, where="records.jsonl")


def test_decoding_keeps_big_integers_exact() -> None:
    """An integer beyond 64 bits comes back as that integer, not a float."""
    assert decode_record(b'{"n":1180591620717411303424}', line_no=1, where="x") == {"n": 2**70}


def test_encode_records_writes_what_encode_record_writes_for_each() -> None:
    """The lazy loop gives encode_record's bytes for plain, fallback and mapping records."""
    from types import MappingProxyType

    records: list[Any] = [
        {"zeta": 1, "none": None, "text": "é\n"},
        {"big": 2**70},
        {1: "int key"},
        MappingProxyType({"a": [1, 2]}),
        {"colour": Colour.RED},
    ]
    assert list(lines.encode_records(records)) == [encode_record(r) for r in records]


@pytest.mark.parametrize("bad", [{"x": float("nan")}, {"x": [None, float("inf")]}])
def test_encode_records_refuses_nan_and_infinity(bad: dict[str, Any]) -> None:
    """A non-finite float is refused by the lazy loop as by encode_record."""
    with pytest.raises(ValueError):
        list(lines.encode_records([{"ok": 1}, bad]))


def test_encode_records_refuses_what_encode_record_refuses() -> None:
    """A value no encoder writes is the same TypeError."""
    with pytest.raises(TypeError):
        list(lines.encode_records([{"x": object()}]))
