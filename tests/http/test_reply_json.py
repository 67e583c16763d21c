"""Tests for envckpt.http.reply_json: a reply body as JSON, its depth limit, what is not JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from envckpt.coordination.transport import TransportFailure
from envckpt.http.reply_json import (
    MAX_REPLY_DEPTH,
    control_reply,
    decode_reply,
    has_long_digit_run,
    nests_deeper,
)


def nested(depth: int, opening: bytes = b"[", closing: bytes = b"]") -> bytes:
    """A JSON value ``depth`` levels deep (0: a bare number)."""
    return opening * depth + b"1" + closing * depth


def test_the_depth_limit_is_inclusive() -> None:
    """64 levels decode; 65 are refused before decoding, for arrays and objects alike."""
    assert decode_reply(nested(MAX_REPLY_DEPTH)) == json.loads(nested(MAX_REPLY_DEPTH))
    objects = nested(MAX_REPLY_DEPTH, b'{"a":', b"}")
    assert decode_reply(objects) == json.loads(objects)
    for deeper in (nested(MAX_REPLY_DEPTH + 1), nested(MAX_REPLY_DEPTH + 1, b'{"a":', b"}")):
        with pytest.raises(TransportFailure, match=f"nests deeper than {MAX_REPLY_DEPTH}"):
            decode_reply(deeper)


@pytest.mark.parametrize("depth", [0, 1, 2, 63, 64, 65, 66, 1000])
def test_nests_deeper_counts_levels_exactly(depth: int) -> None:
    """The scan's verdict matches the value's real depth around the limit."""
    assert nests_deeper(nested(depth)) is (depth > MAX_REPLY_DEPTH)
    assert nests_deeper(nested(depth), limit=depth) is False
    assert nests_deeper(nested(depth), limit=depth - 1) is (depth >= 1)


def test_siblings_do_not_add_up_to_depth() -> None:
    """Many brackets side by side are wide, not deep (the count alone would refuse them)."""
    wide = b"[" + b",".join([b"[[1]]"] * 1000) + b"]"
    assert not nests_deeper(wide)
    assert decode_reply(wide) == [[[1]]] * 1000


@pytest.mark.parametrize(
    "body",
    [
        b'["' + b"[" * 100 + b'"]',
        b'{"k":"' + b"{" * 100 + b'"}',
        b'["\\"' + b"[" * 100 + b'"]',  # an escaped quote does not end the string
        b'["\\\\", ' + b"[" * 30 + b"1" + b"]" * 30 + b"]",  # an escaped backslash does
    ],
    ids=["array-in-string", "object-in-string", "escaped-quote", "escaped-backslash"],
)
def test_brackets_inside_strings_do_not_nest(body: bytes) -> None:
    """Brackets in a string are text: the body is shallow and decodes."""
    assert not nests_deeper(body)
    assert decode_reply(body) == json.loads(body)


def test_a_string_hiding_nesting_after_an_escape_is_still_counted() -> None:
    """Tampered escapes: the string ends at the unescaped quote, and what follows is counted."""
    body = b'["a\\\\",' + b"[" * 100 + b"]" * 100 + b"]"
    assert nests_deeper(body)
    with pytest.raises(TransportFailure):
        decode_reply(body)


def test_an_unterminated_string_is_not_json() -> None:
    """Brackets after a lone quote cannot be JSON: the decoder refuses them, nothing recurses."""
    body = b'["' + b"[" * 100_000
    assert not nests_deeper(body)
    assert decode_reply(body) is None


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"Internal Server Error",
        b"<html><body>502 Bad Gateway</body></html>",
        b"[1,]",
        b'{"a":1}{',
        b"NaN",
        b'{"x": Infinity}',
        b'{"x": -Infinity}',
        b'"\xff"',
        b'{"a":"\xc3"}',
        b"\xef\xbb\xbf{}",
        b'"a\x01b"',
    ],
    ids=[
        "empty",
        "blank",
        "text",
        "html",
        "trailing-comma",
        "two-values",
        "nan",
        "infinity",
        "minus-infinity",
        "invalid-utf8",
        "truncated-utf8",
        "bom",
        "control-in-string",
    ],
)
def test_a_body_that_is_not_json_is_none(body: bytes) -> None:
    """Not JSON (and not UTF-8, or the literal NaN/Infinity): None, never a guess or an error."""
    assert decode_reply(body) is None


def test_invalid_utf8_stays_unparsed_even_with_long_digits() -> None:
    """Tampered path: a body the standard library reads (long digits) must be UTF-8 too."""
    assert decode_reply(b'{"n":1234567890123456789012,"s":"\xff"}') is None


@pytest.mark.parametrize("number", [2**63 - 1, 2**63, 2**64 + 1, -(2**63) - 1, 10**30 + 7])
def test_integers_of_any_size_decode_exactly(number: int) -> None:
    """orjson reads an integer beyond 64 bits as a float; the reply keeps every digit."""
    body = json.dumps({"n": number, "s": "ok"}).encode()
    value = decode_reply(body)
    assert value == {"n": number, "s": "ok"}
    assert type(value["n"]) is int


def test_long_digit_runs_inside_strings_decode_the_same() -> None:
    """A 19-digit run in a string takes the standard library's path, to the same value."""
    body = b'{"id":"12345678901234567890123","x":[1.5,true,null]}'
    assert decode_reply(body) == {"id": "12345678901234567890123", "x": [1.5, True, None]}


def test_control_reply_keeps_the_raw_text() -> None:
    """Status, parsed body and the raw text (undecodable bytes replaced) come back together."""
    reply = control_reply(200, b'{"kind":"model"}')
    assert (reply.status, reply.body, reply.raw) == (200, {"kind": "model"}, '{"kind":"model"}')
    plain = control_reply(500, b"boom \xff")
    assert (plain.status, plain.body, plain.raw) == (500, None, "boom \ufffd")


def test_control_reply_refuses_deep_nesting_as_a_transport_failure() -> None:
    """100,000 levels: TransportFailure, not RecursionError."""
    with pytest.raises(TransportFailure):
        control_reply(200, b"[" * 100_000)


@pytest.mark.parametrize("levels", [63, 64, 65])
def test_arrays_and_objects_alternating_count_one_level_each(levels: int) -> None:
    """``[{[{...}]}]`` is as deep as its brackets, whichever kind opens each level."""
    opens = b"".join(b"[" if level % 2 == 0 else b'{"k":' for level in range(levels))
    closes = b"".join(b"]" if level % 2 == 0 else b"}" for level in reversed(range(levels)))
    data = opens + b'"[[[[]"' + closes  # brackets inside a string do not nest
    assert nests_deeper(data) is (levels > MAX_REPLY_DEPTH)
    assert json.loads(data) is not None


def _depth(value: object) -> int:
    """How deep ``value``'s arrays and objects nest (the reference the scan must match)."""
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    return 0


# Strings full of what the scan must see past: brackets, quotes, backslashes.
_TRICKY_TEXT = st.text(alphabet='[]{}"\\ab', max_size=6)
_VALUES = st.recursive(
    st.none() | st.integers() | _TRICKY_TEXT,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(_TRICKY_TEXT, children, max_size=4)
    ),
    max_leaves=40,
)


@given(value=_VALUES, limit=st.integers(min_value=0, max_value=8))
def test_nests_deeper_matches_the_depth_of_any_value(value: object, limit: int) -> None:
    """Any JSON value (strings holding brackets, quotes and escapes, side by side): the
    scan's verdict is the real depth's, with and without escapes in the body."""
    body = json.dumps(value, separators=(",", ":")).encode()
    assert nests_deeper(body, limit) is (_depth(value) > limit)


def test_a_string_of_brackets_beside_an_empty_string_stays_a_string() -> None:
    """Adjacent strings (one closing, the next opening) hide nothing between them."""
    body = b'["' + b"[" * 100 + b'","",' + b"[" * 3 + b"]" * 3 + b"]"
    assert nests_deeper(body, limit=3)
    assert not nests_deeper(body, limit=4)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"1234567890123456789", True),
        (b"123456789012345678", False),
        (b'{"a":123456789,"b":0123456789}', False),  # runs apart do not join
        (b"x0000000000000000000x", True),
        (b"", False),
    ],
)
def test_a_long_digit_run_is_19_digits_in_a_row(data: bytes, expected: bool) -> None:
    """19 digits in a row, no fewer, and only in a row."""
    assert has_long_digit_run(data) is expected
